# tools/gpu_timeline.py on a made-up CUDA GPU trace in nsys's CSV layout: three steps, each a marker
# kernel, a copy and further kernels with known waits between them; the median step's kernel, copy and
# idle times and its longest wait come out exactly.
#   python3 tests/bench/test_gpu_timeline.py
import os
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TOOL = os.path.join(ROOT, "tools", "gpu_timeline.py")


def expect(condition, message):
    if not condition:
        sys.exit(f"FAIL: {message}")


def trace(rows):
    lines = ['"Start (ns)","Duration (ns)","CorrId","GrdX","Strm","Name"']
    for start, duration, name in rows:
        lines.append(f'"{start:,}","{duration:,}","1","132","7","{name}"')  # nsys may group digits
    return "\n".join(lines) + "\n"


def step(t0, wait_us):
    """A step from t0: marker 10 us, wait 2 us, H2D copy 3 us, kernel 20 us, wait wait_us, kernel 5 us."""
    rows, t = [], t0
    for duration, gap, name in [(10_000, 2_000, "void encoder_forward_kernel<bf16>(float *)"),
                                (3_000, 0, "[CUDA memcpy Host-to-Device]"),
                                (20_000, wait_us * 1000, "nvjet_sm90_tst_256x128"),
                                (5_000, 1_000, "void adamw_update_kernel<bf16>(float *)")]:
        rows.append((t, duration, name))
        t += duration + gap
    return rows, t


def main():
    rows, t = [], 1_000_000
    for wait_us in (40, 10, 70):  # the median step is the one with the 40 us wait
        more, t = step(t, wait_us)
        rows += more
    rows.append((t, 10_000, "void encoder_forward_kernel<bf16>(float *)"))  # closes the third step
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
        f.write("Generating SQLite file.\nProcessing [report.sqlite] with [cuda_gpu_trace.py]...\n")
        f.write(trace(rows))
    out = subprocess.run([sys.executable, TOOL, f.name, "--step-kernel", "encoder_forward", "--top", "2"],
                         capture_output=True, text=True)
    os.unlink(f.name)
    expect(out.returncode == 0, f"exit {out.returncode}: {out.stderr}")
    text = out.stdout
    expect("3 steps traced" in text, text)
    # The median step: 10 + 3 + 20 + 5 = 38 us of work, waits 2 + 40 + 1 = 43 us, span 81 us.
    expect("the median step: 0.081 ms = kernels 0.035 + copies and memsets 0.003 + nothing running 0.043 (53.1%)"
           " in 3 waits" in text, text)
    expect("waits under 5 us (launch to launch): 2, 0.003 ms" in text, text)
    expect("  [CUDA memcpy Host-to-Device]: 1, 0.003 ms" in text, text)
    lines = text.splitlines()
    longest = lines[lines.index("  the longest 2:") + 1]
    expect("40.0 us  after nvjet_sm90_tst_256x128  before void adamw_update_kernel<bf16>" in longest, longest)
    missing = subprocess.run([sys.executable, TOOL, f.name + ".none", "--step-kernel", "x"], capture_output=True)
    expect(missing.returncode != 0, "a missing file fails")
    print("ok: gpu_timeline")


if __name__ == "__main__":
    main()
