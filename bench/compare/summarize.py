#!/usr/bin/env python3
"""Tables and plots from one compare.sh run: medians over repetitions per (collective, ranks,
size, system), chorus/OpenMPI ratio, chorus-reg/chorus ratio (registered buffers against
ordinary ones), each chorus system as a percentage of the memory bound.

busbw is recomputed from the median time (size / time x 2(n-1)/n for allreduce, (n-1)/n for
allgather and reducescatter, 1 for broadcast, as the tools print it) instead of taken from the
tools' two-decimal column, so small sizes keep their digits. For the same size, chorus busbw /
OpenMPI busbw is then exactly OpenMPI time / chorus time, and the ratio is defined at every size.

    summarize.py OUT_DIR

Reads OUT_DIR/raw.csv (system,coll,nranks,rep,size,time_us,busbw_gbps,wrong), OUT_DIR/membw.txt
(membw's output, optional) and OUT_DIR/labels.txt (optional "system<TAB>description" lines);
prints the tables and writes OUT_DIR/summary.csv, OUT_DIR/<coll>.png (gnuplot) and the data and
gnuplot scripts under OUT_DIR/plot/.

Memory bound (see compare.sh): M = the best counted traffic membw measured on large buffers
(GB/s); a collective can at best read every input byte once and write every output byte once at
M. With n ranks and S the "size" column:
  allreduce      traffic 2nS       busbw bound = 2(n-1)/n * S / (2nS/M)     = (n-1) M / n^2
  allgather      traffic (n+1)S    busbw bound = (n-1)/n * S / ((n+1)S/M)   = (n-1) M / (n(n+1))
  reducescatter  traffic (n+1)S    busbw bound = (n-1) M / (n(n+1))
  broadcast      traffic (n+1)S    busbw bound = S / ((n+1)S/M)             = M / (n+1)
    (the root's input read once, n outputs written: out of place, the root's output too)
The same bound holds for chorus-reg: registered buffers change how close a path gets to it,
not the traffic a perfect collective must move.
"""
import csv
import os
import statistics
import subprocess
import sys

SYSTEM_ORDER = ["chorus", "chorus-reg", "ompi", "gloo"]
COLL_ORDER = ["allreduce", "allgather", "reducescatter", "broadcast"]
CHORUS_SYSTEMS = ["chorus", "chorus-reg"]
# One line per collective under its table: what its bound counts.
BOUND_TEXT = {
    "allreduce": "n inputs read + n outputs written, 2nS at M: (n-1)M/n^2",
    "allgather": "S of inputs read + nS of outputs written at M: (n-1)M/(n(n+1))",
    "reducescatter": "nS of inputs read + S of outputs written at M: (n-1)M/(n(n+1))",
    "broadcast": "the root's S read + n outputs of S written at M: M/(n+1)",
}


def busbw(coll, n, size, time_us):
    if coll == "allreduce":
        factor = 2 * (n - 1) / n
    elif coll == "broadcast":
        factor = 1.0
    else:
        factor = (n - 1) / n
    return size / (time_us * 1e3) * factor if time_us > 0 else 0.0


def fmt_us(t):
    return f"{t:.2f}" if t < 10 else f"{t:.1f}"


def fmt_ratio(r):
    return f"{r:.2f}" if r >= 0.1 else f"{r:.2g}"


def fmt_bw(bw):
    """Two decimals, or three significant digits below 1 GB/s, where two decimals say 0.00."""
    return f"{bw:.2f}" if bw >= 1 or bw == 0 else f"{bw:.3g}"


def human(size):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def bound_busbw(coll, n, membw):
    if membw is None or n < 2:
        return None
    if coll == "allreduce":
        return (n - 1) * membw / (n * n)
    if coll == "broadcast":
        return membw / (n + 1)
    return (n - 1) * membw / (n * (n + 1))


def read_membw(path):
    """The best 'dram' figure, and the lines to quote."""
    if not os.path.exists(path):
        return None, []
    best, rows = None, []
    for line in open(path):
        f = line.split()
        if not f or f[0].startswith("#") or len(f) < 5:
            continue
        kernel, level, threads, gbps = f[0], f[1], int(f[2]), float(f[4])
        rows.append((kernel, level, threads, gbps))
        if level == "dram" and (best is None or gbps > best):
            best = gbps
    return best, rows


