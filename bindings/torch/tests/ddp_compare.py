#!/usr/bin/env python3
"""DDP with the chorus backend against DDP with gloo: the same small model, the same per-rank
data, N SGD steps each, then the final parameters compared.

  ddp_compare.py --world-size 2 [--steps 20]

At world size 2 the parameters must be bitwise equal: every gradient element is the sum of two
values, and a + b is the same float whichever backend (or rank) adds it. From 3 ranks on, the
backends associate the sum differently (gloo's ring and chorus's tuned algorithm cut and order
the additions differently), so results may differ in the last bits: they must be allclose
(rtol 1e-5, atol 1e-6). In both cases every rank of a backend must hold bitwise-identical
parameters (DDP's invariant), and the loss must have gone down.

With --quantized-hook the chorus run uses chorus_torch.quantized_allreduce_hook (int8 all-reduce)
and is compared with a tolerance instead (the gradients are quantized).
"""
import argparse
import os
import subprocess
import sys
import tempfile

PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def build_model(torch):
    torch.manual_seed(1234)
    return torch.nn.Sequential(
        torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 10))


def worker(args):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    if args.backend == "chorus":
        import chorus_torch
    rank, ws = args.rank, args.world_size
    dist.init_process_group(args.backend, init_method="file://" + args.init_file, rank=rank,
                            world_size=ws)
    model = DDP(build_model(torch))
    if args.quantized_hook:
        model.register_comm_hook(None, chorus_torch.quantized_allreduce_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(100 + rank)
    losses = []
    for _ in range(args.steps):
        x = torch.randn(32, 64, generator=gen)
        y = torch.randint(0, 10, (32,), generator=gen)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    params = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    torch.save({"params": params, "losses": losses}, args.out)
    dist.destroy_process_group()


def launch(backend, ws, steps, tmp, quantized_hook, timeout):
    init_file = os.path.join(tmp, f"init_{backend}_{quantized_hook}")
    procs, outs = [], []
    for r in range(ws):
        out = os.path.join(tmp, f"{backend}_{quantized_hook}_{r}.pt")
        outs.append(out)
        cmd = [PYTHON, os.path.abspath(__file__), "--worker", "--backend", backend, "--rank",
               str(r), "--world-size", str(ws), "--steps", str(steps), "--init-file", init_file,
               "--out", out] + (["--quantized-hook"] if quantized_hook else [])
        procs.append(subprocess.Popen(cmd))
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=timeout))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            sys.exit(f"FAIL: {backend} run exceeded {timeout} s")
    if any(codes):
        sys.exit(f"FAIL: {backend} ranks exited with {codes}")
    import torch
    return [torch.load(o) for o in outs]


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--quantized-hook", action="store_true")
    p.add_argument("--timeout", type=int, default=240)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--backend", help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--init-file", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args)
        return 0
    import torch

    ws = args.world_size
    with tempfile.TemporaryDirectory() as tmp:
        gloo = launch("gloo", ws, args.steps, tmp, False, args.timeout)
        chorus = launch("chorus", ws, args.steps, tmp, args.quantized_hook, args.timeout)
    for name, runs in (("gloo", gloo), ("chorus", chorus)):
        for r in range(1, ws):
            if not torch.equal(runs[r]["params"], runs[0]["params"]):
                sys.exit(f"FAIL: {name}: rank {r}'s parameters differ from rank 0's")
        if not runs[0]["losses"][-1] < runs[0]["losses"][0]:
            sys.exit(f"FAIL: {name}: the loss did not go down: {runs[0]['losses']}")
    a, b = gloo[0]["params"], chorus[0]["params"]
    diff = (a - b).abs().max().item()
    if args.quantized_hook:
        ok = torch.allclose(a, b, rtol=0, atol=2e-2)
        rule = "|gloo - chorus(int8 hook)| <= 2e-2"
    elif ws == 2:
        ok = torch.equal(a, b)
        rule = "bitwise equal"
    else:
        ok = torch.allclose(a, b, rtol=1e-5, atol=1e-6)
        rule = "allclose(rtol=1e-5, atol=1e-6)"
    print(f"world size {ws}, {args.steps} steps, {a.numel()} parameters: max |gloo - chorus| = "
          f"{diff:.3g}; final loss gloo {gloo[0]['losses'][-1]:.5f} chorus "
          f"{chorus[0]['losses'][-1]:.5f}; required: {rule}")
    if not ok:
        sys.exit("FAIL")
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
