#!/usr/bin/env python3
"""torch.distributed.all_reduce through the chorus backend, against gloo and chorus-perf.

  allreduce_bench.py --build build [--reps 5] [--ranks 2,4] [--out DIR] [--sizes 8,1M]
                     [--systems chorus-perf,torch+chorus,torch+gloo] [--iters N] [--pin]
                     [--torch-ops K]

Per repetition, every configuration runs once, in an order rotated each repetition
(interleaved): chorus-perf (blocking calls, -z 1: what the backend calls; in-place column),
then torch.distributed.all_reduce(t) (synchronous, in place, float32 sum) with
backend="chorus" and with backend="gloo" — same sizes, same iteration counts, one process per
rank. A run's time is the mean per call over its timed iterations after warm-up (chorus-perf's
definition); the tables show the median over repetitions, busbw = size/time * 2(n-1)/n.
Writes raw.csv and tables.md to --out and prints the tables.

Diagnostics (not in the default set of systems):
  python+chorus  a Python loop calling chorusAllReduce through ctypes on a torch tensor, no
                 process group (what any Python caller pays), with --torch-ops K tiny torch
                 operations (t.add_(0) on a 2-element tensor) between calls: the host time a
                 training loop or torch.distributed spends between collectives, without it.
  --pin          rank r runs on CPU r mod (the CPUs this script may use), for every system: with
                 more ranks than cores, which ranks share a core otherwise changes from run to
                 run and with it the time (4 ranks on 2 cores: up to +-20% between runs).
  --iters N      N timed calls (N/10 warm-up) at every size instead of the size's default.
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
ITERS = None  # --iters


def iters_for(size):
    if ITERS:
        return ITERS, max(ITERS // 10, 1)
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


def pin_cpu(rank):
    """The CPU rank `rank` runs on under --pin: rank mod the CPUs this process may use."""
    cpus = sorted(os.sched_getaffinity(0))
    return cpus[rank % len(cpus)]


def ctypes_worker(args):
    """python+chorus: chorusAllReduce through ctypes from a Python loop (run under chorus-run)."""
    import ctypes
    import torch

    rank = int(os.environ["CHORUS_RANK"])
    if args.pin:
        os.sched_setaffinity(0, {pin_cpu(rank)})
    lib = ctypes.CDLL(args.libchorus)
    comm = ctypes.c_void_p()
    if lib.chorusCommInitFromEnv(ctypes.byref(comm)) != 0:
        sys.exit(f"rank {rank}: chorusCommInitFromEnv failed")
    lib.chorusGetLastError.restype = ctypes.c_char_p
    ar = lib.chorusAllReduce
    ar.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                   ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    float32, op_sum = 7, 0  # chorusFloat32, chorusSum (include/chorus/chorus.h)
    side = torch.ones(2)
    ops = range(args.torch_ops)

    def call(p, count):
        for _ in ops:
            side.add_(0)
        r = ar(p, p, count, float32, op_sum, comm, None)
        if r != 0:
            sys.exit(f"rank {rank}: chorusAllReduce: {lib.chorusGetLastError(comm).decode()}")

    out = {}
    for size in args.sizes:
        n, w = iters_for(size)
        t = torch.ones(max(size // 4, 1), dtype=torch.float32)
        p, count = ctypes.c_void_p(t.data_ptr()), t.numel()
        for _ in range(w):
            call(p, count)
        lib.chorusBarrier(comm, None)
        t0 = time.perf_counter()
        for _ in range(n):
            call(p, count)
        out[size] = (time.perf_counter() - t0) / n * 1e6
        t.fill_(1.0)
    if rank == 0:
        with open(args.result, "w") as f:
            json.dump(out, f)
    lib.chorusCommDestroy(comm)


def worker(args):
    import torch
    import torch.distributed as dist

    if args.pin:
        os.sched_setaffinity(0, {pin_cpu(args.rank)})
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


def common_flags(args):
    flags = ["--sizes", ",".join(map(str, args.sizes)), "--torch-ops", str(args.torch_ops)]
    if ITERS:
        flags += ["--iters", str(ITERS)]
    return flags + (["--pin"] if args.pin else [])


def run_torch(backend, ranks, tmp, args):
    init = os.path.join(tmp, f"init_{backend}_{time.monotonic_ns()}")
    result = os.path.join(tmp, f"res_{backend}.json")
    procs = [subprocess.Popen([PYTHON, os.path.abspath(__file__), "--worker", "--backend",
                               backend, "--rank", str(r), "--world-size", str(ranks),
                               "--init-file", init, "--result", result] + common_flags(args))
             for r in range(ranks)]
    codes = [p.wait(timeout=900) for p in procs]
    if any(codes):
        sys.exit(f"torch {backend} at {ranks} ranks failed: {codes}")
    with open(result) as f:
        return {int(k): v for k, v in json.load(f).items()}


def run_ctypes(build, ranks, tmp, args):
    result = os.path.join(tmp, "res_ctypes.json")
    cmd = [os.path.join(build, "tools/chorus-run/chorus-run"), "-n", str(ranks), PYTHON,
           os.path.abspath(__file__), "--ctypes-worker", "--libchorus",
           os.path.join(build, "libchorus.so"), "--result", result] + common_flags(args)
    subprocess.run(cmd, check=True, timeout=900)
    with open(result) as f:
        return {int(k): v for k, v in json.load(f).items()}


def run_perf(build, ranks, tmp, args):
    out = {}
    # --pin: each rank execs chorus-perf bound to its CPU (taskset, util-linux), the same CPU
    # pin_cpu() gives: the allowed CPUs travel in the environment.
    env = dict(os.environ, BENCH_CPUS=" ".join(map(str, sorted(os.sched_getaffinity(0)))))
    pin = (["sh", "-c", 'n=$(echo $BENCH_CPUS | wc -w); '
            'cpu=$(echo $BENCH_CPUS | cut -d" " -f$((CHORUS_RANK % n + 1))); '
            'exec taskset -c "$cpu" "$@"', "pin"] if args.pin else [])
    for size in args.sizes:
        n, w = iters_for(size)
        path = os.path.join(tmp, "perf.csv")
        cmd = [os.path.join(build, "tools/chorus-run/chorus-run"), "-n", str(ranks)] + pin + [
               os.path.join(build, "tools/chorus-perf/chorus-perf"), "-b", str(size), "-e",
               str(size), "-n", str(n), "-w", str(w), "-z", "1", "-c", "1", "--csv", path]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=900, env=env)
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
    p.add_argument("--systems", default="chorus-perf,torch+chorus,torch+gloo",
                   help="any of chorus-perf, torch+chorus, torch+gloo, python+chorus")
    p.add_argument("--iters", type=int, help="timed calls per size (default: by size)")
    p.add_argument("--pin", action="store_true", help="rank r on CPU r mod the CPUs allowed")
    p.add_argument("--torch-ops", type=int, default=0,
                   help="python+chorus: tiny torch operations between calls")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--ctypes-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--libchorus", help=argparse.SUPPRESS)
    p.add_argument("--backend", help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--world-size", type=int, help=argparse.SUPPRESS)
    p.add_argument("--init-file", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.sizes = [parse_size(x) for x in args.sizes.split(",")]
    global ITERS
    if args.iters is not None and args.iters < 1:
        sys.exit(f"--iters must be at least 1, got {args.iters}")
    if args.torch_ops < 0:
        sys.exit(f"--torch-ops must be at least 0, got {args.torch_ops}")
    ITERS = args.iters
    if args.worker:
        worker(args)
        return 0
    if args.ctypes_worker:
        ctypes_worker(args)
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
    known = {"chorus-perf", "torch+chorus", "torch+gloo", "python+chorus"}
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
                        res = run_perf(build, ranks, tmp, args)
                    elif system == "python+chorus":
                        res = run_ctypes(build, ranks, tmp, args)
                    else:
                        res = run_torch(system.split("+")[1], ranks, tmp, args)
                    for size, t in res.items():
                        raw.append((rep, ranks, system, size, t))
                    print(f"rep {rep} ranks {ranks} {system} done", file=sys.stderr, flush=True)
    with open(os.path.join(out_dir, "raw.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["rep", "ranks", "system", "bytes", "time_us"])
        w.writerows(raw)
    lines = []
    compared = {"torch+chorus", "python+chorus"} if "chorus-perf" in systems else set()
    for ranks in sorted({r[1] for r in raw}):
        head = ["size"]
        for s in systems:
            head += [f"{s} µs", "busbw GB/s"] + (["vs chorus-perf"] if s in compared else [])
        how = (", rank r on CPU r mod the CPUs" if args.pin else "") + (
            f", {ITERS} calls per run" if ITERS else "") + (
            f", python+chorus with {args.torch_ops} torch ops between calls"
            if "python+chorus" in systems else "")
        lines += [f"\n{ranks} ranks, float32 sum, in place; median of {args.reps} interleaved runs"
                  + how,
                  "", "| " + " | ".join(head) + " |", "|" + " ---: |" * len(head)]
        for size in args.sizes:
            med = {s: statistics.median(t for (_, n, sy, sz, t) in raw
                                        if n == ranks and sy == s and sz == size)
                   for s in systems}
            bw = {s: size / med[s] / 1e3 * 2 * (ranks - 1) / ranks for s in systems}
            cells = [fmt_size(size)]
            for s in systems:
                cells += [f"{med[s]:.1f}", f"{bw[s]:.3f}"]
                if s in compared:
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
