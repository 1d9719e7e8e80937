# Draws the training loss (and validation loss, as dots) of several runs' metrics.jsonl in one SVG,
# one colour per run, for comparing precisions or layouts at a glance. Standard library only.
#   python3 tools/plot_loss_curves.py OUT.svg LABEL=metrics.jsonl [LABEL=metrics.jsonl ...] [--title T]
import argparse
import json
import sys

COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf"]
WIDTH, HEIGHT, MARGIN = 760, 440, 60


def read_run(path):
    train, val = {}, {}
    with open(path) as f:
        for line in f:
            j = json.loads(line)
            if "loss" in j:
                train[j["step"]] = j["loss"]  # a resumed run's repeated steps: the later line wins
            if "val_loss" in j:
                val[j["step"]] = j["val_loss"]
    return sorted(train.items()), sorted(val.items())


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("out")
    p.add_argument("runs", nargs="+", help="LABEL=path/to/metrics.jsonl")
    p.add_argument("--title", default="training loss")
    a = p.parse_args()
    runs = []
    for spec in a.runs:
        label, _, path = spec.partition("=")
        if not path:
            sys.exit(f"plot_loss_curves: '{spec}' is not LABEL=metrics.jsonl")
        runs.append((label, *read_run(path)))
    points = [v for _, train, val in runs for _, v in train + val]
    steps = [s for _, train, val in runs for s, _ in train + val]
    if not points:
        sys.exit("plot_loss_curves: no losses in the given files")
    lo, hi = min(points), max(points)
    first, last = min(steps), max(steps)
    x = lambda s: MARGIN + (s - first) / max(last - first, 1) * (WIDTH - 2 * MARGIN)
    y = lambda v: HEIGHT - MARGIN - (v - lo) / max(hi - lo, 1e-9) * (HEIGHT - 2 * MARGIN)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" '
           f'font-size="12"><rect width="100%" height="100%" fill="white"/>',
           f'<text x="{WIDTH / 2}" y="24" text-anchor="middle" font-size="15">{a.title}</text>',
           f'<line x1="{MARGIN}" y1="{HEIGHT - MARGIN}" x2="{WIDTH - MARGIN}" y2="{HEIGHT - MARGIN}" stroke="black"/>',
           f'<line x1="{MARGIN}" y1="{MARGIN}" x2="{MARGIN}" y2="{HEIGHT - MARGIN}" stroke="black"/>']
    for k in range(5):
        v = lo + (hi - lo) * k / 4
        out.append(f'<text x="{MARGIN - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.2f}</text>')
        s = first + (last - first) * k / 4
        out.append(f'<text x="{x(s):.1f}" y="{HEIGHT - MARGIN + 18}" text-anchor="middle">{s:.0f}</text>')
    out.append(f'<text x="{WIDTH / 2}" y="{HEIGHT - 16}" text-anchor="middle">step</text>')
    for i, (label, train, val) in enumerate(runs):
        colour = COLOURS[i % len(COLOURS)]
        line = " ".join(f"{x(s):.1f},{y(v):.1f}" for s, v in train)
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.2" points="{line}"/>')
        out += [f'<circle cx="{x(s):.1f}" cy="{y(v):.1f}" r="3" fill="{colour}"/>' for s, v in val]
        out.append(f'<text x="{WIDTH - MARGIN - 4}" y="{MARGIN + 16 * i}" text-anchor="end" fill="{colour}">'
                   f'{label}</text>')
    out.append("</svg>")
    with open(a.out, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
