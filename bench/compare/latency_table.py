#!/usr/bin/env python3
"""The tables of one latency.sh run: medians over repetitions per (collective, ranks, size,
configuration), and chorus/OpenMPI time ratios over the same medium.

    latency_table.py OUT_DIR

Reads OUT_DIR/raw.csv (compare.sh's columns: system,coll,nranks,rep,size,time_us,busbw_gbps,
wrong) and OUT_DIR/labels.txt (optional); prints the tables and writes OUT_DIR/summary.csv.
Configurations are named chorus-<transport>-z<0|1>, ompi-<btl> and ompi-<btl>-z0
(latency.sh). Times are in microseconds: for allreduce each run's mean per call, for pingpong
one way (half the round trip); a cell is the median over the runs. A ratio is chorus time /
OpenMPI time, so above 1 chorus is slower. The spread line gives the widest (max - min) / median
of any cell, to judge whether the medians are stable.
"""
import csv
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from summarize import fmt_ratio, fmt_us, human  # noqa: E402  (compare.sh's number formats)

ALLREDUCE_COLUMNS = [
    ("chorus-shm-z0", "chorus shm -z 0"),
    ("chorus-shm-z1", "chorus shm -z 1"),
    ("ompi-vader", "OpenMPI vader"),
    ("ompi-vader-z0", "OpenMPI vader -z 0"),
    ("chorus-tcp-z0", "chorus tcp -z 0"),
    ("chorus-tcp-z1", "chorus tcp -z 1"),
    ("ompi-tcp", "OpenMPI tcp"),
    ("ompi-tcp-z0", "OpenMPI tcp -z 0"),
]
PINGPONG_COLUMNS = [
    ("chorus-shm-z1", "chorus shm"),
    ("ompi-vader", "OpenMPI vader"),
    ("chorus-tcp-z1", "chorus tcp"),
    ("ompi-tcp", "OpenMPI tcp"),
]
# (label, chorus configuration, OpenMPI configuration)
ALLREDUCE_RATIOS = [
    ("shm -z 0", "chorus-shm-z0", "ompi-vader"),
    ("shm -z 1", "chorus-shm-z1", "ompi-vader"),
    ("tcp -z 0", "chorus-tcp-z0", "ompi-tcp"),
    ("tcp -z 1", "chorus-tcp-z1", "ompi-tcp"),
    ("shm -z 0 vs -z 0", "chorus-shm-z0", "ompi-vader-z0"),
    ("tcp -z 0 vs -z 0", "chorus-tcp-z0", "ompi-tcp-z0"),
]
PINGPONG_RATIOS = [
    ("shm", "chorus-shm-z1", "ompi-vader"),
    ("tcp", "chorus-tcp-z1", "ompi-tcp"),
]


def ratio(med, a, b):
    if a not in med or b not in med or med[b] <= 0:
        return "-"
    return fmt_ratio(med[a] / med[b])


def markdown(header, rows):
    """A table with | separators and right-aligned columns of equal width."""
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    lines = ["| " + " | ".join(str(h).rjust(w) for h, w in zip(header, widths)) + " |",
             "|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(str(c).rjust(w) for c, w in zip(r, widths)) + " |")
    return "\n".join(lines)


def main():
    out = sys.argv[1]
    runs = {}  # (coll, n, size, system) -> [time_us per run]
    for r in csv.DictReader(open(os.path.join(out, "raw.csv"))):
        key = (r["coll"], int(r["nranks"]), int(r["size"]), r["system"])
        runs.setdefault(key, []).append(float(r["time_us"]))
    if not runs:
        sys.exit("latency_table: no runs in raw.csv")
    med = {k: statistics.median(v) for k, v in runs.items()}

    for line in open(os.path.join(out, "labels.txt")) if os.path.exists(
            os.path.join(out, "labels.txt")) else []:
        if "\t" in line:
            k, v = line.rstrip("\n").split("\t", 1)
            print(f"# {k}: {v}")

    worst = (-1.0, None)
    for k, times in runs.items():
        m = med[k]
        spread = (max(times) - min(times)) / m if m > 0 else 0.0
        if spread > worst[0]:
            worst = (spread, k)

    allreduce = sorted({k for k in runs if k[0] == "allreduce"})
    if allreduce:
        reps = max(len(runs[k]) for k in allreduce)
        for size in sorted({k[2] for k in allreduce}):
            print()
            print(f"## all-reduce, float32 sum, {human(size)}, out-of-place: median over {reps} "
                  f"runs of the time per call (us)")
            print("## ratios: chorus us / OpenMPI us on the same medium (> 1: chorus slower)")
            rows = []
            for n in sorted({k[1] for k in allreduce if k[2] == size}):
                cell = {s: med[("allreduce", n, size, s)] for s, _ in ALLREDUCE_COLUMNS
                        if ("allreduce", n, size, s) in med}
                row = [n] + [fmt_us(cell[s]) if s in cell else "-" for s, _ in ALLREDUCE_COLUMNS]
                row.append(", ".join(f"{label} {ratio(cell, c, m)}"
                                     for label, c, m in ALLREDUCE_RATIOS))
                rows.append(row)
            print(markdown(["ranks"] + [t for _, t in ALLREDUCE_COLUMNS] +
                           ["ratios (chorus/OpenMPI)"], rows))

    pingpong = sorted({k for k in runs if k[0] == "pingpong"})
    if pingpong:
        reps = max(len(runs[k]) for k in pingpong)
        print()
        print(f"## ping-pong, 2 ranks: median over {reps} runs of the one-way time (us), half "
              f"the round trip; chorus -z 1 (chorusSend/Recv), OpenMPI MPI_Send/MPI_Recv")
        print("## ratios: chorus us / OpenMPI us on the same medium (> 1: chorus slower)")
        rows = []
        for size in sorted({k[2] for k in pingpong}):
            cell = {s: med[("pingpong", 2, size, s)] for s, _ in PINGPONG_COLUMNS
                    if ("pingpong", 2, size, s) in med}
            row = [human(size)] + [fmt_us(cell[s]) if s in cell else "-"
                                   for s, _ in PINGPONG_COLUMNS]
            row.append(", ".join(f"{label} {ratio(cell, c, m)}" for label, c, m in PINGPONG_RATIOS))
            rows.append(row)
        print(markdown(["size"] + [t for _, t in PINGPONG_COLUMNS] + ["ratios (chorus/OpenMPI)"],
                       rows))

    line_csv = os.path.join(out, "line.csv")
    if os.path.exists(line_csv):
        with open(line_csv) as f:
            lines = [r["one_way_ns"] for r in csv.DictReader(f)]
        if lines:
            print()
            print(f"# core-to-core cache-line latency, one way, before each repetition "
                  f"(line_latency): {', '.join(lines)} ns")

    if worst[1] is not None:
        c, n, size, s = worst[1]
        print()
        print(f"# widest spread: (max - min) / median = {100 * worst[0]:.0f}% ({s}, {c}, {n} ranks, "
              f"{human(size)}); a large spread means a busy machine: rerun with more reps or "
              f"ITERS")

    with open(os.path.join(out, "summary.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["coll", "nranks", "size", "system", "runs", "time_us_median", "time_us_min",
                    "time_us_max"])
        for k in sorted(runs):
            t = runs[k]
            w.writerow([*k, len(t), f"{med[k]:.3f}", f"{min(t):.3f}", f"{max(t):.3f}"])


if __name__ == "__main__":
    main()
