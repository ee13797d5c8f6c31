#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (libFuzzer + ASan + UBSan) and runs one, or all in turn.
#
#   fuzz/run.sh BUILD_DIR [TARGET|all] [SECONDS]
#
# TARGET is a folder of fuzz/corpus/ (nccl_xml, store_protocol, unique_id, tcp_frames,
# consistency; default nccl_xml); SECONDS defaults to 60 per target. The arguments may come in
# any order. BUILD_DIR is configured on first use (clang, CHORUS_BUILD_FUZZ=ON, no
# tests/tools/bench). Inputs that reach new code are added to fuzz/corpus/TARGET/; a crash or
# failed check leaves its input in BUILD_DIR/fuzz/artifacts/. Fuzzes under nice -n 15; builds
# under nice -n 19 with at most 2 jobs. Set CHORUS_FUZZ_MERGE=1 to minimise the corpus
# afterwards (-merge=1 into a fresh folder, which then replaces the corpus). Each run's
# statistics go to BUILD_DIR/fuzz/TARGET.log (the figures in docs/reliability.md come from there).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$(dirname "$here")"
all_targets=(nccl_xml store_protocol unique_id tcp_frames consistency)
build=""
seconds=60
target=nccl_xml
for arg in "$@"; do
  if [[ "$arg" =~ ^[0-9]+$ ]]; then
    seconds="$arg"
  elif [[ "$arg" == all || -d "$here/corpus/$arg" || " ${all_targets[*]} " == *" $arg "* ]]; then
    target="$arg"
  else
    build="$arg"
  fi
done
if [[ -z "$build" ]]; then
  echo "usage: fuzz/run.sh BUILD_DIR [TARGET|all] [SECONDS]" >&2
  exit 2
fi
if [[ "$target" == all ]]; then targets=("${all_targets[@]}"); else targets=("$target"); fi

if [[ ! -f "$build/CMakeCache.txt" ]]; then
  cmake -S "$src" -B "$build" -G Ninja \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCHORUS_BUILD_FUZZ=ON -DCHORUS_BUILD_TESTS=OFF -DCHORUS_BUILD_TOOLS=OFF \
    -DCHORUS_BUILD_BENCH=OFF
fi
status=0
for t in "${targets[@]}"; do
  nice -n 19 ninja -C "$build" -j 2 "${t}_fuzz"
  corpus="$here/corpus/$t"
  artifacts="$build/fuzz/artifacts"
  mkdir -p "$corpus" "$artifacts"
  # The XML reader takes whole files; the wire decoders take a few frames (the TCP target writes
  # its input through a socket pair: 256 KiB, so payloads beyond its 64 KiB buffer complete). A
  # decoder that allocates what an input announces instead of what it holds trips the 256 MiB
  # malloc limit. A unit taking 60 s is reported as a hang (the targets bound their own loops
  # far below that; 10 s was hit once by an input that runs in 0.06 s, on a machine at load 10).
  max_len=65536
  extra=(-malloc_limit_mb=256)
  [[ "$t" == nccl_xml ]] && max_len=32768 && extra=()
  [[ "$t" == tcp_frames ]] && max_len=262144
  [[ -f "$here/$t.dict" ]] && extra+=(-dict="$here/$t.dict")
  before=$(find "$corpus" -type f | wc -l)
  run=0
  nice -n 15 "$build/fuzz/${t}_fuzz" \
    -max_total_time="$seconds" -max_len="$max_len" -timeout=60 -rss_limit_mb=2048 \
    "${extra[@]}" -artifact_prefix="$artifacts/${t}-" -print_final_stats=1 \
    "$corpus" > "$build/fuzz/$t.log" 2>&1 || run=$?
  grep -E '^(#[0-9]+ +DONE|stat::number_of_executed_units|stat::peak_rss|SUMMARY|==[0-9]+==ERROR)' \
    "$build/fuzz/$t.log" || true
  after=$(find "$corpus" -type f | wc -l)
  echo "$t: exit $run, corpus $before -> $after inputs in $corpus"
  [[ "$run" != 0 ]] && status=$run

  if [[ "${CHORUS_FUZZ_MERGE:-0}" == 1 ]]; then
    # The named seeds (hand-written cases, regression inputs) stay; of the inputs libFuzzer
    # named by their SHA-1, only those that add coverage are kept.
    merged="$(mktemp -d)"
    find "$corpus" -type f -regextype posix-extended ! -regex '.*/[0-9a-f]{40}' \
      -exec cp {} "$merged"/ \;
    nice -n 19 "$build/fuzz/${t}_fuzz" -merge=1 -max_len="$max_len" "$merged" "$corpus" \
      > "$build/fuzz/$t.merge.log" 2>&1
    find "$corpus" -type f -delete
    cp "$merged"/* "$corpus"/
    rm -rf "$merged"
    echo "$t: corpus minimised to $(find "$corpus" -type f | wc -l) inputs"
  fi
done
exit "$status"
