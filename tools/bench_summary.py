# The side-by-side table of a tools/gpu-check.sh results file: every `tessera bench train --json` run beside
# the PyTorch run of the same shape that follows it (else the last one before it; bench/torch_*_cuda.py
# --json), one markdown row each, with the targets the project set for GPT-2 on one H100 (T=1024, bf16)
# checked where they apply. Where the file holds runs of more than one build (gpu-check.sh's `ab`
# section: a baseline commit's binary beside this one's), the rows name their commit and a second table
# sets each commit's median beside the first's, per shape and variant.
#   python3 tools/bench_summary.py bench/results/gpu-check-2026-11-26T1538Z.txt
import argparse
import json
import statistics
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
    """(Tessera run, the next PyTorch run of its shape, else the last before it, or None) for every Tessera
    run with figures."""
    out = []
    for i, r in enumerate(results):
        if "model" not in r or "tokens_per_s" not in r:
            continue
        same = lambda t: t.get("impl") == "pytorch" and "tokens_per_s" in t and shape(t) == shape(r)
        torch = next((t for t in results[i + 1:] if same(t)), None) or next(
            (t for t in reversed(results[:i]) if same(t)), None)
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


def ab_table(rows):
    """Per (shape, variant) run by more than one commit: each commit's median tokens/s against the first
    commit's (the file's order: gpu-check.sh's `ab` runs the baseline first)."""
    groups = {}
    for r, _ in rows:
        groups.setdefault((shape(r), variant(r)), {}).setdefault(r.get("commit", "?"), []).append(r["tokens_per_s"])
    lines = []
    for ((model, batch, accum, seq_len, dtype), how), by_commit in groups.items():
        if len(by_commit) < 2:
            continue
        first = statistics.median(next(iter(by_commit.values())))
        for commit, rates in by_commit.items():
            median = statistics.median(rates)
            lines.append(f"| {model} | {batch} x {accum} | {seq_len} | {dtype} | {how} | {commit} | {len(rates)} "
                         f"| {median:,.0f} | {median / first:.3f}x |")
    return lines


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
    commits = len({r.get("commit") for r, _ in rows}) > 1
    for r, torch in rows:
        ratio = r["tokens_per_s"] / torch["tokens_per_s"] if torch else None
        how = variant(r) + (f", commit {r.get('commit', '?')}" if commits else "")
        print(f"| {r['model']} | {r['batch']} x {r.get('grad_accum', 1)} | {r['seq_len']} | {r['dtype']} "
              f"| {how} | {rate(r)} | {r.get('peak_mem_gib', 0):.1f} "
              f"| {rate(torch) if torch else '-'} | {f'{ratio:.2f}x' if ratio else '-'} | {verdict(r, ratio)} |")
    ab = ab_table(rows) if commits else []
    if ab:
        print("\n| model | B x accum | T | dtype | Tessera run | commit | runs | median tok/s | vs the first |")
        print("|---|---|---|---|---|---|---|---|---|")
        print("\n".join(ab))
    return 0


if __name__ == "__main__":
    sys.exit(main())
