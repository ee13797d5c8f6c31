#!/usr/bin/env python3
"""SVG plots of the quantized-collective benchmarks, with no package beyond Python's own.

    plot_svg.py error error.csv OUT.svg [--layout 2+2+2+2]
        relative L2 error of the reduce-scatter against the group size: one quantization
        (flat, W = 1), and the 1-hop, 2-hop and ring algorithms on one pretend-host layout
        (default 4 hosts x 2 ranks), int8 and int4, symmetric, round to nearest.
    plot_svg.py speed speed.csv OUT.svg [--size 64M]
        reduce-scatter time per call against the link rate (2 hosts x 2 ranks): the best
        float32 algorithm, int4 and int8 (quant_two_hop), then the runs without a limit and
        on one host over shared memory (quant_direct there) at the right, and each one's wire
        time alone (bytes over the rate, dashed).
"""
import argparse
import csv
import math
import statistics
import sys

sys.dont_write_bytecode = True  # no __pycache__ next to the scripts
from quant_tables import COMMON, block, rate_bps, size_bytes  # noqa: E402

W, H = 640, 420
LEFT, RIGHT, TOP, BOTTOM = 70, 170, 40, 55
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#7f7f7f"]


def esc(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def chart(title, xlabel, ylabel, series, xticks, yticks, yrange):
    """series: (name, color, dashed, [(x, y)]), x and y already in log10 where wanted;
    ticks: [(value, label)] in the same space; the x axis spans the ticks, the y axis yrange."""
    xs = [v for v, _ in xticks]
    x0, x1 = min(xs), max(xs)
    y0, y1 = yrange
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def px(x):
        return LEFT + (x - x0) / (x1 - x0) * pw

    def py(y):
        return TOP + ph - (y - y0) / (y1 - y0) * ph

    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
         f'font-family="sans-serif" font-size="12">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">{esc(title)}</text>']
    for v, label in xticks:
        o.append(f'<line x1="{px(v):.1f}" y1="{TOP}" x2="{px(v):.1f}" y2="{TOP + ph}" stroke="#ddd"/>')
        o.append(f'<text x="{px(v):.1f}" y="{TOP + ph + 16}" text-anchor="middle">{esc(label)}</text>')
    for v, label in yticks:
        o.append(f'<line x1="{LEFT}" y1="{py(v):.1f}" x2="{LEFT + pw}" y2="{py(v):.1f}" stroke="#ddd"/>')
        o.append(f'<text x="{LEFT - 6}" y="{py(v) + 4:.1f}" text-anchor="end">{esc(label)}</text>')
    o.append(f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="black"/>')
    o.append(f'<text x="{LEFT + pw / 2}" y="{H - 12}" text-anchor="middle">{esc(xlabel)}</text>')
    o.append(f'<text x="16" y="{TOP + ph / 2}" text-anchor="middle" '
             f'transform="rotate(-90 16 {TOP + ph / 2})">{esc(ylabel)}</text>')
    for i, (name, color, dashed, pts) in enumerate(series):
        pts = sorted(pts)
        dash = ' stroke-dasharray="6 4"' if dashed else ""
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        o.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
        for x, y in pts:
            o.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{color}"/>')
        ly = TOP + 10 + 18 * i
        o.append(f'<line x1="{W - RIGHT + 10}" y1="{ly}" x2="{W - RIGHT + 34}" y2="{ly}" '
                 f'stroke="{color}" stroke-width="2"{dash}/>')
        o.append(f'<text x="{W - RIGHT + 40}" y="{ly + 4}">{esc(name)}</text>')
    o.append("</svg>")
    return "\n".join(o) + "\n"


def log_axis(values, fmt):
    """A log10 axis around positive values: (ticks, range), with some room at both ends."""
    lo, hi = min(values) / 1.3, max(values) * 1.3
    return log_ticks(lo, hi, fmt), (math.log10(lo), math.log10(hi))


def log_ticks(lo, hi, fmt):
    out = []
    e = math.floor(math.log10(lo))
    while 10 ** e <= hi * 1.0001:
        for m in (1, 2, 5):
            v = m * 10 ** e
            if lo * 0.9999 <= v <= hi * 1.0001:
                out.append((math.log10(v), fmt(v)))
        e += 1
    return out


def error_plot(args):
    with open(args.csv) as f:
        rows = [dict(zip(COMMON + ["rel", "signed", "elements"], r)) for r in csv.reader(f) if r]
    groups = [32, 128, 256, 1024, 4096]

    def pts(layout, w, asked, bits):
        out = []
        for r in rows:
            if (r["layout"], r["W"], r["coll"], r["asked"]) == (layout, w, "reducescatter", asked):
                q = r["quant"].split(":")
                if q[0] == f"int{bits}" and len(q) == 2:
                    out.append((math.log2(int(q[1])), math.log10(float(r["rel"]) * 100)))
        return out

    w = str(sum(int(s) for s in args.layout.split("+")))
    series = []
    for bits, dashed in ((8, False), (4, True)):
        series.append((f"one quantization int{bits}", COLORS[5], dashed, pts("flat", "1", "quant_direct", bits)))
        for i, (asked, name) in enumerate((("quant_direct", "1-hop"), ("quant_two_hop", "2-hop"),
                                           ("quant_ring", "ring"))):
            series.append((f"{name} int{bits}", COLORS[i], dashed, pts(args.layout, w, asked, bits)))
    yticks, yrange = log_axis([10 ** y for s in series for _, y in s[3]], lambda v: f"{v:g}")
    sizes = args.layout.split("+")
    svg = chart(f"Reduce-scatter error, N(0,1), {len(sizes)} hosts x {sizes[0]} ranks (W={w})",
                "group size (elements per scale)", "relative L2 error (%)", series,
                [(math.log2(g), str(g)) for g in groups], yticks, yrange)
    open(args.out, "w").write(svg)


def speed_plot(args):
    with open(args.csv) as f:
        rows = [dict(zip(["rate", "coll", "config", "rep", "us", "ran", "load"], r)) for r in csv.reader(f) if r]
    rows = [r for r in rows if r["coll"] == "reducescatter"]
    med = {}
    for r in rows:
        med.setdefault((r["rate"], r["config"]), []).append(float(r["us"]))
    med = {k: statistics.median(v) for k, v in med.items()}
    rates = sorted({r["rate"] for r in rows if rate_bps(r["rate"])}, key=rate_bps)
    xs = [math.log10(rate_bps(r) / 1e9) for r in rates]
    extra = [r for r in ("none", "shm") if any(row["rate"] == r for row in rows)]
    x_extra = [max(xs) + 0.5 * (i + 1) for i in range(len(extra))]
    recv = size_bytes(args.size) // 4 // 4
    wire = {"fp32": 2 * recv * 4, "int4": 2 * block(recv, 4, 256, False), "int8": 2 * block(recv, 8, 256, False)}
    series = []
    for i, cfg in enumerate(("fp32", "int4", "int8")):
        pts = []
        for rate, x in zip(rates + extra, xs + x_extra):
            if cfg == "fp32":
                c = [v for (r, c), v in med.items() if r == rate and c.startswith("fp32")]
                v = min(c) if c else None
            else:
                v = med.get((rate, cfg))
            if v:
                pts.append((x, math.log10(v / 1000)))
        series.append((f"{cfg} best" if cfg == "fp32" else f"{cfg}:256", COLORS[i], False, pts))
        series.append((f"{cfg} wire alone", COLORS[i], True,
                       [(x, math.log10(wire[cfg] / (rate_bps(r) / 8) * 1000)) for r, x in zip(rates, xs)]))
    yticks, yrange = log_axis([10 ** y for s in series for _, y in s[3]], lambda v: f"{v:g}")
    labels = {"none": "no limit", "shm": "1 host"}
    xticks = [(x, f"{rate_bps(r) / 1e9:g}") for r, x in zip(rates, xs)] + \
        [(x, labels[r]) for r, x in zip(extra, x_extra)]
    svg = chart(f"Reduce-scatter of {args.size} float32 per rank, 2 hosts x 2 ranks",
                "host link rate (Gbit/s, tbf)", "ms per call", series, xticks, yticks, yrange)
    open(args.out, "w").write(svg)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    e = sub.add_parser("error")
    e.add_argument("csv")
    e.add_argument("out")
    e.add_argument("--layout", default="2+2+2+2")
    s = sub.add_parser("speed")
    s.add_argument("csv")
    s.add_argument("out")
    s.add_argument("--size", default="64M")
    args = p.parse_args()
    (error_plot if args.what == "error" else speed_plot)(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
