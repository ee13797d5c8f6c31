#!/usr/bin/env python3
"""torch.distributed.all_reduce through the chorus backend, against gloo and chorus-perf.

  allreduce_bench.py --build build [--reps 5] [--ranks 2,4] [--out DIR] [--sizes 8,1M]
                     [--systems chorus-perf,torch+chorus,torch+gloo]

Per repetition, every configuration runs once, in an order rotated each repetition
(interleaved): chorus-perf (blocking calls, -z 1: what the backend calls; in-place column),
then torch.distributed.all_reduce(t) (synchronous, in place, float32 sum) with
backend="chorus" and with backend="gloo" — same sizes, same iteration counts, one process per
rank. A run's time is the mean per call over its timed iterations after warm-up (chorus-perf's
definition); the tables show the median over repetitions, busbw = size/time * 2(n-1)/n.
Writes raw.csv and tables.md to --out and prints the tables.
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
SIZES = [8, 1 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20]


def iters_for(size):
    if size <= 1 << 10:
        return 2000, 200
    if size <= 64 << 10:
        return 500, 50
    if size <= 1 << 20:
        return 100, 10
    if size <= 16 << 20:
        return 20, 3
    return 5, 2


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text[-1:].upper() in units:
        return int(text[:-1]) * units[text[-1:].upper()]
    return int(text)


def fmt_size(b):
    for unit, k in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= k:
            return f"{b // k} {unit}"
    return f"{b} B"


def worker(args):
    import torch
    import torch.distributed as dist

    if args.backend == "chorus":
        import chorus_torch  # noqa: F401
    dist.init_process_group(args.backend, init_method="file://" + args.init_file,
                            rank=args.rank, world_size=args.world_size)
    out = {}
    for size in args.sizes:
        n, w = iters_for(size)
        t = torch.ones(max(size // 4, 1), dtype=torch.float32)
        for _ in range(w):
            dist.all_reduce(t)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(n):
            dist.all_reduce(t)
        out[size] = (time.perf_counter() - t0) / n * 1e6
        # values stay finite (ones times world size per call) only while they fit; reset
        t.fill_(1.0)
    if args.rank == 0:
        with open(args.result, "w") as f:
            json.dump(out, f)
    dist.destroy_process_group()


def run_torch(backend, ranks, tmp, sizes):
    init = os.path.join(tmp, f"init_{backend}_{time.monotonic_ns()}")
    result = os.path.join(tmp, f"res_{backend}.json")
    procs = [subprocess.Popen([PYTHON, os.path.abspath(__file__), "--worker", "--backend",
                               backend, "--rank", str(r), "--world-size", str(ranks),
                               "--init-file", init, "--result", result,
                               "--sizes", ",".join(map(str, sizes))])
             for r in range(ranks)]
    codes = [p.wait(timeout=900) for p in procs]
    if any(codes):
        sys.exit(f"torch {backend} at {ranks} ranks failed: {codes}")
    with open(result) as f:
        return {int(k): v for k, v in json.load(f).items()}


def run_perf(build, ranks, tmp, sizes):
    out = {}
    for size in sizes:
        n, w = iters_for(size)
        path = os.path.join(tmp, "perf.csv")
        cmd = [os.path.join(build, "tools/chorus-run/chorus-run"), "-n", str(ranks),
               os.path.join(build, "tools/chorus-perf/chorus-perf"), "-b", str(size), "-e",
               str(size), "-n", str(n), "-w", str(w), "-z", "1", "-c", "1", "--csv", path]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=900)
        with open(path) as f:
            for row in csv.DictReader(f):
                if row["placement"] == "in-place":
                    out[size] = float(row["time_us"])
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--build", default="build")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--ranks", default="2,4")
    p.add_argument("--out")
    p.add_argument("--sizes", default=",".join(map(str, SIZES)),
                   help="comma-separated byte counts, K/M/G suffixes allowed")
    p.add_argument("--systems", default="chorus-perf,torch+chorus,torch+gloo")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--backend", help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--world-size", type=int, help=argparse.SUPPRESS)
    p.add_argument("--init-file", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.sizes = [parse_size(x) for x in args.sizes.split(",")]
    if args.worker:
        worker(args)
        return 0
    build = os.path.abspath(args.build)
    pkg = os.path.join(build, "bindings/torch")
    os.environ["PYTHONPATH"] = pkg + (":" + os.environ["PYTHONPATH"]
                                      if os.environ.get("PYTHONPATH") else "")
    # One intra-op thread per rank, as torchrun sets: torch's OpenMP workers otherwise spin
    # after each parallel op and take the cores the ranks need (2-core machine, 2-4 ranks).
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    out_dir = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                       time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(out_dir, exist_ok=True)
    systems = args.systems.split(",")
    known = {"chorus-perf", "torch+chorus", "torch+gloo"}
    if not systems or any(s not in known for s in systems):
        sys.exit(f"--systems: each of {sorted(known)}, got {args.systems!r}")
    raw = []  # (rep, ranks, system, size, time_us)
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            for ranks in [int(r) for r in args.ranks.split(",")]:
                k = rep % len(systems)
                order = systems[k:] + systems[:k]
                for system in order:
                    if system == "chorus-perf":
                        res = run_perf(build, ranks, tmp, args.sizes)
                    else:
                        res = run_torch(system.split("+")[1], ranks, tmp, args.sizes)
                    for size, t in res.items():
                        raw.append((rep, ranks, system, size, t))
                    print(f"rep {rep} ranks {ranks} {system} done", file=sys.stderr, flush=True)
    with open(os.path.join(out_dir, "raw.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["rep", "ranks", "system", "bytes", "time_us"])
        w.writerows(raw)
    lines = []
    compare = "chorus-perf" in systems and "torch+chorus" in systems
    for ranks in sorted({r[1] for r in raw}):
        head = ["size"]
        for s in systems:
            head += [f"{s} µs", "busbw GB/s"] + (["vs chorus-perf"] if s == "torch+chorus"
                                                  and compare else [])
        lines += [f"\n{ranks} ranks, float32 sum, in place; median of {args.reps} interleaved runs",
                  "", "| " + " | ".join(head) + " |", "|" + " ---: |" * len(head)]
        for size in args.sizes:
            med = {s: statistics.median(t for (_, n, sy, sz, t) in raw
                                        if n == ranks and sy == s and sz == size)
                   for s in systems}
            bw = {s: size / med[s] / 1e3 * 2 * (ranks - 1) / ranks for s in systems}
            cells = [fmt_size(size)]
            for s in systems:
                cells += [f"{med[s]:.1f}", f"{bw[s]:.3f}"]
                if s == "torch+chorus" and compare:
                    if size < 1 << 20:
                        cells.append(f"{med[s] - med['chorus-perf']:+.1f} µs")
                    else:
                        cells.append(f"{100 * bw[s] / bw['chorus-perf']:.0f}% busbw")
            lines.append("| " + " | ".join(cells) + " |")
    text = "\n".join(lines)
    with open(os.path.join(out_dir, "tables.md"), "w") as f:
        f.write(text + "\n")
    print(text)
    print(f"\nresults in {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
