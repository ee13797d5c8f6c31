#!/usr/bin/env bash
# The tuner's predictions against measurements on this machine: all-reduce (float32 sum) over
# shared memory and over TCP loopback, 2 and 4 ranks, 8 B to 64 MiB (x4).
#
#   bench/tune_check.sh [build-dir]                     (default: build)
#
# For each (transport, ranks) the predictions come from
#   chorus-topo --tune-csv --ranks N --transport shm|tcp --min 8 --max 64M --factor 4
# which builds the Platform and cost input as a communicator of that job does, and the
# measurements from chorus-perf under chorus-run (blocking calls, no checking, out-of-place
# time), the default transport for shm and CHORUS_TRANSPORT=tcp for tcp, TCP on loopback. Sizes
# run in four groups so that the large ones take few iterations; the whole check takes about a
# minute or two. Repetitions are interleaved (rep 1 of every configuration, then rep 2, ...), so
# a slow drift of the machine hits every configuration alike. The chorus-perf runs log the
# tuner's choices (CHORUS_DEBUG=INFO, subsystems TUNE and INIT), and tune_check.py checks that
# the algorithm measured is the one predicted.
#
# With FORCED=1 (the default) every repetition also runs each algorithm the tuner weighed for a
# group (the candidates its INFO lines list in the first repetition's log) forced with
# CHORUS_ALGO=allreduce:<name>, right after the tuner's own run of that group, so the pick is
# timed against every alternative in the same minute.
#
# tune_check.py then prints one table: transport, ranks, size, algorithm, predicted us,
# measured us (median of the repetitions), predicted/measured, and with FORCED=1 the fastest
# forced algorithm, its median and the pick's median over it; then "within 2x: X of Y" and
# "pick within 1.1x of the best forced: X of Y". Exit status 1 when any ratio is outside
# [0.5, 2], when the pick is more than 1.1x the best forced algorithm, when a run measured
# another algorithm than the one predicted, or when a run fails.
#
# Before measuring, waits until no other benchmark runs (bench/compare/compare.sh, chorus-perf,
# mpi_perf, gloo_perf): on a small machine they would distort each other.
#
# Environment:
#   REPS         repetitions per configuration; the median is reported     (default 3)
#   TRANSPORTS   transports to check                                       (default "shm tcp")
#   RANKS        rank counts to check                                      (default "2 4")
#   RUN_TIMEOUT  seconds one chorus-perf run may take                      (default 300)
#   FORCED       1: also time every candidate forced with CHORUS_ALGO; 0: only the tuner's
#                pick (about 5x quicker)                                   (default 1)
#   OUT          directory for the logs, predictions and table.csv (default: a new /tmp dir)
#   TOPO_FLAGS   extra chorus-topo flags, e.g. "--constants tcp-loopback.step=2" to try other
#                cost-model constants (the runs still use the built-in ones, so a changed choice
#                shows as an algorithm mismatch)
#   MEASURE      0: no runs; predict again and print the table for the logs already in OUT
#                (with TOPO_FLAGS: how other constants would fit the same measurements)
# Other CHORUS_* variables (CHORUS_SHM_STAGING, CHORUS_CHUNK_SIZE, ...) reach both chorus-topo
# and chorus-perf, so predictions and measurements stay comparable.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
reps=${REPS:-3}
transports=${TRANSPORTS:-shm tcp}
ranks=${RANKS:-2 4}
run_timeout=${RUN_TIMEOUT:-300}
measure=${MEASURE:-1}
forced=${FORCED:-1}
topo_flags=${TOPO_FLAGS:-}

fail() {
  echo "tune_check: FAILED: $*" >&2
  exit 1
}

build=$(cd "$build" && pwd) || fail "no build directory $build"
chorus_topo=$build/tools/chorus-topo/chorus-topo
chorus_run=$build/tools/chorus-run/chorus-run
chorus_perf=$build/tools/chorus-perf/chorus-perf
for f in "$chorus_topo" "$chorus_run" "$chorus_perf"; do
  [ -x "$f" ] || fail "$f not built (ninja -C $build chorus-topo chorus-run chorus-perf)"
