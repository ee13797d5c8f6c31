#!/usr/bin/env python3
"""DDP step time: gloo, chorus, and chorus with the int8 quantized all-reduce hook.

  ddp_bench.py --build build [--reps 3] [--ranks 2,4] [--steps 15]

The model (an MLP of about 25M float32 parameters, 100 MB of gradients a step, batch 8) is
large enough that the gradient all-reduce is a good part of a step on this machine. Per
repetition every configuration runs once, the order rotated (interleaved); a run's step time
is the median of its timed steps on rank 0 (after 3 warm-up steps), its loss the mean over
ranks of the last step's loss. The table shows medians over repetitions.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
CONFIGS = ["gloo", "chorus", "chorus+int8 hook"]


def worker(a):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    backend = a.config.split("+")[0]
    if backend == "chorus":
        import chorus_torch
    dist.init_process_group(backend, init_method="file://" + a.init_file, rank=a.rank,
                            world_size=a.world_size)
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                                    torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
                                    torch.nn.Linear(4096, 1024)))
    if "int8" in a.config:
        model.register_comm_hook(None, chorus_torch.quantized_allreduce_hook)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(a.rank)
    times = []
    for step in range(3 + a.steps):
        x = torch.randn(8, 1024, generator=gen)
        t0 = time.perf_counter()
        loss = (model(x) - x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step >= 3:
            times.append(time.perf_counter() - t0)
    last = loss.detach().clone()
    dist.all_reduce(last)
    if a.rank == 0:
        with open(a.result, "w") as f:
            json.dump({"step_ms": statistics.median(times) * 1e3,
                       "loss": last.item() / a.world_size}, f)
    dist.destroy_process_group()


def run(config, ranks, steps, tmp):
    init = os.path.join(tmp, f"init{time.monotonic_ns()}")
    result = os.path.join(tmp, "res.json")
    procs = [subprocess.Popen([PYTHON, os.path.abspath(__file__), "--worker", "--config", config,
                               "--rank", str(r), "--world-size", str(ranks), "--steps",
                               str(steps), "--init-file", init, "--result", result])
             for r in range(ranks)]
    if any(p.wait(timeout=1200) for p in procs):
        sys.exit(f"{config} at {ranks} ranks failed")
    with open(result) as f:
        return json.load(f)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--build", default="build")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--ranks", default="2,4")
    p.add_argument("--steps", type=int, default=15)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--config", help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--world-size", type=int, help=argparse.SUPPRESS)
    p.add_argument("--init-file", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        worker(a)
        return 0
    pkg = os.path.join(os.path.abspath(a.build), "bindings/torch")
    os.environ["PYTHONPATH"] = pkg + (":" + os.environ["PYTHONPATH"]
                                      if os.environ.get("PYTHONPATH") else "")
    # One intra-op thread per rank, as torchrun sets: torch's OpenMP workers otherwise spin
    # after each parallel op and take the cores the ranks need (2-core machine, 2-4 ranks).
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    res = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(a.reps):
            for ranks in [int(r) for r in a.ranks.split(",")]:
                for c in CONFIGS[rep % 3:] + CONFIGS[:rep % 3]:
                    res.setdefault((ranks, c), []).append(run(c, ranks, a.steps, tmp))
                    print(f"rep {rep} ranks {ranks} {c} done", file=sys.stderr, flush=True)
    print(f"\nDDP step, MLP 1024-4096-4096-1024 (25.2M parameters), batch 8, SGD; median of "
          f"{a.reps} interleaved runs of {a.steps} steps\n")
    print("| ranks | backend | step ms | vs gloo | loss after the run |")
    print("| ---: | --- | ---: | ---: | ---: |")
    for ranks in sorted({k[0] for k in res}):
        base = statistics.median(r["step_ms"] for r in res[(ranks, "gloo")])
        for c in CONFIGS:
            ms = statistics.median(r["step_ms"] for r in res[(ranks, c)])
            loss = statistics.median(r["loss"] for r in res[(ranks, c)])
            print(f"| {ranks} | {c} | {ms:.1f} | {base / ms:.2f}x | {loss:.6f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
