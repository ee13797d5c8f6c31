#!/usr/bin/env bash
# Install what is missing, build, and run the whole test suite (ctest prints the counts), then
# the sanitizer part (scripts/sanitize.sh ci: clang ASan+UBSan and TSan builds, which also check
# that clang builds the code warning-free, and a chosen part of the suite under each; it prints
# "sanitizers: N passed, M failed"). Both run even when the first fails; either failing fails
# the script.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
# Tests talk over loopback only.
export CHORUS_SOCKET_IFNAME=lo
status=0
ctest --test-dir build -j"$(nproc)" --output-on-failure --timeout 900 "$@" || status=1
scripts/sanitize.sh ci || status=1
exit "$status"
