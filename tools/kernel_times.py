# Sums an Nsight Compute CSV (ncu --csv --metrics gpu__time_duration.sum) by kernel name and prints
# the kernels that take the most time, with their share of the total, then the total by part (GEMMs,
# attention, cross-entropy, norms, optimizer): where a training step goes.
#   python3 tools/kernel_times.py ncu.csv [--top 25] [--step-kernel NAME [--step-ms MS]]
# --step-kernel names the first kernel of every step (a substring, e.g. encoder_forward): only the
# launches from its first appearance up to its next one count, which is exactly one step. --step-ms,
# the step's wall time measured without the profiler, then says how much of it no kernel ran
# (launch gaps and host waits), when ncu ran at the real clocks (--clock-control none).
import argparse
import collections
import csv
import re
import sys

# What a kernel is part of, by its name: the first pattern that matches.
CATEGORIES = [
    ("GEMM (cuBLASLt) and bias gradients", r"nvjet|gemm|splitKreduce|cublasLt|Bgrad|accumulate_kernel|matrix_column_sums"),
    ("attention", r"sdpa|flash|attention|cudnn::|dot_do_o|matmul_dq"),
    ("cross-entropy", r"cross_entropy"),
    ("norms and their parameter sums", r"layernorm|rmsnorm|column_sums"),
    ("optimizer (AdamW, gradient norm)", r"adamw|squared_norm|scale_inplace"),
    ("embedding (and its backward's sort)", r"encoder_|slice_rows|Radix|Onesweep|cub::"),
]


def launches(path):
    """(kernel name, ns) per launch, in launch order."""
    with open(path) as f:
        rows = [line for line in f if line.startswith('"')]  # skip ncu's own log lines
    out = []
    for row in csv.DictReader(rows):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = row["Kernel Name"].split("(")[0][:90]
        out.append((name, float(row["Metric Value"].replace(",", ""))))  # ncu groups digits
    return out


def one_step(runs, marker):
    """The launches from the first one whose name holds `marker` up to (not including) the next such."""
    starts = [i for i, (name, _) in enumerate(runs) if marker in name]
    if len(starts) < 2:
        return None
    return runs[starts[0]:starts[1]]


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("csv")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--step-kernel", help="the first kernel of every step (a substring of its name)")
    p.add_argument("--step-ms", type=float, help="the step's wall time without the profiler, in ms")
    a = p.parse_args()
    runs = launches(a.csv)
    if a.step_kernel:
        step = one_step(runs, a.step_kernel)
        if step is None:
            print(f"kernel_times: '{a.step_kernel}' starts fewer than two steps in {a.csv}; profile more launches")
            return 1
        runs = step
    total_ns, count = collections.Counter(), collections.Counter()
    for name, ns in runs:
        total_ns[name] += ns
        count[name] += 1
    grand = sum(total_ns.values())
    if not grand:
        print("kernel_times: no gpu__time_duration rows")
        return 1
    print(f"{'ms':>9} {'share':>6} {'calls':>6}  kernel")
    for name, ns in total_ns.most_common(a.top):
        print(f"{ns / 1e6:9.3f} {100 * ns / grand:5.1f}% {count[name]:6d}  {name}")
    by_category = collections.Counter()
    for name, ns in total_ns.items():
        by_category[next((c for c, pattern in CATEGORIES if re.search(pattern, name)), "other")] += ns
    print("by part:")
    for category, ns in by_category.most_common():
        print(f"{ns / 1e6:9.3f} {100 * ns / grand:5.1f}%         {category}")
    what = "one step" if a.step_kernel else "total"
    print(f"{grand / 1e6:9.3f} {what} over {len(runs)} kernel launches")
    if a.step_kernel and a.step_ms:
        idle = a.step_ms - grand / 1e6
        print(f"step {a.step_ms:.3f} ms measured: kernels {grand / 1e6:.3f} ms, no kernel running "
              f"{idle:.3f} ms ({100 * idle / a.step_ms:.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
