#!/usr/bin/env bash
# Install what is missing, build, and run the whole test suite: the sanitizer part
# (scripts/sanitize.sh ci: ASan+UBSan and TSan builds of a chosen part, and clang's warning check
# of every file), then every test of the plain build (ctest prints the counts last).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
sanitizers=0
scripts/sanitize.sh ci || sanitizers=$?
# Tests talk over loopback only.
export CHORUS_SOCKET_IFNAME=lo
tests=0
ctest --test-dir build -j"$(nproc)" --output-on-failure --timeout 900 "$@" || tests=$?
if [ "$sanitizers" -ne 0 ]; then
  echo "scripts/test.sh: the sanitizer part failed (its lines start with 'sanitizers:', above)"
  exit 1
fi
exit "$tests"
