#!/usr/bin/env bash
# Install what is missing, build, and run the whole test suite (ctest prints the counts).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
# Tests talk over loopback only.
export CHORUS_SOCKET_IFNAME=lo
ctest --test-dir build -j"$(nproc)" --output-on-failure --timeout 900 "$@"
