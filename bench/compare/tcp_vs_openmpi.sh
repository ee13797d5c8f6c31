#!/usr/bin/env bash
# chorus over TCP vs OpenMPI's MPI_Allreduce over its TCP BTL, same sizes, same machine, same run.
# Runs each system REPS times, interleaved, and prints per size the median busbw of each and the
# ratio chorus/OpenMPI. Loopback only.
#   bench/compare/tcp_vs_openmpi.sh [build-dir] [reps] [ranks...]
set -euo pipefail
build=${1:-build}
reps=${2:-5}
shift 2 || true
ranks=("${@:-2 4}")
[ $# -gt 0 ] || ranks=(2 4)
sizes="-b 1M -e 256M -f 4"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export CHORUS_SOCKET_IFNAME=lo OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for n in "${ranks[@]}"; do
  for r in $(seq 1 "$reps"); do
    "$build/tools/chorus-run/chorus-run" -n "$n" --no-prefix -- \
      "$build/tools/chorus-perf/chorus-perf" $sizes -n 10 -w 3 -c 0 2>&1 |
      awk '/^ +[0-9]/ {print $1, $8}' > "$tmp/chorus.$n.$r"
    mpirun -np "$n" --oversubscribe --mca btl tcp,self --mca btl_tcp_if_include lo \
      --mca oob_tcp_if_include lo "$build/bench/compare/mpi_perf" $sizes -n 10 -w 3 2>&1 |
      awk '/^ +[0-9]/ {print $1, $6}' > "$tmp/mpi.$n.$r"
  done
  echo "## $n ranks, allreduce float sum, busbw GB/s, median of $reps (chorus tcp vs OpenMPI btl tcp)"
  printf "%12s %10s %10s %8s\n" size chorus openmpi ratio
  python3 - "$tmp" "$n" "$reps" <<'PY'
import sys, statistics
tmp, n, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])
def load(kind):
    rows = {}
    for r in range(1, reps + 1):
        for line in open(f"{tmp}/{kind}.{n}.{r}"):
            size, bw = line.split()
            rows.setdefault(int(size), []).append(float(bw))
    return {k: statistics.median(v) for k, v in rows.items()}
c, m = load("chorus"), load("mpi")
for size in sorted(c):
    if size in m:
        print(f"{size:12d} {c[size]:10.2f} {m[size]:10.2f} {c[size]/m[size]:8.2f}")
PY
done
