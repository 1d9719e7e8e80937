# Appends one benchmark record (date, machine, command, runs) to a bench/results/*.jsonl file; used by
# the CPU benchmark scripts' summaries (run from the repository root).
import datetime
import json
import os


def append_record(path, command, runs):
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    record = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              # os.cpu_count(), not nproc: nproc follows OMP_NUM_THREADS, which the scripts set to 1
              "machine": f"{cpu}, {os.cpu_count()} cores",
              "command": command, "runs": runs}
    open(path, "a").write(json.dumps(record) + "\n")


def runs_of(listing):
    """{run name: its metrics.jsonl} from the "NAME PATH" lines a benchmark script prints per run."""
    return dict(line.split() for line in listing.strip().splitlines())


def step_lines(path, warm_up=2):
    """A run's step lines (its metrics lines with a loss), and those after the first `warm_up` steps."""
    lines = [json.loads(l) for l in open(path) if '"loss"' in l]
    return lines, lines[warm_up:]
