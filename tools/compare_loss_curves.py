# Compares the per-step training loss of two runs' metrics.jsonl (a reference and a candidate, e.g.
# fp32 on the CPU and the GPU run): prints both curves side by side and the largest relative
# difference; exits 1 when it exceeds --tolerance (default 2%).
#   python3 tools/compare_loss_curves.py REF.jsonl CANDIDATE.jsonl [--tolerance 0.02]
import argparse
import json
import sys


def losses(path):
    out = {}
    with open(path) as f:
        for line in f:
            j = json.loads(line)
            if "loss" in j:
                out[j["step"]] = j["loss"]
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("reference")
    p.add_argument("candidate")
    p.add_argument("--tolerance", type=float, default=0.02)
    a = p.parse_args()
    ref, cand = losses(a.reference), losses(a.candidate)
    steps = sorted(set(ref) & set(cand))
    if not steps:
        print("compare_loss_curves: no common steps")
        return 1
    worst = 0.0
    print(f"{'step':>5} {'reference':>10} {'candidate':>10} {'rel diff':>9}")
    for s in steps:
        rel = abs(cand[s] - ref[s]) / abs(ref[s])
        worst = max(worst, rel)
        print(f"{s:>5} {ref[s]:>10.5f} {cand[s]:>10.5f} {rel:>9.2e}")
    verdict = "within" if worst <= a.tolerance else "OUTSIDE"
    print(f"largest relative difference {worst:.2e} over {len(steps)} steps: {verdict} {a.tolerance:g}")
    return 0 if worst <= a.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
