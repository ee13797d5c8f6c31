#!/usr/bin/env python3
"""The README's two ways of starting example.py with init_process_group("chorus"), checked.

  launch_test.py [--nproc 4] [--steps 5]

1. torchrun: `torchrun --standalone --nproc_per_node N example.py`, with `--redirects 2 --tee 2`
   (Debian's torchrun 1.13 under Python 3.11 fails in its own argument handling without them,
   whatever the backend). --standalone lets torchrun pick a free port.
2. torch's plain variables: MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK, one process per rank (2).

Each must exit 0 within its deadline and print the loss of its last step, lower than the first.
"""
import argparse
import os
import random
import re
import socket
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "example.py")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
DEADLINE = 180


def losses(text):
    return [float(m) for m in re.findall(r"mean loss over \d+ ranks ([0-9.eE+-]+)", text)]


def check(what, code, text):
    got = losses(text)
    if code != 0:
        print(text[-4000:])
        sys.exit(f"FAIL {what}: exit status {code}")
    if len(got) < 2 or not got[-1] < got[0]:
        print(text[-4000:])
        sys.exit(f"FAIL {what}: expected a falling loss, got {got}")
    print(f"ok {what}: loss {got[0]:.4f} -> {got[-1]:.4f}")


def free_port():
    """A port free now and below the kernel's ephemeral range, so that no connection on this host
    can be given it before rank 0 binds it (as chorus-run picks; tools/chorus-run/job_env.h)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    first = low // 2
    start = random.SystemRandom().randrange(max(1, low - first))
    for i in range(low - first):
        port = first + (start + i) % (low - first)
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                continue
            return port
    sys.exit("FAIL: no free TCP port below the ephemeral range")


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--nproc", type=int, default=4)
    p.add_argument("--steps", type=int, default=5)
    a = p.parse_args()
    torchrun = os.path.join(os.path.dirname(PYTHON), "torchrun")
    cmd = [PYTHON, torchrun, "--standalone", "--redirects", "2", "--tee", "2",
           "--nproc_per_node", str(a.nproc), EXAMPLE, "--steps", str(a.steps)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=DEADLINE)
    check(f"torchrun --nproc_per_node {a.nproc}", r.returncode, r.stdout + r.stderr)

    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               WORLD_SIZE="2")
    procs = [subprocess.Popen([PYTHON, EXAMPLE, "--steps", str(a.steps)],
                              env=dict(env, RANK=str(r)), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in range(2)]
    outs = []
    for pr in procs:
        try:
            outs.append(pr.communicate(timeout=DEADLINE)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            sys.exit(f"FAIL MASTER_ADDR/PORT launch: no exit within {DEADLINE} s")
    code = max(abs(pr.returncode) for pr in procs)
    check("MASTER_ADDR/MASTER_PORT, 2 processes", code, "".join(outs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
