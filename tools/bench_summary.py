# The side-by-side table of a tools/gpu-check.sh results file: every `tessera bench train --json` run beside
# the PyTorch run of the same shape that follows it (bench/torch_*_cuda.py --json), one markdown row each,
# with the targets the project set for GPT-2 on one H100 (T=1024, bf16) checked where they apply.
#   python3 tools/bench_summary.py bench/results/gpu-check-2026-11-26T1538Z.txt
import argparse
import json
import sys

# model -> the figures a Tessera run must reach: tokens/s, the ratio to compiled PyTorch, MFU.
TARGETS = {
    "gpt2-124m": {"tokens_per_s": 550_000, "ratio": 1.15, "mfu": 0.45},
    "gpt2-1558m": {"mfu": 0.50},
}
TARGET_SEQ_LEN, TARGET_DTYPE = 1024, "bf16"


def runs(path):
    """The JSON lines of the file, in order: Tessera's carry "model", PyTorch's "preset"."""
    out = []
    with open(path) as f:
        for line in f:
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a line cut short by a timeout
    return out


def shape(r):
    return (r.get("model") or r.get("preset"), r.get("batch"), r.get("grad_accum", 1), r.get("seq_len"),
            r.get("dtype"))


def pairs(results):
    """(Tessera run, the next PyTorch run of its shape or None) for every Tessera run with figures."""
    out = []
    for i, r in enumerate(results):
        if "model" not in r or "tokens_per_s" not in r:
            continue
        torch = next((t for t in results[i + 1:] if t.get("impl") == "pytorch" and "tokens_per_s" in t
                      and shape(t) == shape(r)), None)
        out.append((r, torch))
    return out


def variant(r):
    """How the Tessera run differs from the default: attention kernels, determinism, tuning, fp8, moments."""
    parts = [f"attention {r.get('attention_used') or r.get('attention_kernel', '?')}"]
    if r.get("deterministic") is False:
        parts.append("nondeterministic")
    if r.get("matmul_tuning", 1) > 1:
        parts.append(f"tuning {r['matmul_tuning']}")
    if r.get("fp8", "off") != "off":
        parts.append(f"fp8 {r['fp8']}")
    if r.get("optimizer_moments", "fp32") != "fp32":
        parts.append(f"{r['optimizer_moments']} moments")
    return ", ".join(parts)


def verdict(r, ratio):
    """'met', 'missed: ...' naming each figure short of its target, or '' where no target applies."""
    target = TARGETS.get(r["model"])
    if not target or r.get("seq_len") != TARGET_SEQ_LEN or r.get("dtype") != TARGET_DTYPE:
        return ""
    figures = {"tokens_per_s": r["tokens_per_s"], "ratio": ratio, "mfu": r.get("mfu")}
    short = [name for name, least in target.items() if figures[name] is None or figures[name] < least]
    return "met" if not short else "missed: " + ", ".join(short)


def rate(r):
    mfu = f" ({100 * r['mfu']:.1f}%)" if r.get("mfu") else ""
    return f"{r['tokens_per_s']:,.0f}{mfu}"


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("results", help="a tools/gpu-check.sh results file")
    a = p.parse_args()
    rows = pairs(runs(a.results))
    if not rows:
        print(f"bench_summary: no `tessera bench train --json` runs in {a.results}")
        return 1
    print("| model | B x accum | T | dtype | Tessera run | Tessera tok/s (MFU) | GiB | PyTorch tok/s (MFU) | ratio "
          "| targets |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r, torch in rows:
        ratio = r["tokens_per_s"] / torch["tokens_per_s"] if torch else None
        print(f"| {r['model']} | {r['batch']} x {r.get('grad_accum', 1)} | {r['seq_len']} | {r['dtype']} "
              f"| {variant(r)} | {rate(r)} | {r.get('peak_mem_gib', 0):.1f} "
              f"| {rate(torch) if torch else '-'} | {f'{ratio:.2f}x' if ratio else '-'} | {verdict(r, ratio)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
