#!/usr/bin/env bash
# chorus over TCP vs OpenMPI's MPI_Allreduce over its TCP BTL, same sizes, same machine, same run.
# Runs each system REPS times, interleaved, and prints per size the median busbw of each and the
# ratio chorus/OpenMPI (for sizes where bandwidth rounds to zero, the time ratio OpenMPI/chorus).
# Loopback only. SIZES overrides the size flags (default -b 8 -e 256M -f 4).
#   bench/compare/tcp_vs_openmpi.sh [build-dir] [reps] [ranks...]
set -euo pipefail
build=${1:-build}
reps=${2:-5}
shift 2 || true
ranks=("${@:-2 4}")
[ $# -gt 0 ] || ranks=(2 4)
sizes="${SIZES:--b 8 -e 256M -f 4}"
iters=${ITERS:-20}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export CHORUS_SOCKET_IFNAME=lo OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for n in "${ranks[@]}"; do
  for r in $(seq 1 "$reps"); do
    "$build/tools/chorus-run/chorus-run" -n "$n" --no-prefix -- \
      "$build/tools/chorus-perf/chorus-perf" $sizes -n "$iters" -w 3 -c 0 2>&1 |
      awk '/^ +[0-9]/ {print $1, $6, $8}' > "$tmp/chorus.$n.$r"
    mpirun -np "$n" --oversubscribe --mca btl tcp,self --mca btl_tcp_if_include lo \
      --mca oob_tcp_if_include lo "$build/bench/compare/mpi_perf" $sizes -n "$iters" -w 3 2>&1 |
      awk '/^ +[0-9]/ {print $1, $4, $6}' > "$tmp/mpi.$n.$r"
  done
  echo "## $n ranks, allreduce float sum, median of $reps runs (chorus tcp vs OpenMPI btl tcp)"
  printf "%12s %11s %11s %11s %11s %8s\n" size "chorus us" "ompi us" "chorus GB/s" "ompi GB/s" "busbw ratio"
  python3 - "$tmp" "$n" "$reps" <<'PY'
import sys, statistics
tmp, n, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])
def load(kind):
    rows = {}
    for r in range(1, reps + 1):
        for line in open(f"{tmp}/{kind}.{n}.{r}"):
            size, us, bw = line.split()
            rows.setdefault(int(size), []).append((float(us), float(bw)))
    return {k: (statistics.median(u for u, _ in v), statistics.median(b for _, b in v))
            for k, v in rows.items()}
c, m = load("chorus"), load("mpi")
for size in sorted(c):
    if size in m:
        ratio = c[size][1] / m[size][1] if m[size][1] > 0 else float("nan")
        # Below ~64 KiB bandwidth rounds to 0.00: compare times instead (ompi/chorus).
        if c[size][1] < 0.05 or m[size][1] < 0.05:
            ratio = m[size][0] / c[size][0]
        print(f"{size:12d} {c[size][0]:11.1f} {m[size][0]:11.1f} {c[size][1]:11.2f} "
              f"{m[size][1]:11.2f} {ratio:8.2f}")
PY
done
