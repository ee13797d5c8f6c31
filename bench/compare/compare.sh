#!/usr/bin/env bash
# chorus vs OpenMPI vs Gloo on this machine, in one run, against the memory bound.
#
#   bench/compare/compare.sh [build-dir] [reps] [ranks...]      (defaults: build 5 "2 4")
#
# For each rank count and each of `reps` repetitions, runs every system once, interleaved (so
# slow drifts of a shared machine hit all systems alike), with the same sizes, iterations,
# warm-up and correctness check (float sum, out-of-place):
#   chorus  chorus-run + chorus-perf, default transport; CHORUS_* variables pass through, e.g.
#           CHORUS_TRANSPORT=tcp forces TCP
#   chorus-reg  the same with chorus-perf -R 1: buffers from chorusMemAlloc, registered with
#           chorusCommRegister, and REG_ENV added to its environment. The tuner does not know
#           a call's buffers are registered: the zero-copy algorithms run where REG_ENV forces
#           them, e.g. REG_ENV="CHORUS_ALGO=allreduce:twoshot,allgather:direct,..."
#   ompi    mpirun + bench/compare/mpi_perf (MPI_Allreduce / MPI_Allgather /
#           MPI_Reduce_scatter_block / MPI_Bcast), shared memory: btl vader (CMA single copy)
#           + self
#   gloo    chorus-run + bench/compare/gloo_perf (gloo::allreduce ring, TCP on 127.0.0.1);
#           allreduce only
# then prints, per collective and rank count, the medians over the repetitions:
#   size | time and busbw of each system | chorus/ompi | chorus-reg/chorus | each chorus
#   system as % of the memory bound
# and writes into OUT: raw.csv (every run), summary.csv (medians), <coll>.png (busbw and
# latency against size, log-log, one line per system and rank count), logs/ (every run's
# output), membw.txt, meta.txt.
#
# Memory bound. membw runs once first and measures the counted traffic of memcpy (read+write)
# and of c = a + b (2 reads + 1 write) on 256 MiB arrays with 1 and 2 threads; M is the best of
# those figures. A collective on one host can at best read each input byte once and write each
# output byte once, all at M (however the work is split among ranks and cores). With n ranks and
# S the size column (the largest buffer of one rank):
#   allreduce      n inputs + n outputs of S = 2nS bytes;  busbw = 2(n-1)/n * S / time
#                  => bound = (n-1) M / n^2         (2 ranks: M/4, e.g. 42 GB/s -> 10.5 GB/s)
#   allgather      inputs S in all, outputs nS      => bound = (n-1) M / (n(n+1))
#   reducescatter  inputs nS, outputs S in all      => bound = (n-1) M / (n(n+1))
#   broadcast      the root's input S, n outputs of S (out of place: the root's too); busbw =
#                  S / time                         => bound = M / (n+1)
# Real implementations move more (staging copies through shared buffers, reads-for-ownership
# of written lines), so 100% is not reachable; the percentage says how much is left.
#
# Environment:
#   SIZES       allreduce size flags                      (default "-b 8 -e 256M -f 4")
#   COLL_SIZES  allgather/reducescatter/broadcast size flags (default "-b 1M -e MAX -f 4", MAX
#               the -e of SIZES)
#   COLLS       collectives to run (default "allreduce allgather reducescatter broadcast")
#   SYSTEMS     systems to run                            (default "chorus chorus-reg ompi gloo")
#   ITERS, WARMUP  timed / warm-up calls per size         (default 20, 3)
#   CHORUS_PERF_FLAGS  extra chorus-perf flags              (default "-z 1": blocking calls)
#   REG_ENV     VAR=value words added to the chorus-reg runs' environment    (default none)
#   MPI_MCA     mpirun flags choosing OpenMPI's transport (default "--mca btl vader,self")
#   RUN_TIMEOUT seconds one run may take                  (default 1800)
#   MEMBW       0: skip the memory probe and the bound    (default 1)
#   PLOT        0: no PNG                                 (default 1)
#   OUT         output directory          (default bench/compare/results/<date>-<time>)
# Fails (exit 1, naming the run and its log) when any run exits non-zero, times out, prints no
# result rows or reports wrong elements.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
reps=${2:-5}
if [ $# -gt 2 ]; then
  ranks=("${@:3}")
else
  ranks=(2 4)
fi
sizes=${SIZES:--b 8 -e 256M -f 4}
# allgather/reducescatter: from 1 MiB up to the allreduce maximum, so a short SIZES sweep keeps
# the whole run short.
max_size=$(sed -nE 's/.*-e +([0-9.]+[KkMmGg]?).*/\1/p' <<<"$sizes")
coll_sizes=${COLL_SIZES:--b 1M -e ${max_size:-256M} -f 4}
colls=${COLLS:-allreduce allgather reducescatter broadcast}
systems=${SYSTEMS:-chorus chorus-reg ompi gloo}
iters=${ITERS:-20}
warmup=${WARMUP:-3}
mpi_mca=${MPI_MCA:---mca btl vader,self}
run_timeout=${RUN_TIMEOUT:-1800}
out=${OUT:-$here/results/$(date +%Y%m%d-%H%M%S)}

tool=compare
# fail, has, run, record
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$here/common.sh"

build=$(cd "$build" && pwd) || fail "no build directory $build"
chorus_run=$build/tools/chorus-run/chorus-run
chorus_perf=$build/tools/chorus-perf/chorus-perf
mpi_perf=$build/bench/compare/mpi_perf
gloo_perf=$build/bench/compare/gloo_perf
membw=$build/bench/compare/membw
need=("$chorus_run")
{ has chorus "$systems" || has chorus-reg "$systems"; } && need+=("$chorus_perf")
has ompi "$systems" && need+=("$mpi_perf")
has gloo "$systems" && need+=("$gloo_perf")
[ "${MEMBW:-1}" = 0 ] || need+=("$membw")
for f in "${need[@]}"; do
  [ -x "$f" ] || fail "$f not built (cmake --build $build; gloo_perf needs libgloo-dev, mpi_perf" \
    "OpenMPI: scripts/install-deps.sh), or leave the system out with SYSTEMS=..."
done
if has ompi "$systems"; then
  command -v mpirun >/dev/null || fail "mpirun not found (openmpi-bin)"
fi
if [ "${PLOT:-1}" != 0 ]; then
  command -v gnuplot >/dev/null || fail "gnuplot not found (gnuplot-nox), or set PLOT=0"
fi
command -v python3 >/dev/null || fail "python3 not found"

mkdir -p "$out/logs"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Loopback only: chorus's TCP, OpenMPI's out-of-band channel (and TCP BTL if chosen).
export CHORUS_SOCKET_IFNAME=${CHORUS_SOCKET_IFNAME:-lo}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

{
  echo "date: $(date -Iseconds)"
  echo "command: $0 $*"
  echo "git: $(git -C "$here" describe --always --dirty 2>/dev/null || echo unknown)"
  echo "host: $(uname -srm), $(nproc) cpus, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
  echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "sizes: allreduce '$sizes'; allgather/reducescatter '$coll_sizes'"
  echo "iters: $iters, warmup $warmup"
  echo "mpirun: $mpi_mca"
  env | grep '^CHORUS_' | sort || true
} >"$out/meta.txt"
{
  ! has chorus "$systems" ||
    printf 'chorus\tchorus-perf, transport %s\n' "${CHORUS_TRANSPORT:-default}"
  ! has chorus-reg "$systems" ||
    printf 'chorus-reg\tchorus-perf -R 1 (chorusMemAlloc buffers, registered), transport %s%s\n' \
      "${CHORUS_TRANSPORT:-default}" "${REG_ENV:+, $REG_ENV}"
  ! has ompi "$systems" ||
    printf 'ompi\t%s, mpirun %s\n' "$(mpirun --version | head -n1)" "$mpi_mca"
  ! has gloo "$systems" ||
    printf 'gloo\tGloo (Debian libgloo) gloo::allreduce ring, TCP on 127.0.0.1\n'
} >"$out/labels.txt"

if [ "${MEMBW:-1}" != 0 ]; then
  echo "compare: membw" >&2
  run "$out/membw.txt" "$membw"
  cat "$out/membw.txt"
else
  rm -f "$out/membw.txt"
fi

echo "system,coll,nranks,rep,size,time_us,busbw_gbps,wrong" >"$out/raw.csv"
for n in "${ranks[@]}"; do
  for rep in $(seq 1 "$reps"); do
    for coll in $colls; do
      if [ "$coll" = allreduce ]; then sz=$sizes; else sz=$coll_sizes; fi
      # shellcheck disable=SC2206  # the size flags are meant to split into words
      flags=(--coll "$coll" $sz -n "$iters" -w "$warmup" -c 1)
      for system in $systems; do
        log=$out/logs/$coll-$system-n$n-r$rep.log
        case $system in
          chorus)
            # -z 1: blocking calls, as MPI_Allreduce is (CHORUS_PERF_FLAGS overrides).
            # shellcheck disable=SC2086  # a list of flags
            run "$log" "$chorus_run" -n "$n" --no-prefix -- "$chorus_perf" "${flags[@]}" \
              ${CHORUS_PERF_FLAGS:--z 1} ;;
          chorus-reg)
            # shellcheck disable=SC2086  # lists of words
            run "$log" env ${REG_ENV:-} "$chorus_run" -n "$n" --no-prefix -- "$chorus_perf" \
              "${flags[@]}" ${CHORUS_PERF_FLAGS:--z 1} -R 1 ;;
          ompi)
            # shellcheck disable=SC2086  # MPI_MCA is a list of flags
            run "$log" mpirun -np "$n" --oversubscribe $mpi_mca --mca btl_tcp_if_include lo \
              --mca oob_tcp_if_include lo "$mpi_perf" "${flags[@]}" ;;
          gloo)
            [ "$coll" = allreduce ] || continue
            # gloo_perf's rendezvous files go to TMPDIR: keep them in our own temp dir.
            TMPDIR=$tmp run "$log" "$chorus_run" -n "$n" --no-prefix -- \
              "$gloo_perf" "${flags[@]}" ;;
          *) fail "unknown system $system (chorus, chorus-reg, ompi, gloo)" ;;
        esac
        record "$system" "$coll" "$n" "$rep" "$log"
        echo "compare: $n ranks, run $rep/$reps: $coll $system done" >&2
      done
    done
  done
done

python3 "$here/summarize.py" "$out" | tee "$out/tables.txt"
echo "compare: results in $out" >&2
