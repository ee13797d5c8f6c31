#!/usr/bin/env bash
# Install what is missing, build, and run the whole test suite (ctest prints the counts).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
# STYLE.md: clang 14 must build the code warning-free too (compile check; tests run on the g++ build).
if ! { cmake -S . -B build-clang -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang \
         -DCHORUS_WITH_CUDA=OFF -DCHORUS_BUILD_BENCH=OFF &&
       cmake --build build-clang -j"$(nproc)"; } > build-clang.log 2>&1; then
  tail -n 60 build-clang.log
  echo "clang build: FAILED (full log: build-clang.log)"
  exit 1
fi
echo "clang build: OK"
# Tests talk over loopback only.
export CHORUS_SOCKET_IFNAME=lo
ctest --test-dir build -j"$(nproc)" --output-on-failure --timeout 900 "$@"
