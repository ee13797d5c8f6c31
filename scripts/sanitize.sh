#!/usr/bin/env bash
# Builds chorus with sanitizers (clang) and runs a chosen part of the suite under them.
#
#   scripts/sanitize.sh asan [ctest args...]   # AddressSanitizer + UndefinedBehaviorSanitizer
#   scripts/sanitize.sh tsan [ctest args...]   # ThreadSanitizer
#
# Not in CI yet: docs/reliability.md lists what the first run found. asan builds everything but
# the benchmarks and CUDA in build-asan, so it includes the check that clang builds the code
# warning-free (STYLE.md). It runs a part chosen to fit CI's time budget (the whole .ci/run under
# 40 minutes on 2 cores):
#   - every unit test except the symbolic checker's sweeps over rank counts (pure computation,
#     minutes under ASan, and run by the plain build);
#   - the multi-process tests except the collectives sweep and the multi-host jobs (the plain
#     build runs those): the failure, teardown, nonblocking, point-to-point, quantized and plan
#     cache tests, which exercise the error and abort paths where memory errors hide;
#   - chorus-soak on 3 ranks for 20 s (buffers up to 1 MiB): random collectives of every kind,
#     type and mode.
# tsan builds only the library, the launcher, the multi-process behaviour tests and chorus-soak
# in build-tsan, and runs the tests with threads in them: the progress thread, nonblocking
# requests, abort from another thread, failure detection, teardown and split, and chorus-soak
# (3 ranks, 15 s, buffers up to 1 MiB). Any report fails the run (halt_on_error).
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:?usage: scripts/sanitize.sh asan|tsan [ctest args...]}
shift
export CHORUS_SOCKET_IFNAME=lo
common=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++
        -DCMAKE_C_COMPILER=clang -DCHORUS_WITH_CUDA=OFF -DCHORUS_BUILD_BENCH=OFF)
configure_and_build() {  # dir, log, cmake args..., --, targets...
  local dir=$1 log=$2
  shift 2
  local args=() targets=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do args+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  targets=("$@")
  if ! { cmake -S . -B "$dir" "${common[@]}" "${args[@]}" &&
         cmake --build "$dir" -j"$(nproc)" ${targets[@]+--target "${targets[@]}"}; } > "$log" 2>&1; then
    tail -n 60 "$log"
    echo "$kind build: FAILED (full log: $log)"
    exit 1
  fi
  echo "$kind build: OK"
}
soak() {  # build dir, ranks, seconds: chorus-soak under the sanitizer, largest buffer 1 MiB
  local out
  if ! out=$(timeout 600 "$1/tools/chorus-run/chorus-run" -n "$2" --timeout 500 \
               "$1/tests/soak/chorus-soak" --seconds "$3" --max-bytes 1048576 2>&1); then
    echo "$out" | tail -n 40
    echo "$kind chorus-soak: FAILED"
    exit 1
  fi
  echo "$out" | grep -E 'PASS|usage' | sed "s/^/$kind chorus-soak: /"
}
case "$kind" in
  asan)
    # Set before the build too: test discovery runs the test programs.
    export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    configure_and_build build-asan build-asan.log -DCHORUS_SANITIZE=address,undefined --
    ctest --test-dir build-asan -j"$(nproc)" --output-on-failure --timeout 600 \
      -E 'SymbolicChecker|MatchesReference|EveryRankPasses|^repeat\.|netns|HostsSh|RunJob|install_consumer|^perf|soak\.' "$@"
    soak build-asan 3 20
    ;;
  tsan)
    export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
    configure_and_build build-tsan build-tsan.log -DCHORUS_SANITIZE=thread -- \
      chorus chorus-run chorus-soak behavior_test
    ctest --test-dir build-tsan -j"$(nproc)" --output-on-failure --timeout 600 \
      -R '(^|/)(Failure|Teardown|Nonblocking|PointToPoint|Barrier|Split|LeftPeer)\.' "$@"
    soak build-tsan 3 15
    ;;
  *)
    echo "scripts/sanitize.sh: unknown kind '$kind' (asan or tsan)" >&2
    exit 2
    ;;
esac
