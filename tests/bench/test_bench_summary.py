# tools/bench_summary.py on a recorded GPU check (bench/results/gpu-check-2026-11-26T1538Z.txt) and on a
# made-up one: the rows pair each Tessera run with the PyTorch run of its shape, and the targets' verdicts;
# and on runs of two commits (an A/B), which the rows name and a second table sets side by side.
#   python3 tests/bench/test_bench_summary.py
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TOOL = os.path.join(ROOT, "tools", "bench_summary.py")


def table(path):
    out = subprocess.run([sys.executable, TOOL, path], capture_output=True, text=True, check=True).stdout
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in out.splitlines()[2:]]


def expect(condition, message):
    if not condition:
        sys.exit(f"FAIL: {message}")


def recorded():
    rows = table(os.path.join(ROOT, "bench", "results", "gpu-check-2026-11-26T1538Z.txt"))
    expect(len(rows) == 3, f"three Tessera runs, got {rows}")
    b16, b64, xl = rows
    expect(b16[:4] == ["gpt2-124m", "16 x 1", "1024", "bf16"], f"the B=16 row's shape: {b16}")
    expect(b16[5] == "485,376 (39.4%)" and b16[7] == "440,717 (35.8%)" and b16[8] == "1.10x", f"B=16: {b16}")
    expect(b16[9] == "missed: tokens_per_s, ratio, mfu", f"B=16 verdict: {b16[9]}")
    expect(b64[8] == "1.16x" and b64[9] == "missed: tokens_per_s, mfu", f"B=64 (ratio met): {b64}")
    expect(xl[0] == "gpt2-1558m" and xl[5] == "47,854 (47.5%)" and xl[9] == "missed: mfu", f"1558M: {xl}")


def made_up():
    tessera = {"model": "gpt2-124m", "batch": 64, "grad_accum": 1, "seq_len": 1024, "dtype": "bf16",
               "tokens_per_s": 560000.0, "mfu": 0.455, "peak_mem_gib": 25.7, "deterministic": False,
               "attention_used": "cudnn"}
    torch = {"impl": "pytorch", "preset": "gpt2-124m", "batch": 64, "grad_accum": 1, "seq_len": 1024,
             "dtype": "bf16", "tokens_per_s": 460000.0, "mfu": 0.374}
    alone = dict(tessera, model="llama3.2-1b", batch=4, seq_len=2048, deterministic=True, optimizer_moments="bf16")
    other_shape = dict(torch, batch=16)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("== bench\n$ tessera bench train ...\n")
        for r in (tessera, other_shape, torch, alone):
            f.write(json.dumps(r) + "\n")
        f.write('{"attention_kernel": "auto", "cut short\n')  # a run killed mid-line
    try:
        rows = table(f.name)
    finally:
        os.unlink(f.name)
    expect(len(rows) == 2, f"two Tessera runs, got {rows}")
    met, llama = rows
    expect(met[4] == "attention cudnn, nondeterministic", f"the run's variant: {met[4]}")
    expect(met[7] == "460,000 (37.4%)" and met[8] == "1.22x" and met[9] == "met", f"paired past the B=16 run: {met}")
    expect(llama[7] == "-" and llama[8] == "-" and llama[9] == "", f"no PyTorch run, no target: {llama}")
    expect(llama[4] == "attention cudnn, bf16 moments", f"the bf16 moments' variant: {llama[4]}")


def two_commits():
    """gpu-check.sh's `ab` section: a baseline commit's runs and this one's, alternating, then PyTorch's."""
    base = {"model": "gpt2-124m", "batch": 16, "grad_accum": 1, "seq_len": 1024, "dtype": "bf16", "mfu": 0.43,
            "peak_mem_gib": 8.8, "attention_used": "cudnn"}
    torch = {"impl": "pytorch", "preset": "gpt2-124m", "batch": 16, "grad_accum": 1, "seq_len": 1024, "dtype": "bf16",
             "tokens_per_s": 450000.0, "mfu": 0.37}
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        for old, new in ((500000.0, 520000.0), (510000.0, 530000.0), (505000.0, 525000.0)):
            f.write(json.dumps(dict(base, commit="aaaaaaa", tokens_per_s=old)) + "\n")
            f.write(json.dumps(dict(base, commit="bbbbbbb+", tokens_per_s=new)) + "\n")
        f.write(json.dumps(torch) + "\n")
    try:
        out = subprocess.run([sys.executable, TOOL, f.name], capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(f.name)
    main, ab = out.split("\n\n")
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in main.splitlines()[2:]]
    expect(len(rows) == 6, f"six runs: {rows}")
    expect(rows[0][4] == "attention cudnn, commit aaaaaaa" and rows[1][4] == "attention cudnn, commit bbbbbbb+",
           f"the rows name their commits: {rows[0][4]}, {rows[1][4]}")
    expect(rows[1][8] == "1.16x", f"each paired with the PyTorch run: {rows[1]}")
    ab_rows = [[c.strip() for c in line.strip("|").split("|")] for line in ab.splitlines()[2:]]
    expect(ab_rows == [["gpt2-124m", "16 x 1", "1024", "bf16", "attention cudnn", "aaaaaaa", "3", "505,000", "1.000x"],
                       ["gpt2-124m", "16 x 1", "1024", "bf16", "attention cudnn", "bbbbbbb+", "3", "525,000",
                        "1.040x"]], f"medians against the first commit: {ab_rows}")


if __name__ == "__main__":
    recorded()
    made_up()
    two_commits()
    print("ok: bench_summary")
