#!/usr/bin/env python3
"""Runs PyTorch's distributed test base (dist_suite.py) with BACKEND=chorus at the given world
sizes and reports, per world size, how the tests gloo runs fared: passed, failed, skipped, with
each skip's reason.

"The tests gloo runs": the test base skips some tests at import for some backends (decorators
naming gloo, nccl, a plug-in feature set); dist_suite.py --list gives those static skips for a
backend without running anything. A test gloo does not skip statically is in the selection;
when chorus skips it (statically or at run time), the reason is reported.

  run_dist_tests.py --pythonpath build/bindings/torch --world-sizes 2,3 [--tests a,b | --tests-file F]
                    [--lift-gates] [--out DIR]

Some tests are skipped for chorus only because a decorator names the backends it accepts
("requires backend gloo"). --lift-gates runs those once more with the decorators evaluated as
for gloo (BACKEND=gloo at import) while every process group is chorus's, and lists each result
apart from the verdict.

Exit status 0 only when no selected test failed.
"""
import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SUITE = os.path.join(HERE, "dist_suite.py")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def env_for(backend, world_size, pythonpath, temp_dir):
    env = dict(os.environ)
    env.update(BACKEND=backend, WORLD_SIZE=str(world_size), TEMP_DIR=temp_dir)
    env["PYTHONPATH"] = pythonpath + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("CHORUS_SOCKET_IFNAME", "lo")
    env.setdefault("MASTER_ADDR", "127.0.0.1")
    return env


def static_skips(backend, world_size, pythonpath):
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([PYTHON, SUITE, "--list"], env=env_for(backend, world_size,
                             pythonpath, tmp), capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        sys.exit(f"listing the tests for {backend} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(world_size, names, pythonpath, out_dir, timeout, lifted=False):
    if not names:  # (dist_suite.py without names runs every test)
        return {}, 0.0, None
    tag = "chorus_lifted" if lifted else "chorus"
    results = os.path.join(out_dir, f"{tag}_ws{world_size}.json")
    log = os.path.join(out_dir, f"{tag}_ws{world_size}.log")
    with tempfile.TemporaryDirectory() as tmp, open(log, "w") as logf:
        env = env_for("gloo" if lifted else "chorus", world_size, pythonpath, tmp)
        if lifted:
            env["CHORUS_SUITE_REAL_BACKEND"] = "chorus"
        t0 = time.time()
        try:
            subprocess.run([PYTHON, SUITE, "--json", results] + names, env=env, stdout=logf,
                           stderr=subprocess.STDOUT, timeout=timeout)
        except subprocess.TimeoutExpired:
            print(f"world size {world_size}: the run exceeded {timeout} s", file=sys.stderr)
        elapsed = time.time() - t0
    outcomes = {}
    if os.path.exists(results):
        with open(results) as f:
            outcomes = json.load(f)
    for n in names:
        outcomes.setdefault(n, ["failed", "no result (the run was cut short; see " + log + ")"])
    return outcomes, elapsed, log


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--pythonpath", required=True, help="directory holding the chorus_torch package")
    p.add_argument("--world-sizes", default="2,3")
    p.add_argument("--tests", help="comma-separated test names (default: every test gloo runs)")
    p.add_argument("--tests-file", help="file with one test name per line (# comments)")
    p.add_argument("--out", help="directory for logs and JSON results (default: a temp dir)")
    p.add_argument("--timeout", type=int, default=7200, help="seconds per world size")
    p.add_argument("--lift-gates", action="store_true",
                   help="also run the tests skipped for chorus only by a gate on the backend's "
                        "name, with the gates evaluated as for gloo (reported apart)")
    args = p.parse_args()

    out_dir = args.out or tempfile.mkdtemp(prefix="chorus_dist_tests_")
    os.makedirs(out_dir, exist_ok=True)
    failed_any = False
    summary = {}
    for ws in [int(w) for w in args.world_sizes.split(",")]:
        gloo = static_skips("gloo", ws, args.pythonpath)
        chorus_static = static_skips("chorus", ws, args.pythonpath)
        selection = [n for n, why in sorted(gloo.items()) if why is None]
        if args.tests or args.tests_file:
            wanted = []
            if args.tests:
                wanted += [t.strip() for t in args.tests.split(",") if t.strip()]
            if args.tests_file:
                with open(args.tests_file) as f:
                    wanted += [l.split("#")[0].strip() for l in f if l.split("#")[0].strip()]
            unknown = [t for t in wanted if t not in gloo]
            if unknown:
                sys.exit(f"unknown tests: {unknown}")
            not_gloo = [t for t in wanted if gloo[t] is not None]
            if not_gloo:
                sys.exit(f"gloo does not run these (static skip): {not_gloo}")
            selection = wanted
        to_run = [n for n in selection if chorus_static.get(n) is None]
        outcomes = {n: ["skipped", chorus_static[n]] for n in selection if chorus_static.get(n)}
        ran, elapsed, log = run(ws, to_run, args.pythonpath, out_dir, args.timeout)
        outcomes.update(ran)
        counts = collections.Counter(o for o, _ in outcomes.values())
        reasons = collections.Counter(d for o, d in outcomes.values() if o == "skipped")
        print(f"world size {ws}: {len(selection)} tests gloo runs: {counts['passed']} passed, "
              f"{counts['failed']} failed, {counts['skipped']} skipped ({elapsed:.0f} s; log {log})")
        for why, k in reasons.most_common():
            print(f"  skipped x{k}: {why}")
        for n, (o, d) in sorted(outcomes.items()):
            if o == "failed":
                failed_any = True
                last = d.strip().splitlines()[-1] if d.strip() else ""
                print(f"  FAILED {n}: {last[:300]}")
        summary[ws] = {"counts": dict(counts), "outcomes": outcomes, "seconds": elapsed}
        # Tests PyTorch's decorators skip for chorus only because of its name ("requires backend
        # gloo", "only gloo supports timeouts"): with --lift-gates they run again with the
        # decorators evaluated as for gloo while every process group is chorus's. Reported apart:
        # they are not part of the pass/fail verdict above.
        gated = [n for n, (o, why) in sorted(outcomes.items())
                 if o == "skipped" and chorus_static.get(n)
                 and not chorus_static[n].startswith("chorus does not support")]
        if args.lift_gates and gated:
            lifted, elapsed, log = run(ws, gated, args.pythonpath, out_dir, args.timeout, True)
            lc = collections.Counter(o for o, _ in lifted.values())
            print(f"world size {ws}: {len(gated)} of the skips are gates on the backend's name; "
                  f"run with the gates lifted: {lc['passed']} passed, {lc['failed']} failed, "
                  f"{lc['skipped']} skipped ({elapsed:.0f} s; log {log})")
            for n, (o, d) in sorted(lifted.items()):
                last = d.strip().splitlines()[-1] if d.strip() else ""
                print(f"  {o:7} {n}  [{chorus_static[n]}]" + (f": {last[:200]}" if last else ""))
            summary[ws]["lifted"] = lifted
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(f"results in {out_dir}")
    return 1 if failed_any else 0


if __name__ == "__main__":
    sys.exit(main())
