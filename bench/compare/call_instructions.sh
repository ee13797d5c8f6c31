#!/usr/bin/env bash
# Instructions per call of chorus's small-call path, counted by valgrind (callgrind), not timed:
# a measure of the software cost of a call (API, queue, planning, executor) that does not depend
# on how busy the machine is, so that a change to that path can be compared with its parent on
# a shared machine where timings of a few hundred nanoseconds drown in noise.
#
#   bench/compare/call_instructions.sh [build-dir] [calls]          (defaults: build 2000)
#
# For each mode, one rank (chorus-run -n 1: no peer to wait for, so nothing spins) runs
# chorus-perf -b SIZE -e SIZE -w 0 -c 0 twice under callgrind, with `calls` and 2 x `calls`
# timed calls; chorus-perf makes each of them once out of place and once in place, so
#   instructions per call = (Ir(2 calls) - Ir(calls)) / (2 x calls)
# and everything else the process does (start-up, communicator creation, teardown) cancels.
# Modes: -z 1 (blocking chorusAllReduce) and -z 0 (chorusIAllReduce, all posted, then
# chorusWait in order). Also given: the instructions of a -z 0 call beyond a -z 1 call, what
# posting and waiting add.
#
# The counts are of one build on one CPU's code paths (the compiler and the kernels' ISA choose
# the instructions); compare builds on the same machine. A call on more ranks does more (the
# peers' steps), which this does not count.
#
# Environment: SIZE (default 8), TRANSPORT (CHORUS_TRANSPORT, default shm), OUT (output
# directory, default a new one under /tmp).
set -euo pipefail

build=${1:-build}
calls=${2:-2000}
size=${SIZE:-8}
transport=${TRANSPORT:-shm}
fail() { echo "call_instructions: $*" >&2; exit 1; }
[[ "$calls" =~ ^[1-9][0-9]*$ ]] || fail "calls must be a positive number, not '$calls'"
build=$(cd "$build" && pwd) || fail "no build directory $1"
run=$build/tools/chorus-run/chorus-run
perf=$build/tools/chorus-perf/chorus-perf
{ [ -x "$run" ] && [ -x "$perf" ]; } || fail "build chorus-run and chorus-perf in $build first"
command -v valgrind >/dev/null || fail "valgrind not found (apt-get install valgrind)"
out=${OUT:-$(mktemp -d /tmp/call_instructions.XXXXXX)}
mkdir -p "$out"

# ir Z N: the instructions chorus-perf executed (its own process, not chorus-run's).
ir() {
  local z=$1 n=$2 log=$out/z$1-n$2.log
  rm -f "$out"/cg.z"$z".n"$n".*
  if ! CHORUS_TRANSPORT=$transport valgrind --tool=callgrind --trace-children=yes \
      --callgrind-out-file="$out/cg.z$z.n$n.%p" "$run" -n 1 --no-prefix -- "$perf" \
      -b "$size" -e "$size" -n "$n" -w 0 -c 0 -z "$z" >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    fail "the run -z $z -n $n failed (log: $log)"
  fi
  # Every traced process writes one file; chorus-perf's is the one whose command names it.
  local f
  f=$(grep -l -E "^cmd: +[^ ]*chorus-perf " "$out"/cg.z"$z".n"$n".* | head -n 1)
  [ -n "$f" ] || fail "no callgrind output of chorus-perf for -z $z -n $n (log: $log)"
  awk '/^totals:/ { print $2; exit }' "$f"
}

declare -A per
for z in 1 0; do
  a=$(ir "$z" "$calls")
  b=$(ir "$z" $((2 * calls)))
  per[$z]=$(awk -v a="$a" -v b="$b" -v n="$calls" 'BEGIN { printf "%.0f", (b - a) / (2 * n) }')
  echo "z$z: Ir $a with $calls calls, $b with $((2 * calls)); ${per[$z]} per call" >&2
done
{
  echo "## instructions per call, all-reduce float32 sum of $size B, one rank, CHORUS_TRANSPORT=$transport"
  echo "| mode | instructions per call |"
  echo "|---|---:|"
  echo "| -z 1 (chorusAllReduce) | ${per[1]} |"
  echo "| -z 0 (chorusIAllReduce + chorusWait) | ${per[0]} |"
  echo "| -z 0 beyond -z 1 | $((per[0] - per[1])) |"
} | tee "$out/table.md"
echo "call_instructions: logs and callgrind files in $out" >&2
