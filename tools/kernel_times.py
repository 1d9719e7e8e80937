# Sums an Nsight Compute CSV (ncu --csv --metrics gpu__time_duration.sum) by kernel name and prints
# the kernels that take the most time, with their share of the total: where a training step goes.
#   python3 tools/kernel_times.py ncu.csv [--top 25]
import argparse
import collections
import csv
import sys


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("csv")
    p.add_argument("--top", type=int, default=25)
    a = p.parse_args()
    total_ns, count = collections.Counter(), collections.Counter()
    with open(a.csv) as f:
        rows = [line for line in f if line.startswith('"')]  # skip ncu's own log lines
    for row in csv.DictReader(rows):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = row["Kernel Name"].split("(")[0][:90]
        total_ns[name] += float(row["Metric Value"].replace(",", ""))  # ncu groups digits
        count[name] += 1
    grand = sum(total_ns.values())
    if not grand:
        print("kernel_times: no gpu__time_duration rows")
        return 1
    print(f"{'ms':>9} {'share':>6} {'calls':>6}  kernel")
    for name, ns in total_ns.most_common(a.top):
        print(f"{ns / 1e6:9.3f} {100 * ns / grand:5.1f}% {count[name]:6d}  {name}")
    print(f"{grand / 1e6:9.3f} total over {sum(count.values())} kernel launches")
    return 0


if __name__ == "__main__":
    sys.exit(main())
