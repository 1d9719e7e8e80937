# CPU smoke test of PyTorch's side of the GPU training-step benchmark (bench/torch_gpt2_cuda.py,
# bench/torch_llama_cuda.py on bench/torch_bench_harness.py): each script runs two steps of its tiny preset
# under Debian's torch and prints JSON with the keys tools/gpu-check.sh and bench/results/ read, an initial
# loss near ln(vocab), and the FLOPs per token and parameter count that `tessera bench train` reports for the
# same preset, so MFU figures compare. Exits 77 (ctest's skip) when /usr/bin/python3 has no torch.
# Usage: /usr/bin/python3 tests/bench/test_torch_bench.py --tessera build/tessera
import argparse
import json
import math
import os
import subprocess
import sys

PYTHON = "/usr/bin/python3"  # the interpreter with Debian's python3-torch
SKIP = 77
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMOKE_FLAGS = ["--device", "cpu", "--compile", "off", "--dtype", "fp32", "--steps", "2", "--warmup", "1", "--json"]
SEQ_LEN = 64  # the tiny presets' context

# The harness's fields, which both scripts print.
COMMON_KEYS = {
    "impl", "torch_version", "device", "device_name", "dtype", "compile", "preset", "layers", "heads",
    "channels", "vocab", "padded_vocab", "seq_len", "batch", "grad_accum", "tokens_per_step", "steps", "warmup",
    "num_params", "num_params_unpadded", "tokens_per_s", "tokens_per_s_mean", "ms_per_step", "ms_per_step_min",
    "ms_per_step_max", "ms_per_step_mean", "peak_mem_gib", "flops_per_token", "peak_tflops", "mfu", "mfu_mean",
    "mfu_note", "final_loss", "attention", "logits", "optimizer", "tf32",
}
# GPT-2's keys are exactly the common ones: tools/gpu-check.sh and bench/results/ depend on them.
CASES = [
    ("torch_gpt2_cuda.py", "gpt2-tiny", COMMON_KEYS),
    ("torch_llama_cuda.py", "llama-tiny",
     COMMON_KEYS | {"kv_heads", "mlp_hidden", "tied_embeddings", "rope_theta", "rope_factor"}),
]


def last_json_line(cmd):
    """The last stdout line of cmd that is a JSON object; raises with cmd's output when it fails."""
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"{' '.join(cmd)} printed no JSON line:\n{done.stdout}")
    return json.loads(lines[-1])


def key_errors(name, result, expected):
    errors = []
    if set(result) - expected:
        errors.append(f"{name}: unexpected keys {sorted(set(result) - expected)}")
    if expected - set(result):
        errors.append(f"{name}: missing keys {sorted(expected - set(result))}")
    return errors


def loss_errors(name, result):
    """At initialisation (weights ~ N(0, 0.02)) the logits are near 0: the loss is near ln(vocab)."""
    loss, expected = result["final_loss"], math.log(result["vocab"])
    if not isinstance(loss, (int, float)) or not math.isfinite(loss) or abs(loss - expected) > 0.5:
        return [f"{name}: final_loss {loss} is not within 0.5 of ln(vocab) = {expected:.4f}"]
    return []


def tessera_errors(name, result, tessera):
    """flops_per_token and num_params as Tessera counts them for the same preset and sequence length."""
    errors = []
    for key in ("seq_len", "num_params", "flops_per_token"):
        if result[key] != tessera[key]:
            errors.append(f"{name}: {key} {result[key]} but tessera bench train reports {tessera[key]}")
    return errors


def check(script, preset, expected_keys, tessera_exe):
    name = f"{script} --preset {preset}"
    result = last_json_line([PYTHON, os.path.join(ROOT, "bench", script), "--preset", preset] + SMOKE_FLAGS)
    tessera = last_json_line([tessera_exe, "bench", "train", "--model", preset, "--device", "cpu", "--steps", "1",
                              "--warmup", "0", "--seq-len", str(SEQ_LEN), "--json"])
    errors = key_errors(name, result, expected_keys)
    if errors:  # the checks below read the keys
        return errors
    return loss_errors(name, result) + tessera_errors(name, result, tessera)


def has_torch():
    return os.access(PYTHON, os.X_OK) and subprocess.run([PYTHON, "-c", "import torch"],
                                                         capture_output=True, check=False).returncode == 0


def main():
    p = argparse.ArgumentParser(description="CPU smoke test of bench/torch_*_cuda.py against tessera.")
    p.add_argument("--tessera", required=True, help="the tessera binary")
    args = p.parse_args()
    if not has_torch():
        print(f"skipped: {PYTHON} has no torch (Debian's python3-torch)")
        sys.exit(SKIP)
    errors = []
    for script, preset, keys in CASES:
        errors += check(script, preset, keys, args.tessera)
    for e in errors:
        print("FAIL", e)
    if errors:
        sys.exit(1)
    print(f"ok: {len(CASES)} scripts")


if __name__ == "__main__":
    main()
