#!/usr/bin/env python3
"""Fits chorus-sim's CPU terms (--msg-us, --msg-gbps, --call-us) to netns measurements.

  bench/sim_fit_cpu.py BUILD MEASURED.txt [--gbps 1] [--burst-us 4000] [--flags "..."] [--shm]

MEASURED.txt is bench/sim_vs_netns.sh's measured.txt (layout algo bytes us, one line per job
and size); every layout in it must be of hosts of one size. For each copy rate of a grid and
each per-message time of a grid, chorus-sim gives the time of every (layout, algorithm, size)
without a per-call cost; a call's CPU piece delays every rank's start by the same amount (on
hosts of one rank each, whose CPUs are not shared: check that the layouts are such), so the
best --call-us for that pair is a one-dimensional minimum, found by ternary search. The score is
the root mean square of log(simulated / median measured) over all points. The best five are
simulated again with the call's piece itself (the links' token buckets fill while it runs, so it
is not quite additive) and printed, best last, with the score and the worst ratio.

With --shm the grid is that of the messages between ranks of one host (--shm-msg-us x
--shm-msg-gbps), every other term coming from --flags (the socket terms and --call-us, fitted
before), and nothing else is searched: for measurements on one host, where every message is a
shared-memory one.
"""
import argparse
import csv
import math
import os
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict


def medians(path):
    runs = defaultdict(list)
    with open(path) as f:
        for line in f:
            layout, algo, size, us = line.split()
            runs[(layout, algo, int(size))].append(float(us))
    return {k: statistics.median(v) for k, v in runs.items()}


def simulate(sim, layout, algo, sizes, gbps, burst, flags, extra):
    hosts = layout.split(",")
    if len(set(hosts)) != 1:
        sys.exit(f"sim_fit_cpu: hosts of one size only, not {layout}")
    with tempfile.NamedTemporaryFile(suffix=".csv") as out:
        cmd = [sim, "--hosts", str(len(hosts)), "-n", hosts[0], "--nic-gbps", str(gbps),
               "-c", "allreduce", "-a", algo, "--nic-burst-us", str(burst), "--csv", out.name,
               "-q", "--links", "0"] + extra + flags
        times = {}
        for size in sizes:  # one run per size: -b/-e/-f cannot name an arbitrary list
            subprocess.run(cmd + ["-b", str(size), "-e", str(size)], check=True,
                           stdout=subprocess.DEVNULL)
            with open(out.name) as f:
                for row in csv.DictReader(f):
                    times[int(row["bytes"])] = float(row["time_us"])
        return times


def fit_shm(sim, med, groups, args, extra):
    results = []
    for copy in [0, 1, 2, 4, 8, 16]:
        for msg in [0, 0.25, 0.5, 1, 1.5, 2, 3, 4, 6, 8]:
            flags = ["--shm-msg-us", str(msg), "--shm-msg-gbps", str(copy)]
            ratios = []
            for (layout, algo), sizes in groups.items():
                t = simulate(sim, layout, algo, sorted(sizes), args.gbps, args.burst_us, flags,
                             extra)
                ratios += [t[s] / med[(layout, algo, s)] for s in sizes]
            score = math.sqrt(sum(math.log(r) ** 2 for r in ratios) / len(ratios))
            worst = max(ratios, key=lambda r: abs(math.log(r)))
            results.append((score, msg, copy, worst))
            print(f"shm-msg-us {msg:5g} shm-msg-gbps {copy:5g} rms log {score:.4f} "
                  f"worst {worst:.3f}", file=sys.stderr)
    for score, msg, copy, worst in sorted(results, reverse=True)[-5:]:
        print(f"--shm-msg-us {msg:g} --shm-msg-gbps {copy:g}  "
              f"(rms log ratio {score:.4f}, worst sim/meas {worst:.3f})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("measured")
    ap.add_argument("--gbps", type=float, default=1)
    ap.add_argument("--burst-us", type=float, default=4000)
    ap.add_argument("--flags", default="--nic-burst-start steady",
                    help="more chorus-sim flags for every run (default: %(default)s)")
    ap.add_argument("--shm", action="store_true",
                    help="fit --shm-msg-us and --shm-msg-gbps only (the rest in --flags)")
    args = ap.parse_args()
    sim = os.path.join(args.build, "tools/chorus-sim/chorus-sim")
    med = medians(args.measured)
    extra = args.flags.split()
    groups = defaultdict(list)
    for (layout, algo, size) in med:
        groups[(layout, algo)].append(size)
    if args.shm:
        fit_shm(sim, med, groups, args, extra)
        return

    results = []
    for copy in [0, 0.25, 0.5, 1, 2, 4, 8]:
        for msg in [0, 1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 30, 40, 50, 60, 80]:
            flags = ["--msg-us", str(msg), "--msg-gbps", str(copy)]
            if msg == 0 and copy == 0:
                flags = []
            pts = []
            for (layout, algo), sizes in groups.items():
                t = simulate(sim, layout, algo, sorted(sizes), args.gbps, args.burst_us, flags,
                             extra)
                pts += [(t[s], med[(layout, algo, s)]) for s in sizes]

            def score(call):
                return math.sqrt(sum(math.log((t + call) / m) ** 2 for t, m in pts) / len(pts))

            lo, hi = 0.0, 2000.0
            for _ in range(100):
                a, b = lo + (hi - lo) / 3, hi - (hi - lo) / 3
                if score(a) <= score(b):
                    hi = b
                else:
                    lo = a
            call = round((lo + hi) / 2, 1)
            worst = max(((t + call) / m for t, m in pts), key=lambda r: abs(math.log(r)))
            results.append((score(call), msg, copy, call, worst))
            print(f"msg-us {msg:5g} msg-gbps {copy:5g} call-us {call:7.1f} "
                  f"rms log {score(call):.4f} worst {worst:.3f}", file=sys.stderr)
    # The call's piece is not quite additive: the links' buckets fill while it runs. The best
    # five again, simulated with the call piece itself.
    final = []
    for _, msg, copy, call, _ in sorted(results)[:5]:
        flags = ["--msg-us", str(msg), "--msg-gbps", str(copy), "--call-us", str(call)]
        pts = []
        for (layout, algo), sizes in groups.items():
            t = simulate(sim, layout, algo, sorted(sizes), args.gbps, args.burst_us, flags,
                         extra)
            pts += [(t[s] / med[(layout, algo, s)]) for s in sizes]
        s = math.sqrt(sum(math.log(r) ** 2 for r in pts) / len(pts))
        final.append((s, msg, copy, call, max(pts, key=lambda r: abs(math.log(r)))))
    for s, msg, copy, call, worst in sorted(final, reverse=True):
        print(f"--msg-us {msg:g} --msg-gbps {copy:g} --call-us {call:g}  "
              f"(rms log ratio {s:.4f}, worst sim/meas {worst:.3f})")


if __name__ == "__main__":
    main()
