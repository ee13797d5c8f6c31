#!/usr/bin/env bash
# Small-message latency of chorus against OpenMPI on this host, over shared memory and over TCP
# loopback, in one run.
#
#   bench/compare/latency.sh [build-dir] [reps] [ranks...]        (defaults: build 5 "2 4")
#
# Two tables, medians over `reps` repetitions; in every repetition each configuration runs once,
# interleaved (so slow drifts of a shared machine hit all of them alike):
#
# 1. all-reduce, float32 sum, 8 B (ALLREDUCE_SIZES), for each rank count:
#      chorus shm -z 0 / -z 1   chorus-run + chorus-perf, CHORUS_TRANSPORT=shm, nonblocking
#                               (chorusIAllReduce + chorusWait) / blocking calls
#      OpenMPI vader            mpirun --mca btl vader,self + mpi_perf (MPI_Allreduce)
#      OpenMPI vader -z 0       the same nonblocking: MPI_Iallreduce, all of a size posted, then
#                               MPI_Wait in order (chorus-perf -z 0's pattern)
#      chorus tcp -z 0 / -z 1   the same with CHORUS_TRANSPORT=tcp
#      OpenMPI tcp (-z 0)       mpirun --mca btl tcp,self
#    and the time ratios chorus / OpenMPI over the same medium: each chorus configuration
#    against OpenMPI's blocking MPI_Allreduce, and -z 0 also against OpenMPI's -z 0.
# 2. ping-pong between 2 ranks (--coll pingpong, PINGPONG_SIZES): chorus shm and tcp with
#    blocking chorusSend/chorusRecv (-z 1), OpenMPI vader and tcp with MPI_Send/MPI_Recv; the
#    one-way time, half the round trip, and the same ratios.
#
# Every run checks its results (-c 1: one extra call per size after the timed ones, so the
# timing is unaffected) and is bounded by RUN_TIMEOUT; any failure, timeout, missing row or wrong
# element stops the script (exit 1) naming the run and its log. TCP stays on loopback for both
# systems (CHORUS_SOCKET_IFNAME=lo, btl_tcp_if_include lo). mpirun runs with --oversubscribe
# (4 ranks on 2 cores) and as root if need be (OMPI_ALLOW_RUN_AS_ROOT). Binding is the same for
# both: OpenMPI's default binds each rank to a core when there are no more ranks than CPUs (and
# not at all when oversubscribed), so chorus-run gets --bind-to core in exactly those runs
# (BIND=none: neither binds).
#
# Before each repetition, line_latency measures the one-way core-to-core cache-line latency, the
# floor under every small shared-memory exchange, which a VM's host moves (70-310 ns here within
# minutes): the tables print it per repetition, so medians from different moments can be read.
#
# Writes into OUT: raw.csv (every run's rows, compare.sh's columns), summary.csv (medians, min,
# max per cell), line.csv (the line latency per repetition), tables.txt (what is printed),
# logs/ (every run's output), meta.txt, labels.txt.
#
# Environment:
#   ITERS, WARMUP     timed / warm-up calls per size                  (default 2000, 200)
#   ALLREDUCE_SIZES   size flags of the all-reduce runs               (default "-b 8 -e 8")
#   PINGPONG_SIZES    size flags of the ping-pong runs        (default "-b 8 -e 2M -f 8")
#   PINGPONG          0: skip the ping-pong table                     (default 1)
#   MPIRUN_FLAGS      extra mpirun flags                              (default none)
#   BIND              auto: bind as OpenMPI's default does (above); none: no binding for either
#                                                                     (default auto)
#   RUN_TIMEOUT       seconds one run may take                        (default 300)
#   OUT               output directory  (default bench/compare/results/<date>-<time>-latency)
# Other CHORUS_* variables pass through to chorus (and are recorded in meta.txt).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
reps=${2:-5}
if [ $# -gt 2 ]; then
  ranks=("${@:3}")
else
  ranks=(2 4)
fi
iters=${ITERS:-2000}
warmup=${WARMUP:-200}
allreduce_sizes=${ALLREDUCE_SIZES:--b 8 -e 8}
pingpong_sizes=${PINGPONG_SIZES:--b 8 -e 2M -f 8}
pingpong=${PINGPONG:-1}
mpirun_flags=${MPIRUN_FLAGS:-}
bind=${BIND:-auto}
run_timeout=${RUN_TIMEOUT:-300}
out=${OUT:-$here/results/$(date +%Y%m%d-%H%M%S)-latency}

tool=latency
# fail, has, run, record
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$here/common.sh"

[[ "$reps" =~ ^[1-9][0-9]*$ ]] || fail "reps must be a positive number, not '$reps'"
[ "$reps" -ge 5 ] || echo "latency: warning: $reps repetitions; medians want 5 or more" >&2
[ "$bind" = auto ] || [ "$bind" = none ] || fail "BIND must be auto or none, not '$bind'"
cpus=$(nproc)
for n in "${ranks[@]}"; do
  if ! [[ "$n" =~ ^[1-9][0-9]*$ ]] || [ "$n" -lt 2 ]; then fail "rank counts must be >= 2, not '$n'"; fi
done

build=$(cd "$build" && pwd) || fail "no build directory $build"
chorus_run=$build/tools/chorus-run/chorus-run
chorus_perf=$build/tools/chorus-perf/chorus-perf
mpi_perf=$build/bench/compare/mpi_perf
line_latency=$build/bench/compare/line_latency
for f in "$chorus_run" "$chorus_perf" "$mpi_perf" "$line_latency"; do
  [ -x "$f" ] || fail "$f not built (cmake --build $build; mpi_perf needs OpenMPI and Google" \
    "Benchmark: scripts/install-deps.sh)"
done
command -v mpirun >/dev/null || fail "mpirun not found (openmpi-bin)"
command -v python3 >/dev/null || fail "python3 not found"

mkdir -p "$out/logs"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export CHORUS_SOCKET_IFNAME=lo
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# The configurations. Names are the system column of raw.csv; latency_table.py knows them.
#   chorus-<transport>-z<blocking>   ompi-<btl>   ompi-<btl>-z0 (nonblocking)
allreduce_systems="chorus-shm-z0 chorus-shm-z1 ompi-vader ompi-vader-z0 chorus-tcp-z0 \
chorus-tcp-z1 ompi-tcp ompi-tcp-z0"
pingpong_systems="chorus-shm-z1 ompi-vader chorus-tcp-z1 ompi-tcp"

{
  echo "date: $(date -Iseconds)"
  echo "command: $0 $*"
  echo "git: $(git -C "$here" describe --always --dirty 2>/dev/null || echo unknown)"
  echo "host: $(uname -srm), $(nproc) cpus, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
  echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "allreduce: float sum '$allreduce_sizes', ranks ${ranks[*]}"
  echo "pingpong: $([ "$pingpong" = 0 ] && echo skipped || echo "float '$pingpong_sizes', 2 ranks")"
  echo "iters: $iters, warmup $warmup, reps $reps"
  echo "mpirun: --oversubscribe $mpirun_flags$([ "$bind" = none ] && echo ' --bind-to none')"
  echo "binding: $bind (auto: chorus-run --bind-to core and OpenMPI's default core binding" \
    "when ranks <= $cpus CPUs, neither binds above)"
  env | grep '^CHORUS_' | sort || true
} >"$out/meta.txt"
{
  printf 'chorus\tchorus-perf %s, chorus-run\n' \
    "$("$chorus_perf" --version 2>/dev/null | head -n1 | awk '{print $NF}')"
  printf 'ompi\t%s, mpi_perf\n' "$(mpirun --version | head -n1)"
} >"$out/labels.txt"

# launch SYSTEM COLL N REP SIZE_FLAGS: one run of one configuration, recorded in raw.csv.
launch() {
  local system=$1 coll=$2 n=$3 rep=$4 sizes=$5
  local log=$out/logs/$coll-$system-n$n-r$rep.log
  # shellcheck disable=SC2206  # the size flags are meant to split into words
  local flags=(--coll "$coll" $sizes -n "$iters" -w "$warmup" -c 1)
  local chorus_bind=none mpi_bind=()
  if [ "$bind" = none ]; then
    mpi_bind=(--bind-to none)
  elif [ "$n" -le "$cpus" ]; then
    chorus_bind=core
  fi
  case $system in
    chorus-shm-z? | chorus-tcp-z?)
      local transport=${system#chorus-}
      transport=${transport%-z?}
      # Through env, so a failure message shows a command line that reproduces the run.
      run "$log" env CHORUS_TRANSPORT="$transport" "$chorus_run" -n "$n" --no-prefix \
        --bind-to "$chorus_bind" -- \
        "$chorus_perf" "${flags[@]}" -z "${system##*-z}" ;;
    ompi-vader | ompi-tcp | ompi-vader-z0 | ompi-tcp-z0)
      local btl=${system#ompi-} z=1
      [[ $btl == *-z0 ]] && z=0
      btl=${btl%-z0}
      # shellcheck disable=SC2086  # MPIRUN_FLAGS is a list of flags
      run "$log" mpirun -np "$n" --oversubscribe --mca btl "$btl,self" \
        --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo "${mpi_bind[@]}" $mpirun_flags \
        "$mpi_perf" "${flags[@]}" -z "$z" ;;
    *) fail "unknown configuration $system" ;;
  esac
  record "$system" "$coll" "$n" "$rep" "$log"
}

echo "system,coll,nranks,rep,size,time_us,busbw_gbps,wrong" >"$out/raw.csv"
echo "rep,one_way_ns" >"$out/line.csv"
for rep in $(seq 1 "$reps"); do
  # The floor of this repetition's small exchanges (line_latency.cc): it moves on a VM.
  line=$("$line_latency" | awk '{print $3}')
  echo "$rep,$line" >>"$out/line.csv"
  for n in "${ranks[@]}"; do
    for system in $allreduce_systems; do
      launch "$system" allreduce "$n" "$rep" "$allreduce_sizes"
    done
    echo "latency: run $rep/$reps: allreduce, $n ranks done" >&2
  done
  if [ "$pingpong" != 0 ]; then
    for system in $pingpong_systems; do
      launch "$system" pingpong 2 "$rep" "$pingpong_sizes"
    done
    echo "latency: run $rep/$reps: pingpong done" >&2
  fi
done
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/meta.txt"

python3 "$here/latency_table.py" "$out" | tee "$out/tables.txt"
echo "latency: results in $out" >&2