done
command -v python3 >/dev/null || fail "python3 not found"
out=${OUT:-$(mktemp -d /tmp/tune_check.XXXXXX)}
mkdir -p "$out/logs"
[ "$measure" != 0 ] || [ -n "$(ls "$out"/logs/perf-*.log 2>/dev/null)" ] ||
  fail "MEASURE=0 needs the logs of an earlier run in OUT (now '$out')"

# Sizes in groups, with timed and warm-up calls per group: 8 B x 4 up to 32 MiB, then 64 MiB
# itself (chorus-perf, like nccl-tests, stops below -e when the factor steps over it).
groups=(
  "-b 8 -e 32K -f 4 -n 2000 -w 50"
  "-b 128K -e 2M -f 4 -n 200 -w 10"
  "-b 8M -e 32M -f 4 -n 30 -w 3"
  "-b 64M -e 64M -f 4 -n 10 -w 2"
)

for t in $transports; do
  for n in $ranks; do
    # shellcheck disable=SC2086  # a list of flags
    "$chorus_topo" --tune-csv --ranks "$n" --transport "$t" --min 8 --max 64M --factor 4 \
      $topo_flags >"$out/pred-$t-n$n.csv" ||
      fail "chorus-topo --tune-csv --ranks $n --transport $t $topo_flags"
  done
done
if [ "$measure" = 0 ]; then
  python3 "$here/tune_check.py" "$out"
  exit
fi

others() {
  pgrep -f 'compare\.sh' || pgrep -x chorus-perf || pgrep -x mpi_perf || pgrep -x gloo_perf || true
}
waited=0
while [ -n "$(others)" ]; do
  [ "$waited" -gt 0 ] || echo "tune_check: waiting for other benchmarks to finish:" \
    "$(others | tr '\n' ' ')" >&2
  sleep 20
  waited=$((waited + 20))
done

export CHORUS_SOCKET_IFNAME=${CHORUS_SOCKET_IFNAME:-lo}
{
  echo "date: $(date -Iseconds)"
  echo "command: $0 $*"
  echo "git: $(git -C "$here" describe --always --dirty 2>/dev/null || echo unknown)"
  echo "host: $(uname -srm), $(nproc) cpus, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
  echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "reps: $reps; groups: ${groups[*]}"
  env | grep '^CHORUS_' | sort || true
} >"$out/meta.txt"

# run LOG ENV...: one chorus-perf run of the current group; fails the check when it fails.
run_group() {
  local log=$1 rc=0
  shift
  # shellcheck disable=SC2086  # the group is a list of flags
  env "$@" CHORUS_DEBUG=INFO CHORUS_DEBUG_SUBSYS=TUNE,INIT \
    timeout --kill-after=10 "$run_timeout" "$chorus_run" -n "$n" --no-prefix -- \
    "$chorus_perf" ${groups[$g]} -c 0 -z 1 >"$log" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ]; then
    tail -n 20 "$log" >&2
    fail "exit status $rc: $t, $n ranks, group '${groups[$g]}' $* (log: $log)"
  fi
}

rm -f "$out"/logs/perf-*.log "$out"/logs/forced-*.log
declare -A candidates  # "t n g" -> the algorithms the tuner weighed there (first repetition)
for rep in $(seq 1 "$reps"); do
  for t in $transports; do
    case $t in
      shm) tenv=(-u CHORUS_TRANSPORT) ;;
      tcp) tenv=(CHORUS_TRANSPORT=tcp) ;;
      *) fail "unknown transport $t (shm, tcp)" ;;
    esac
    for n in $ranks; do
      for g in "${!groups[@]}"; do
        log=$out/logs/perf-$t-n$n-r$rep-g$g.log
        run_group "$log" "${tenv[@]}"
        [ "$forced" != 0 ] || continue
        if [ "$rep" = 1 ]; then
          candidates["$t $n $g"]=$(python3 "$here/tune_check.py" --candidates "$log")
          [ -n "${candidates["$t $n $g"]}" ] || fail "no candidates listed in $log"
        fi
        for a in ${candidates["$t $n $g"]}; do
          run_group "$out/logs/forced-$t-n$n-r$rep-g$g-$a.log" "${tenv[@]}" \
            CHORUS_ALGO="allreduce:$a"
        done
      done
      echo "tune_check: $t, $n ranks, run $rep/$reps done" >&2
    done
  done
done

python3 "$here/tune_check.py" "$out" | tee "$out/table.txt"
