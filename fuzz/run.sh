#!/usr/bin/env bash
# Builds the NCCL topology XML fuzzer with clang (libFuzzer + ASan + UBSan) and runs it.
#
#   fuzz/run.sh BUILD_DIR [SECONDS]      (SECONDS defaults to 60; the two may come in any order)
#
# BUILD_DIR is configured on first use (clang, CHORUS_BUILD_FUZZ=ON, no tests/tools/bench).
# Inputs that reach new code are added to fuzz/corpus/nccl_xml/ (commit the ones worth keeping);
# a crash or failed check leaves its input in BUILD_DIR/fuzz/artifacts/. Runs under nice -n 19
# and builds with at most 2 jobs. Set CHORUS_FUZZ_MERGE=1 to minimise the corpus afterwards.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$(dirname "$here")"
build=""
seconds=60
for arg in "$@"; do
  if [[ "$arg" =~ ^[0-9]+$ ]]; then seconds="$arg"; else build="$arg"; fi
done
if [[ -z "$build" ]]; then
  echo "usage: fuzz/run.sh BUILD_DIR [SECONDS]" >&2
  exit 2
fi

if [[ ! -f "$build/CMakeCache.txt" ]]; then
  cmake -S "$src" -B "$build" -G Ninja \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCHORUS_BUILD_FUZZ=ON -DCHORUS_BUILD_TESTS=OFF -DCHORUS_BUILD_TOOLS=OFF \
    -DCHORUS_BUILD_BENCH=OFF
fi
nice -n 19 ninja -C "$build" -j 2 nccl_xml_fuzz

corpus="$here/corpus/nccl_xml"
artifacts="$build/fuzz/artifacts"
mkdir -p "$corpus" "$artifacts"
before=$(find "$corpus" -type f | wc -l)
status=0
nice -n 19 "$build/fuzz/nccl_xml_fuzz" \
  -max_total_time="$seconds" -max_len=32768 -timeout=10 -rss_limit_mb=2048 \
  -dict="$here/nccl_xml.dict" -artifact_prefix="$artifacts/" -print_final_stats=1 \
  "$corpus" || status=$?
after=$(find "$corpus" -type f | wc -l)
echo "corpus: $before -> $after inputs in $corpus"

if [[ "${CHORUS_FUZZ_MERGE:-0}" == 1 ]]; then
  # The named seeds (real files, hand-written cases) stay; of the inputs libFuzzer named by
  # their SHA-1, only those that add coverage are kept.
  merged="$(mktemp -d)"
  find "$corpus" -type f -regextype posix-extended ! -regex '.*/[0-9a-f]{40}' -exec cp {} "$merged"/ \;
  nice -n 19 "$build/fuzz/nccl_xml_fuzz" -merge=1 -max_len=32768 "$merged" "$corpus"
  find "$corpus" -type f -delete
  cp "$merged"/* "$corpus"/
  rm -rf "$merged"
  echo "corpus minimised to $(find "$corpus" -type f | wc -l) inputs"
fi
exit "$status"