def main():
    out = sys.argv[1]
    raw = list(csv.DictReader(open(os.path.join(out, "raw.csv"))))
    labels = {}
    if os.path.exists(os.path.join(out, "labels.txt")):
        for line in open(os.path.join(out, "labels.txt")):
            if "\t" in line:
                k, v = line.rstrip("\n").split("\t", 1)
                labels[k] = v
    membw, membw_rows = read_membw(os.path.join(out, "membw.txt"))

    # (coll, n, size, system) -> [time_us of each run]
    runs = {}
    for r in raw:
        key = (r["coll"], int(r["nranks"]), int(r["size"]), r["system"])
        runs.setdefault(key, []).append(float(r["time_us"]))
    # -> (median time, busbw at the median time, runs, min time, max time)
    med = {}
    for k, times in runs.items():
        t = statistics.median(times)
        med[k] = (t, busbw(k[0], k[1], k[2], t), len(times), min(times), max(times))

    if membw_rows:
        quoted = ", ".join(f"{k} {lv} {t}T {g:.1f}" for k, lv, t, g in membw_rows if lv == "dram")
        print(f"# memory (membw, GB/s of counted traffic): {quoted}; bound uses M = {membw:.1f}")
    for s in SYSTEM_ORDER:
        if s in labels:
            print(f"# {s}: {labels[s]}")

    summary = []
    colls = [c for c in COLL_ORDER if any(k[0] == c for k in med)]
    for coll in colls:
        for n in sorted({k[1] for k in med if k[0] == coll}):
            systems = [s for s in SYSTEM_ORDER if any(k[0] == coll and k[1] == n and k[3] == s
                                                      for k in med)]
            sizes = sorted({k[2] for k in med if k[0] == coll and k[1] == n})
            reps = max(v[2] for k, v in med.items() if k[0] == coll and k[1] == n)
            bound = bound_busbw(coll, n, membw)
            print()
            what = {"allgather": "", "broadcast": " from rank 0"}.get(coll, " sum")
            print(f"## {coll}, {n} ranks, float{what}, "
                  f"out-of-place, median of {reps} runs; busbw in GB/s (1e9 B/s)")
            if bound is not None:
                print(f"## memory bound: {bound:.2f} GB/s busbw = {BOUND_TEXT[coll]} (M = "
                      f"{membw:.1f} GB/s; a DRAM bound: sizes that fit in the caches can exceed "
                      f"it)")
            have_ratio = "chorus" in systems and "ompi" in systems
            have_reg = "chorus" in systems and "chorus-reg" in systems
            if have_ratio:
                print("## chorus/ompi: busbw ratio = time ratio ompi us / chorus us (> 1: chorus "
                      "faster); busbw from the median time, so defined where it prints as 0.00")
            if have_reg:
                print("## reg/chorus: chorus-reg (registered chorusMemAlloc buffers) against "
                      "chorus (malloc'd buffers), time ratio")
            bounded = [s for s in CHORUS_SYSTEMS if s in systems] if bound is not None else []
            head = f"{'size':>9}"
            for s in systems:
                head += f" {s + ' us':>11} {s + ' GB/s':>11}"
            if have_ratio:
                head += f" {'chorus/ompi':>11}"
            if have_reg:
                head += f" {'reg/chorus':>10}"
            for s in bounded:
                head += f" {s + ' %bound':>17}"
            print(head)
            for size in sizes:
                line = f"{human(size):>9}"
                vals = {}
                for s in systems:
                    v = med.get((coll, n, size, s))
                    vals[s] = v
                    if v:
                        line += f" {fmt_us(v[0]):>11} {fmt_bw(v[1]):>11}"
                    else:
                        line += f" {'-':>11} {'-':>11}"
                    if v:
                        summary.append([coll, n, size, s, v[2], f"{v[0]:.3f}", f"{v[3]:.3f}",
                                        f"{v[4]:.3f}", f"{v[1]:.6g}",
                                        f"{bound:.4f}" if bound is not None else ""])
                c, m, g = vals.get("chorus"), vals.get("ompi"), vals.get("chorus-reg")
                if have_ratio:
                    ratio = fmt_ratio(m[0] / c[0]) if c and m and c[0] > 0 else "-"
                    line += f" {ratio:>11}"
                if have_reg:
                    ratio = fmt_ratio(c[0] / g[0]) if c and g and g[0] > 0 else "-"
                    line += f" {ratio:>10}"
                for s in bounded:
                    v = vals.get(s)
                    line += f" {100 * v[1] / bound:16.1f}%" if v else f" {'-':>17}"
                print(line)

    with open(os.path.join(out, "summary.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["coll", "nranks", "size", "system", "runs", "time_us_median", "time_us_min",
                    "time_us_max", "busbw_gbps_at_median", "bound_busbw_gbps"])
        w.writerows(summary)

    if os.environ.get("PLOT", "1") != "0":
        for coll in colls:
            plot(out, coll, med, membw)


