"""PyTorch's own distributed test base (torch/testing/_internal/distributed/distributed_test.py,
DistributedTest._DistTestBase) run against a backend named by $BACKEND ("chorus" or "gloo").

Run through run_dist_tests.py, which sets BACKEND, WORLD_SIZE and TEMP_DIR. This module is
also what every spawned rank imports, so everything the ranks need (the expecttest stub, the
chorus backend, the feature sets the test base reads at import) happens at import time.

The test base has hooks for plug-in backends: DistTestCases.backend_feature["plugin"], "ddp"
and "subgroup" say what a plug-in supports; skip_collective["sendrecv anysource"] says what it
does not (chorus, like NCCL, has no receive from any source).
"""
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "stubs"))

BACKEND = os.environ["BACKEND"]
# The backend the process groups really use. It differs from BACKEND only in the gate-lifted
# run of run_dist_tests.py: BACKEND=gloo makes the test base's import-time gates ("requires
# backend gloo") pass, while every process group is created with chorus.
REAL_BACKEND = os.environ.get("CHORUS_SUITE_REAL_BACKEND", BACKEND)

from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

if REAL_BACKEND == "chorus":
    import chorus_torch  # noqa: F401,E402  (registers the backend)

    for feature in ("plugin", "ddp", "subgroup"):
        DistTestCases.backend_feature[feature].add("chorus")
    DistTestCases.skip_collective["sendrecv anysource"].add("chorus")

from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)


class TestDist(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()

    @classmethod
    def _run(cls, rank, test_name, file_name, pipe):
        # TestDistBackend._run turns on DDP's experimental ReplicatedTensor mode first, which
        # imports torch.distributed._shard: that fails under Debian's Python 3.11 with torch 1.13
        # (a dataclass with a mutable default), for gloo as much as for chorus. Everything else
        # it does is done here the same way; DDP runs in its ordinary mode.
        import torch.distributed as dist
        from datetime import timedelta
        from torch.testing._internal.distributed.distributed_test import CUSTOM_PG_TIMEOUT
        from torch.distributed.distributed_c10d import default_pg_timeout

        self = cls(test_name)
        self.rank = rank
        self.file_name = file_name
        timeout = CUSTOM_PG_TIMEOUT.get(test_name, default_pg_timeout)
        if not isinstance(timeout, timedelta):
            timeout = timedelta(seconds=timeout)
        dist.init_process_group(init_method=self.init_method, backend=REAL_BACKEND,
                                world_size=int(self.world_size), rank=self.rank,
                                timeout=timeout)
        if dist.get_backend() != REAL_BACKEND:
            raise RuntimeError(f"the default group runs {dist.get_backend()}, not {REAL_BACKEND}")
        self._barrier()
        self.run_test(test_name, pipe)
        self._barrier()
        dist.destroy_process_group()
        sys.exit(0)


def all_test_names():
    return sorted(n for n in dir(TestDist) if n.startswith("test_"))


def statically_skipped(name):
    """The skip reason a decorator attached at import, or None (the test runs or skips later)."""
    fn = getattr(TestDist, name)
    if getattr(fn, "__unittest_skip__", False):
        return getattr(fn, "__unittest_skip_why__", "skipped")
    return None


class _Recorder(unittest.TextTestResult):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.outcomes = {}

    def _name(self, test):
        return test.id().split(".")[-1]

    def addSuccess(self, test):
        super().addSuccess(test)
        self.outcomes[self._name(test)] = ["passed", ""]

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.outcomes[self._name(test)] = ["failed", self._exc_info_to_string(err, test)[-3000:]]

    def addError(self, test, err):
        super().addError(test, err)
        self.outcomes[self._name(test)] = ["failed", self._exc_info_to_string(err, test)[-3000:]]

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.outcomes[self._name(test)] = ["skipped", reason]


def main():
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("--list", action="store_true", help="print test names and static skips")
    p.add_argument("--json", help="write {test: [outcome, detail]} here")
    p.add_argument("tests", nargs="*")
    args = p.parse_args()
    if args.list:
        print(json.dumps({n: statically_skipped(n) for n in all_test_names()}))
        return 0
    names = args.tests or all_test_names()
    suite = unittest.TestSuite(TestDist(n) for n in names)
    runner = unittest.TextTestRunner(resultclass=_Recorder, verbosity=2, stream=sys.stderr)
    result = runner.run(suite)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result.outcomes, f, indent=1)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    # common_utils parses (and trims) sys.argv at import; our arguments were read above it only
    # in main(), so hand it a clean argv.
    argv = sys.argv[1:]
    sys.argv = sys.argv[:1] + argv
    sys.exit(main())
