# Where the GPU waits during a training step, from a real run's timeline: Nsight Systems' CUDA GPU trace
# (nsys stats --report cuda_gpu_trace --format csv) of tessera bench train. Each step runs from one
# launch of --step-kernel (e.g. encoder_forward) to the next; of the median step it prints the span, the
# time kernels ran, the time copies and memsets ran, and the time the GPU did nothing (launch gaps, host
# waits), each kind of copy and memset with its count (a stray allocation's zeroing shows there), then
# the longest waits with what ran before and after each: whether CUDA graphs, or removing a
# synchronisation, would pay, and where. Unlike tools/kernel_times.py's Nsight Compute sums, which
# time each kernel alone (and at clocks a sustained run may not hold), this is the run as it ran.
#   python3 tools/gpu_timeline.py trace.csv --step-kernel encoder_forward [--top 10]
import argparse
import csv
import os
import statistics
import sys


def column(header, *words):
    """The index of the first column whose name holds every word (nsys names them e.g. 'Start (ns)')."""
    for i, name in enumerate(header):
        if all(w in name for w in words):
            return i
    sys.exit(f"gpu_timeline: no column named like {' '.join(words)!r} in {header}")


def activities(path):
    """(start ns, end ns, name) of every kernel, copy and memset, by start."""
    if not os.path.isfile(path):
        sys.exit(f"gpu_timeline: no file {path}; make it with nsys stats --report cuda_gpu_trace --format csv")
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    first = next((i for i, row in enumerate(rows) if any("Start" in cell for cell in row)), None)
    if first is None:
        sys.exit(f"gpu_timeline: {path} has no header with a Start column; is it a cuda_gpu_trace CSV?")
    header = rows[first]
    start, duration, name = column(header, "Start"), column(header, "Duration"), column(header, "Name")
    out = []
    for row in rows[first + 1:]:
        if len(row) <= max(start, duration, name) or not row[start].strip():
            continue
        begin = float(row[start].replace(",", ""))
        out.append((begin, begin + float(row[duration].replace(",", "")), row[name]))
    return sorted(out)


def is_memory_op(name):
    return name.startswith("[CUDA mem")  # [CUDA memcpy Host-to-Device], [CUDA memset], ...


def step_report(acts, first, last):
    """Span, kernel, memory-op and idle ns from acts[first] up to the start of acts[last] (the next step's
    first), and the step's waits (ns, the activity before, the one after)."""
    kernels = memory = idle = 0.0
    gaps, memory_ops = [], {}
    busy_until, before = acts[first][0], None
    for i in range(first, last + 1):
        begin, end, name = acts[i]
        if begin > busy_until:
            idle += begin - busy_until
            gaps.append((begin - busy_until, before, name))
        if i == last:
            break  # the next step's first activity: only the wait before it counts here
        if is_memory_op(name):
            memory += end - begin
            count, ns = memory_ops.get(name, (0, 0.0))
            memory_ops[name] = (count + 1, ns + end - begin)
        else:
            kernels += end - begin
        if end > busy_until:
            busy_until, before = end, name
    return {"span": acts[last][0] - acts[first][0], "kernels": kernels, "memory": memory, "idle": idle, "gaps": gaps,
            "memory_ops": memory_ops}


def short(name):
    return (name or "(step start)").split("(")[0][:70]


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("csv")
    p.add_argument("--step-kernel", required=True, help="the first kernel of every step (a substring of its name)")
    p.add_argument("--top", type=int, default=10, help="how many of the longest waits to list")
    a = p.parse_args()
    acts = activities(a.csv)
    marks = [i for i, (_, _, name) in enumerate(acts) if a.step_kernel in name]
    if len(marks) < 2:
        print(f"gpu_timeline: '{a.step_kernel}' starts fewer than two steps in {a.csv}; trace more steps")
        return 1
    steps = [step_report(acts, m, n) for m, n in zip(marks, marks[1:])]
    median = sorted(steps, key=lambda s: s["span"])[len(steps) // 2]
    ms = lambda ns: ns / 1e6
    print(f"{len(steps)} steps traced, spans {ms(min(s['span'] for s in steps)):.3f} to "
          f"{ms(max(s['span'] for s in steps)):.3f} ms (median {ms(statistics.median(s['span'] for s in steps)):.3f})")
    print(f"the median step: {ms(median['span']):.3f} ms = kernels {ms(median['kernels']):.3f} + copies and memsets "
          f"{ms(median['memory']):.3f} + nothing running {ms(median['idle']):.3f} "
          f"({100 * median['idle'] / median['span']:.1f}%) in {len(median['gaps'])} waits")
    for name, (count, ns) in sorted(median["memory_ops"].items()):
        print(f"  {name}: {count}, {ms(ns):.3f} ms")  # each a stream operation of its own, with its waits
    small = [g for g in median["gaps"] if g[0] < 5000]
    print(f"  waits under 5 us (launch to launch): {len(small)}, {ms(sum(g[0] for g in small)):.3f} ms")
    print(f"  the longest {a.top}:")
    for ns, before, after in sorted(median["gaps"], reverse=True)[:a.top]:
        print(f"  {ns / 1e3:9.1f} us  after {short(before)}  before {short(after)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