def plot(out, coll, med, membw):
    pdir = os.path.join(out, "plot")
    os.makedirs(pdir, exist_ok=True)
    colors = {"chorus": "#d62728", "chorus-reg": "#9467bd", "ompi": "#1f77b4", "gloo": "#2ca02c"}
    ranks = sorted({k[1] for k in med if k[0] == coll})
    sizes = sorted({k[2] for k in med if k[0] == coll})
    series = []
    for n in ranks:
        for s in SYSTEM_ORDER:
            pts = sorted((k[2], v) for k, v in med.items() if k[0] == coll and k[1] == n
                         and k[3] == s)
            if not pts:
                continue
            path = os.path.join(pdir, f"{coll}-{s}-n{n}.dat")
            with open(path, "w") as f:
                f.write("# size time_us_median busbw_gbps_at_median_time\n")
                for size, v in pts:
                    f.write(f"{size} {v[0]:.3f} {v[1]:.6g}\n")
            series.append((n, s, path))
    # Label every other size so the log axis stays readable.
    tics = ", ".join(f'"{human(x)}" {x}' for i, x in enumerate(sizes)
                     if i % 2 == 0 or len(sizes) <= 8)
    dash = {n: i + 1 for i, n in enumerate(ranks)}

    def lines(col):
        return ", \\\n  ".join(
            f"'{p}' using 1:{col} with linespoints lw 2 pt 7 ps 0.6 dt {dash[n]} "
            f"lc rgb '{colors[s]}' title '{s} {n} ranks'" for n, s, p in series)

    top = max([v[1] for k, v in med.items() if k[0] == coll] +
              [bound_busbw(coll, n, membw) or 0 for n in ranks])
    bounds = []
    for n in ranks:
        b = bound_busbw(coll, n, membw)
        if b is not None:
            bounds.append(f"{b:.4f} with lines lw 1 dt {dash[n]} lc rgb '#777777' "
                          f"title 'memory bound {n} ranks'")
    png = os.path.join(out, f"{coll}.png")
    title = f"{coll}, float, out-of-place: medians of runs, one line per system and rank count"
    gp = os.path.join(pdir, f"{coll}.gp")
    with open(gp, "w") as f:
        f.write(f"""set terminal pngcairo size 1500,620 font ',10'
set output '{png}'
set multiplot layout 1,2 title '{title}'
set logscale xy
set format y '%g'
set grid
# Bandwidth rises with size and latency falls towards small sizes: these corners stay empty.
set key bottom right
set xtics ({tics}) rotate by 45 right
set xrange [{sizes[0] / 1.5:.6g}:{sizes[-1] * 1.5:.6g}]
set xlabel 'size (bytes per rank buffer)'
set ylabel 'busbw (GB/s)'
set title 'bus bandwidth'
set yrange [*:{2 * top:.4g}]
plot {lines(3)}{", " + ", ".join(bounds) if bounds else ""}
set ylabel 'time (us)'
set title 'latency'
set autoscale y
set key top left
plot {lines(2)}
unset multiplot
""")
    r = subprocess.run(["gnuplot", gp], capture_output=True, text=True)
    if r.returncode != 0 or not os.path.exists(png):
        sys.stderr.write(r.stderr)
        sys.exit(f"summarize: gnuplot failed for {gp}")
    print(f"# plot: {png}")


if __name__ == "__main__":
    main()
