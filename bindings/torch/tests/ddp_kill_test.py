#!/usr/bin/env python3
"""A rank killed (SIGKILL) during DDP training with the chorus backend makes every other rank
raise within seconds, instead of hanging until the process group's timeout.

  ddp_kill_test.py [--world-size 3] [--limit 10]

The ranks train a small DDP model in a loop (the group's timeout is 300 s, so only chorus's
dead-peer detection can end the wait early). Once every rank has done a few steps, the parent
kills the last rank; each survivor must raise from a DDP step or collective within --limit
seconds of the kill (measured on CLOCK_MONOTONIC, shared by processes on one host) and print
the error, which must name the failure.
"""
import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time

PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def worker(rank, ws, tmp):
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import chorus_torch  # noqa: F401

    dist.init_process_group("chorus", init_method="file://" + os.path.join(tmp, "init"),
                            rank=rank, world_size=ws, timeout=timedelta(seconds=300))
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(),
                                    torch.nn.Linear(1024, 256)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0
    try:
        while True:
            x = torch.randn(64, 256)
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step == 5:
                open(os.path.join(tmp, f"ready{rank}"), "w").close()
    except Exception as e:  # noqa: BLE001
        t = time.monotonic()
        with open(os.path.join(tmp, f"raised{rank}"), "w") as f:
            f.write(f"{t}\n{type(e).__name__}: {e}\n")
        os._exit(3)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--world-size", type=int, default=3)
    p.add_argument("--limit", type=float, default=10.0)
    p.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    p.add_argument("--dir", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker is not None:
        worker(a.worker, a.world_size, a.dir)
        return 0
    ws = a.world_size
    with tempfile.TemporaryDirectory() as tmp:
        procs = [subprocess.Popen([PYTHON, os.path.abspath(__file__), "--worker", str(r),
                                   "--world-size", str(ws), "--dir", tmp])
                 for r in range(ws)]
        try:
            deadline = time.time() + 120
            while not all(os.path.exists(os.path.join(tmp, f"ready{r}")) for r in range(ws)):
                if time.time() > deadline or any(pr.poll() is not None for pr in procs):
                    print("FAIL: the ranks did not start training")
                    return 1
                time.sleep(0.05)
            victim = procs[-1]
            killed_at = time.monotonic()
            victim.send_signal(signal.SIGKILL)
            ok = True
            for r, pr in enumerate(procs[:-1]):
                try:
                    code = pr.wait(timeout=a.limit + 30)
                except subprocess.TimeoutExpired:
                    print(f"FAIL: rank {r} still running {a.limit + 30:.0f} s after the kill")
                    ok = False
                    continue
                path = os.path.join(tmp, f"raised{r}")
                if code != 3 or not os.path.exists(path):
                    print(f"FAIL: rank {r} exited with {code} without raising")
                    ok = False
                    continue
                with open(path) as f:
                    t, msg = f.read().split("\n", 1)
                after = float(t) - killed_at
                print(f"rank {r} raised {after:.2f} s after the kill: {msg.strip()[:300]}")
                if after > a.limit:
                    print(f"FAIL: rank {r} took longer than {a.limit} s")
                    ok = False
                if "chorus" not in msg:
                    print(f"FAIL: rank {r}'s error does not come from chorus")
                    ok = False
        finally:
            for pr in procs:
                if pr.poll() is None:
                    pr.kill()
                    pr.wait()
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
