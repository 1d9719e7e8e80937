# Appends one benchmark record (date, machine, command, runs) to a bench/results/*.jsonl file; used by
# the CPU benchmark scripts' summaries (run from the repository root).
import datetime
import json
import subprocess


def append_record(path, command, runs):
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    record = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "machine": f"{cpu}, {subprocess.check_output(['nproc']).decode().strip()} cores",
              "command": command, "runs": runs}
    open(path, "a").write(json.dumps(record) + "\n")
