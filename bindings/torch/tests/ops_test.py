#!/usr/bin/env python3
"""Every ProcessGroup operation of the chorus backend, checked on values, at one world size.

  ops_test.py --world-size 3

Spawns the ranks (separate processes, file:// rendezvous), each runs every check below on
fresh random inputs, outputs poisoned first, and compares with what the reduction must give
(computed locally from every rank's seeded inputs). Also: errors (bitwise ops, wrong sizes,
non-CPU tensors) raise with a message naming the problem; futures complete without wait();
a subgroup (new_group) works; the quantized module functions agree with quantize/dequantize.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import traceback

PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable

DTYPES = ["float32", "float64", "float16", "bfloat16", "int32", "int64", "int8", "uint8"]


def worker(rank, ws, init_file):
    import torch
    import torch.distributed as dist
    import chorus_torch

    dist.init_process_group("chorus", init_method="file://" + init_file, rank=rank,
                            world_size=ws)
    R = dist.ReduceOp
    assert dist.get_backend() == "chorus"

    def inputs(dtype, n, seed):
        """Every rank's input for one check (the same generator on every rank)."""
        g = torch.Generator().manual_seed(seed)
        if dtype.is_floating_point:
            # Small integers in float: sums are exact whatever the order, so equality holds.
            return [torch.randint(-8, 9, (n,), generator=g).to(dtype) for _ in range(ws)]
        lo, hi = (0, 4) if dtype == torch.uint8 else (-4, 5)
        return [torch.randint(lo, hi, (n,), generator=g).to(dtype) for _ in range(ws)]

    def poison(t):
        if t.dtype.is_floating_point:
            t.fill_(float("nan"))
        else:
            t.fill_(77)
        return t

    def expect(vals, op):
        acc = vals[0].double().clone()
        for v in vals[1:]:
            v = v.double()
            acc = {"sum": acc + v, "avg": acc + v, "prod": acc * v,
                   "min": torch.minimum(acc, v), "max": torch.maximum(acc, v)}[op]
        if op == "avg":
            acc = acc / ws
        return acc

    def close(got, want, dtype, what):
        tol = {torch.float16: 1e-2, torch.bfloat16: 1e-2}.get(dtype, 1e-6)
        if dtype.is_floating_point:
            ok = torch.allclose(got.double(), want, rtol=tol, atol=tol)
        else:
            ok = torch.equal(got.long(), want.round().long())
        if not ok:
            raise AssertionError(f"rank {rank}: {what}: got {got[:8].tolist()} want "
                                 f"{want[:8].tolist()}")

    ops = {"sum": R.SUM, "prod": R.PRODUCT, "min": R.MIN, "max": R.MAX, "avg": R.AVG}
    seed = 0
    for dname in DTYPES:
        dtype = getattr(torch, dname)
        for oname, op in ops.items():
            if oname == "avg" and not dtype.is_floating_point:
                continue
            for n in (1, 37, 70000):
                seed += 1
                vals = inputs(dtype, n, seed)
                t = vals[rank].clone()
                dist.all_reduce(t, op=op)
                close(t, expect(vals, oname), dtype, f"all_reduce {dname} {oname} n={n}")
                # reduce to a rotating root
                root = seed % ws
                t = vals[rank].clone()
                dist.reduce(t, root, op=op)
                if rank == root:
                    close(t, expect(vals, oname), dtype, f"reduce {dname} {oname} root={root}")
        # PREMUL_SUM (torch's private constructor; the factor multiplies every input)
        vals = inputs(dtype, 100, 999)
        if dtype.is_floating_point:
            t = vals[rank].clone()
            dist.all_reduce(t, op=dist._make_nccl_premul_sum(2.0))
            close(t, expect(vals, "sum") * 2.0, dtype, f"premul_sum {dname}")
        # reduce-scatter (list and tensor forms)
        n = 33
        vals = inputs(dtype, n * ws, 500 + seed)
        want = expect(vals, "sum")[rank * n:(rank + 1) * n]
        out = poison(torch.empty(n, dtype=dtype))
        dist.reduce_scatter(out, list(vals[rank].chunk(ws)))
        close(out, want, dtype, f"reduce_scatter {dname}")
        out = poison(torch.empty(n, dtype=dtype))
        dist.reduce_scatter_tensor(out, vals[rank])
        close(out, want, dtype, f"reduce_scatter_tensor {dname}")

    # complex sum, bool max
    g = torch.Generator().manual_seed(7)
    cv = [torch.randn(16, dtype=torch.complex64, generator=g) for _ in range(ws)]
    t = cv[rank].clone()
    dist.all_reduce(t)
    assert torch.allclose(t, sum(cv), atol=1e-5), "complex sum"
    b = torch.tensor([rank == 0, False, True])
    dist.all_reduce(b, op=R.MAX)
    assert b.tolist() == [True, False, True], b

    # data movement, every dtype (bytes), non-contiguous inputs and outputs
    for dname in DTYPES + ["bool", "int16", "complex64"]:
        dtype = getattr(torch, dname)
        seed += 1
        g = torch.Generator().manual_seed(seed)
        base = [(torch.randn(6, 10, generator=g) * 10).to(dtype) for _ in range(ws)]
        mine = base[rank].t()  # non-contiguous
        root = seed % ws
        t = mine.clone() if rank == root else poison(torch.empty(6, 10, dtype=dtype)).t()
        dist.broadcast(t, root)
        assert torch.equal(t, base[root].t()), f"broadcast {dname}"
        outs = [poison(torch.empty(10, 6, dtype=dtype)) for _ in range(ws)]
        dist.all_gather(outs, mine)
        assert all(torch.equal(outs[r], base[r].t()) for r in range(ws)), f"all_gather {dname}"
        flat = poison(torch.empty(ws * 60, dtype=dtype))
        dist.all_gather_into_tensor(flat, base[rank].reshape(-1))
        assert torch.equal(flat, torch.cat([b.reshape(-1) for b in base])), f"agit {dname}"
        gl = [poison(torch.empty(10, 6, dtype=dtype)) for _ in range(ws)] if rank == root else None
        dist.gather(mine, gl, dst=root)
        if rank == root:
            assert all(torch.equal(gl[r], base[r].t()) for r in range(ws)), f"gather {dname}"
        out = poison(torch.empty(6, 10, dtype=dtype))
        sl = [base[r] for r in range(ws)] if rank == root else None
        dist.scatter(out, sl, src=root)
        assert torch.equal(out, base[rank]), f"scatter {dname}"

    # all_to_all_single, equal and uneven splits; all_to_all (lists)
    x = torch.arange(ws * 4, dtype=torch.float32) + 100 * rank
    y = poison(torch.empty(ws * 4))
    dist.all_to_all_single(y, x)
    want = torch.cat([torch.arange(rank * 4, rank * 4 + 4, dtype=torch.float32) + 100 * r
                      for r in range(ws)])
    assert torch.equal(y, want), ("alltoall equal", y, want)
    # rank r sends (j + 1) rows to rank j, each row [r, j, k]
    insp = [j + 1 for j in range(ws)]
    rows = torch.cat([torch.tensor([[rank, j, k] for k in range(j + 1)], dtype=torch.int64)
                      for j in range(ws)])
    outsp = [rank + 1] * ws
    got = poison(torch.empty(sum(outsp), 3, dtype=torch.int64))
    dist.all_to_all_single(got, rows, outsp, insp)
    want = torch.cat([torch.tensor([[r, rank, k] for k in range(rank + 1)]) for r in range(ws)])
    assert torch.equal(got, want), ("alltoall uneven", got, want)
    ins = [torch.full((j + 1,), rank * 10 + j) for j in range(ws)]
    outs = [poison(torch.empty(rank + 1, dtype=torch.int64)) for _ in range(ws)]
    dist.all_to_all(outs, ins)
    assert all(torch.equal(outs[r], torch.full((rank + 1,), r * 10 + rank)) for r in range(ws))

    # send/recv ring, with isend/irecv posted before either is waited on (large: no deadlock)
    nxt, prv = (rank + 1) % ws, (rank - 1) % ws
    big = torch.full((1 << 20,), float(rank))
    rbuf = poison(torch.empty(1 << 20))
    reqs = [dist.isend(big, nxt), dist.irecv(rbuf, prv)]
    for r in reqs:
        r.wait()
    assert torch.equal(rbuf, torch.full((1 << 20,), float(prv))), "isend/irecv ring"
    if rank == 0:
        dist.send(torch.arange(5.0), 1)
    elif rank == 1:
        r = poison(torch.empty(5))
        dist.recv(r, 0)
        assert torch.equal(r, torch.arange(5.0))
    dist.barrier()

    # all_reduce_coalesced, all_gather_coalesced (deprecated APIs that gloo runs)
    a, b2 = torch.ones(3) * rank, torch.ones(2, 2) * (rank + 1)
    dist.all_reduce_coalesced([a, b2])
    assert torch.equal(a, torch.full((3,), float(sum(range(ws)))))
    assert torch.equal(b2, torch.full((2, 2), float(sum(range(1, ws + 1)))))

    # futures complete with nobody calling wait(): DDP's use
    t = torch.full((300000,), float(rank))
    fut = dist.all_reduce(t, async_op=True).get_future()
    small = torch.ones(3)
    fut2 = dist.all_reduce(small, async_op=True).get_future()
    import time
    deadline = time.time() + 30
    while not (fut.done() and fut2.done()):
        assert time.time() < deadline, "futures not completed without wait()"
        time.sleep(0.001)
    assert torch.equal(fut.value()[0], torch.full((300000,), float(sum(range(ws)))))
    assert torch.equal(fut2.value()[0], torch.full((3,), float(ws)))

    # errors raise with the reason
    def raises(fn, words):
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            msg = str(e)
            assert all(w in msg for w in words), f"message {msg!r} lacks {words}"
            return
        raise AssertionError(f"no error; expected one mentioning {words}")

    raises(lambda: dist.all_reduce(torch.ones(2, dtype=torch.int32), op=R.BXOR),
           ["not supported", "BXOR"])
    # A CUDA tensor cannot be made on this CPU-only torch; torch's dispatcher does not route a
    # meta tensor to a process group, but chorus_torch's own functions check the same way.
    raises(lambda: chorus_torch.all_reduce_quantized(torch.ones(2, device="meta")),
           ["is on meta", "CPU tensors only"])
    raises(lambda: dist.all_gather_into_tensor(torch.empty(5), torch.ones(2)),
           ["_allgather_base", "elements"])
    raises(lambda: dist.all_reduce(torch.ones(2, dtype=torch.int16)), ["torch.int16", "cannot be reduced"])

    # a subgroup (new_group: its own chorus communicator) of every rank but the last
    sub = dist.new_group(list(range(ws - 1)))
    if rank < ws - 1:
        t = torch.ones(4) * (rank + 1)
        dist.all_reduce(t, group=sub)
        assert torch.equal(t, torch.full((4,), float(sum(range(1, ws))))), t
    dist.barrier()

    # quantized collectives and local quantization
    g = torch.Generator().manual_seed(42)
    full = [torch.randn(4096, generator=g) for _ in range(ws)]
    t = full[rank].clone()
    chorus_torch.all_reduce_quantized(t, "sum")
    exact = sum(full)
    rel = ((t - exact).norm() / exact.norm()).item()
    assert rel < 0.05, f"quantized all-reduce error {rel}"
    gathered = torch.empty(ws * 4096)
    chorus_torch.all_gather_quantized(gathered, full[rank])
    for r in range(ws):
        q = chorus_torch.quantize(full[r])
        dq = chorus_torch.dequantize(q, 4096)
        assert torch.equal(gathered[r * 4096:(r + 1) * 4096], dq), "all_gather_quantized"
    out = torch.empty(1024)
    inp = torch.cat([f[:1024] for f in full])[: 1024 * ws]
    chorus_torch.reduce_scatter_quantized(out, torch.cat([full[rank][:1024]] * ws), "avg")
    rel = ((out - sum(f[:1024] for f in full) / ws).norm() / (sum(f[:1024] for f in full) / ws).norm()).item()
    assert rel < 0.05, f"quantized reduce-scatter error {rel}"
    assert "quant" in chorus_torch.stats(), chorus_torch.stats()
    raises(lambda: chorus_torch.all_reduce_quantized(torch.ones(10, dtype=torch.int32)),
           ["torch.int32", "cannot be quantized"])
    raises(lambda: chorus_torch.quantize(torch.ones(8), bits=5), ["bits must be 4 or 8"])
    del inp

    dist.destroy_process_group()
    print(f"rank {rank}: all checks passed")


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--timeout", type=int, default=180)
    p.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    p.add_argument("--init-file", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker is not None:
        try:
            worker(a.worker, a.world_size, a.init_file)
        except Exception:
            traceback.print_exc()
            os._exit(1)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        init = os.path.join(tmp, "init")
        procs = [subprocess.Popen([PYTHON, os.path.abspath(__file__), "--worker", str(r),
                                   "--world-size", str(a.world_size), "--init-file", init])
                 for r in range(a.world_size)]
        codes = []
        for pr in procs:
            try:
                codes.append(pr.wait(timeout=a.timeout))
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                print(f"FAIL: exceeded {a.timeout} s")
                return 1
    print("PASS" if not any(codes) else f"FAIL: exit codes {codes}")
    return 1 if any(codes) else 0


if __name__ == "__main__":
    sys.exit(main())
