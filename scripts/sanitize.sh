#!/usr/bin/env bash
# Builds chorus with sanitizers (clang) and runs a chosen part of the suite under them.
#
#   scripts/sanitize.sh asan [ctest args...]   # AddressSanitizer + UndefinedBehaviorSanitizer
#   scripts/sanitize.sh tsan [ctest args...]   # ThreadSanitizer
#
#   scripts/sanitize.sh ci                     # what CI runs: both, on a chosen part
#
# asan builds everything but the benchmarks and CUDA in build-asan, so it includes the check that
# clang builds the code warning-free (STYLE.md). Its full run (`asan`):
#   - every unit test except the symbolic checker's sweeps over rank counts (pure computation,
#     minutes under ASan, and run by the plain build);
#   - the multi-process tests except the collectives sweep and the multi-host jobs (the plain
#     build runs those): the failure, teardown, nonblocking, point-to-point, quantized and plan
#     cache tests, which exercise the error and abort paths where memory errors hide;
#   - chorus-soak on 3 ranks for 20 s (buffers up to 1 MiB): random collectives of every kind,
#     type and mode.
# tsan builds only the library, the launcher, the multi-process behaviour tests, chorus-faults
# and chorus-soak in build-tsan, and runs the tests with threads in them: the progress thread,
# nonblocking requests, abort from another thread, failure detection and heartbeats, teardown
# and split, and chorus-soak (3 ranks, 15 s, buffers up to 1 MiB). Any report fails the run
# (halt_on_error).
#
# `ci` (run by scripts/test.sh, so by CI) fits CI's budget (the whole .ci/run under 40 minutes on
# 2 cores) by choosing, not by sampling:
#   - the ASan+UBSan build of only what it runs (the library, chorus-run, chorus-soak,
#     chorus-faults and five test programs), then scripts/clang_warnings.py: clang -fsyntax-only
#     over every other file of the build, so together they are the check that clang builds the
#     whole code warning-free (STYLE.md);
#   - under ASan: the unit tests of the parts that parse bytes from other processes or manage
#     memory by hand (bootstrap and store, sockets, heartbeats, block pool, plan cache, the
#     transports' conformance and TCP tests), the failure and left-peer behaviour tests, the
#     fault matrix's collective cells and chorus-soak for 15 s;
#   - the TSan build of the threaded parts and, under TSan, the failure (but the 8 MiB kill test,
#     two minutes there), abort, nonblocking, teardown (15 runs of its 60) and left-peer tests,
#     the heartbeat unit tests, the kill/stop/abort cells of the fault matrix and chorus-soak for
#     10 s.
# Each part prints its time and result; the last line is "sanitizers: N passed, M failed" and
# any failure fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:?usage: scripts/sanitize.sh asan|tsan|ci [ctest args...]}
shift
export CHORUS_SOCKET_IFNAME=lo
# -O1 with line tables only: what the sanitizers' reports need (stacks with lines), at about half
# the compile time of -O2 -g; Debug also keeps the library's assertions on.
common=(-G Ninja -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -gline-tables-only"
        "-DCMAKE_C_FLAGS_DEBUG=-O1 -gline-tables-only" -DCMAKE_CXX_COMPILER=clang++
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
    return 1
  fi
  echo "$out" | grep -E 'PASS|usage' | sed "s/^/$kind chorus-soak: /"
}
asan_env() {
  # Set before the build too: test discovery runs the test programs.
  export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
}
tsan_env() { export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1; }
tsan_targets=(chorus chorus-run chorus-soak chorus-faults behavior_test core_test)
# What `ci` runs under ASan; scripts/clang_warnings.py checks every other file of build-asan.
asan_ci_targets=("${tsan_targets[@]}" bootstrap_test tcp_transport_test transport_conformance_test)
passed=0 failed=0
part() {  # name, command...: runs one part, counts it, never stops the others
  local name=$1
  shift
  local start=$SECONDS
  if "$@"; then
    passed=$((passed + 1))
    echo "sanitizers: $name: passed ($((SECONDS - start)) s)"
  else
    failed=$((failed + 1))
    echo "sanitizers: $name: FAILED ($((SECONDS - start)) s)"
  fi
}
case "$kind" in
  ci)
    ( asan_env
      configure_and_build build-asan build-asan.log -DCHORUS_SANITIZE=address,undefined \
        -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -- "${asan_ci_targets[@]}" )
    part "clang warnings (syntax only) of the files not built above" \
      python3 scripts/clang_warnings.py build-asan
    asan_env
    part "asan unit and behaviour tests" \
      ctest --test-dir build-asan -j"$(nproc)" --output-on-failure --timeout 600 \
        -R '^(StoreTest|StoreProcesses|EnvTest|SocketUtil|TcpTransport|Registered/Conformance[A-Za-z]*|Bootstrap|Ranks/BootstrapRanks|UniqueId|Secret|PeerInfo|Heartbeat|BlockPool|PlanCache|Failure|Transports/LeftPeer)\.'
    part "asan chorus-faults (collective cells)" \
      build-asan/tests/faults/chorus-faults --phase small,nonblocking,group
    part "asan chorus-soak" soak build-asan 3 15
    unset ASAN_OPTIONS UBSAN_OPTIONS
    tsan_env
    configure_and_build build-tsan build-tsan.log -DCHORUS_SANITIZE=thread -- "${tsan_targets[@]}"
    part "tsan behaviour tests" \
      env CHORUS_TEST_TEARDOWN_RUNS=15 ctest --test-dir build-tsan -j"$(nproc)" --output-on-failure --timeout 600 \
        -R '(^|/)(Failure|Teardown|Nonblocking|LeftPeer|Heartbeat)\.' \
        -E 'Failure\.KilledRankFailsEveryOtherRankWithin5Seconds'
    part "tsan chorus-faults (kill, stop and abort in a collective)" \
      build-tsan/tests/faults/chorus-faults --phase small,nonblocking --fault kill,stop,abort
    part "tsan chorus-soak" soak build-tsan 3 10
    echo "sanitizers: $passed passed, $failed failed"
    [ "$failed" -eq 0 ]
    ;;
  asan)
    asan_env
    configure_and_build build-asan build-asan.log -DCHORUS_SANITIZE=address,undefined --
    ctest --test-dir build-asan -j"$(nproc)" --output-on-failure --timeout 600 \
      -E 'SymbolicChecker|MatchesReference|EveryRankPasses|^repeat\.|netns|HostsSh|RunJob|install_consumer|^perf|soak\.' "$@"
    soak build-asan 3 20
    ;;
  tsan)
    tsan_env
    configure_and_build build-tsan build-tsan.log -DCHORUS_SANITIZE=thread -- "${tsan_targets[@]}"
    ctest --test-dir build-tsan -j"$(nproc)" --output-on-failure --timeout 600 \
      -R '(^|/)(Failure|Teardown|Nonblocking|PointToPoint|Barrier|Split|LeftPeer)\.' "$@"
    soak build-tsan 3 15
    ;;
  *)
    echo "scripts/sanitize.sh: unknown kind '$kind' (asan, tsan or ci)" >&2
    exit 2
    ;;
esac
