#!/usr/bin/env bash
# The main job: install what is missing, build, run a 4-rank chorus-perf allreduce on this host.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
exec build/tools/chorus-run/chorus-run -n 4 -- build/tools/chorus-perf/chorus-perf -b 8 -e 64M -f 4 "$@"
