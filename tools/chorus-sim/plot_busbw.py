#!/usr/bin/env python3
"""Plots busbw against size from chorus-sim CSV files, one line per algorithm and rank count.

    tools/chorus-sim/plot_busbw.py OUT.png RUN.csv [RUN.csv ...]

Reads the CSV that `chorus-sim --csv` writes and draws it with gnuplot (pngcairo), the size
axis logarithmic. Needs only the standard library and gnuplot on PATH.
"""
import csv
import os
import subprocess
import sys
import tempfile


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: plot_busbw.py OUT.png RUN.csv [RUN.csv ...]")
    out, inputs = sys.argv[1], sys.argv[2:]
    series = {}  # (algorithm, nranks) -> [(bytes, busbw)]
    coll = set()
    for path in inputs:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                key = (row["algorithm"], int(row["nranks"]))
                series.setdefault(key, []).append((int(row["bytes"]), float(row["busbw_GBps"])))
                coll.add(row["coll"])
    if not series:
        sys.exit("plot_busbw: no rows in " + ", ".join(inputs))
    with tempfile.TemporaryDirectory(prefix="chorus-sim-plot.") as tmp:
        plots = []
        ordered = sorted(series.items(), key=lambda kv: (kv[0][1], kv[0][0]))
        for i, (key, points) in enumerate(ordered):
            data = os.path.join(tmp, f"s{i}.dat")
            with open(data, "w") as f:
                for b, bw in sorted(points):
                    f.write(f"{b} {bw}\n")
            plots.append(f"'{data}' using 1:2 with linespoints title '{key[0]}, {key[1]} ranks'")
        script = "\n".join([
            "set terminal pngcairo size 1000,650 noenhanced",
            f"set output '{out}'",
            "set logscale x 2",
            "set format x '%.0b%B'",
            "set xlabel 'size (bytes, nccl-tests convention)'",
            "set ylabel 'busbw (GB/s)'",
            f"set title 'chorus-sim: {', '.join(sorted(coll))}'",
            "set key top left",
            "set grid",
            "plot " + ", \\\n     ".join(plots),
        ])
        subprocess.run(["gnuplot"], input=script, text=True, check=True)


if __name__ == "__main__":
    main()
