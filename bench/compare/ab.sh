#!/usr/bin/env bash
# A/B of two chorus builds over every size, in one interleaved run: is a change faster, and does
# it slow anything down?
#
#   bench/compare/ab.sh BUILD_A BUILD_B [reps] [ranks...]        (defaults: 5 "2 4")
#
# BUILD_A and BUILD_B are build directories (e.g. a worktree of the parent commit and this one);
# each must have tools/chorus-run/chorus-run, tools/chorus-perf/chorus-perf and libchorus.so.0.
# Each binary runs with LD_LIBRARY_PATH on its own build, so A's chorus-perf uses A's library.
# In every repetition each configuration runs once with A and once with B, back to back (A first
# in odd repetitions, B first in even ones), so drifts of a shared machine hit both alike.
#
# Configurations: COLL (default allreduce), float sum, SIZES (default -b 8 -e 8M -f 4), for each
# rank count, over shm and over TCP (CHORUS_TRANSPORT), blocking (-z 1) and nonblocking (-z 0)
# — set TRANSPORTS / BLOCKING to narrow it. Every run checks its results (-c 1). PERF_ARGS go
# to chorus-perf (e.g. "-R 1": registered chorusMemAlloc buffers), RUN_ARGS to chorus-run
# (e.g. "--bind-to core").
#
# Prints, per configuration and size, the median time of A and of B and B/A; a line per size
# where B is more than 5% slower is flagged "slower". Writes OUT/raw.csv (compare.sh's
# columns, system = a|b-<transport>-z<blocking>), OUT/ab.txt (the table) and OUT/logs/.
#
# Environment: COLL, SIZES, ITERS (default 200), WARMUP (50), TRANSPORTS ("shm tcp"),
# BLOCKING ("1 0"), PERF_ARGS, RUN_ARGS, RUN_TIMEOUT (300), OUT
# (bench/compare/results/<date>-<time>-ab).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 2 ] || { sed -n '2,20p' "$0" >&2; exit 2; }
build_a=$1
build_b=$2
reps=${3:-5}
if [ $# -gt 3 ]; then ranks=("${@:4}"); else ranks=(2 4); fi
coll=${COLL:-allreduce}
sizes=${SIZES:--b 8 -e 8M -f 4}
perf_args=${PERF_ARGS:-}
run_args=${RUN_ARGS:-}
iters=${ITERS:-200}
warmup=${WARMUP:-50}
transports=${TRANSPORTS:-shm tcp}
blocking=${BLOCKING:-1 0}
run_timeout=${RUN_TIMEOUT:-300}
out=${OUT:-$here/results/$(date +%Y%m%d-%H%M%S)-ab}

tool=ab
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$here/common.sh"

[[ "$reps" =~ ^[1-9][0-9]*$ ]] || fail "reps must be a positive number, not '$reps'"
[ "$reps" -ge 5 ] || echo "ab: warning: $reps repetitions; medians want 5 or more" >&2
declare -A dir
for side in a b; do
  b=$build_a
  [ "$side" = b ] && b=$build_b
  b=$(cd "$b" && pwd) || fail "no build directory $b"
  for f in tools/chorus-run/chorus-run tools/chorus-perf/chorus-perf libchorus.so.0; do
    [ -e "$b/$f" ] || fail "$b/$f missing (build it first)"
  done
  dir[$side]=$b
done

mkdir -p "$out/logs"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export CHORUS_SOCKET_IFNAME=lo
{
  echo "date: $(date -Iseconds)"
  echo "command: $0 $*"
  echo "a: ${dir[a]} ($(git -C "${dir[a]}" describe --always --dirty 2>/dev/null || echo '?'))"
  echo "b: ${dir[b]} ($(git -C "${dir[b]}" describe --always --dirty 2>/dev/null || echo '?'))"
  echo "host: $(uname -srm), $(nproc) cpus; load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "$coll float sum '$sizes', ranks ${ranks[*]}, transports $transports, -z $blocking"
  echo "chorus-perf extra: '$perf_args', chorus-run extra: '$run_args'"
  echo "iters $iters, warmup $warmup, reps $reps"
} >"$out/meta.txt"

launch() {  # launch SIDE TRANSPORT Z N REP
  local side=$1 transport=$2 z=$3 n=$4 rep=$5 d=${dir[$1]}
  local log=$out/logs/$side-$transport-z$z-n$n-r$rep.log
  # shellcheck disable=SC2086  # the size and extra flags are meant to split into words
  run "$log" env LD_LIBRARY_PATH="$d" CHORUS_TRANSPORT="$transport" \
    "$d/tools/chorus-run/chorus-run" $run_args -n "$n" --no-prefix -- \
    "$d/tools/chorus-perf/chorus-perf" --coll "$coll" $sizes -n "$iters" -w "$warmup" -c 1 \
    -z "$z" $perf_args
  record "$side-$transport-z$z" "$coll" "$n" "$rep" "$log"
}

echo "system,coll,nranks,rep,size,time_us,busbw_gbps,wrong" >"$out/raw.csv"
for rep in $(seq 1 "$reps"); do
  order="a b"
  [ $((rep % 2)) -eq 0 ] && order="b a"
  for n in "${ranks[@]}"; do
    for t in $transports; do
      for z in $blocking; do
        for side in $order; do launch "$side" "$t" "$z" "$n" "$rep"; done
      done
    done
  done
  echo "ab: repetition $rep/$reps done" >&2
done

python3 - "$out/raw.csv" <<'EOF' | tee "$out/ab.txt"
import csv, statistics, sys
from collections import defaultdict
t = defaultdict(list)
for r in csv.DictReader(open(sys.argv[1])):
    side, cfg = r["system"].split("-", 1)
    t[(cfg, int(r["nranks"]), int(r["size"]), side)].append(float(r["time_us"]))
keys = sorted({k[:3] for k in t})
print(f"{'config':<10} {'ranks':>5} {'size':>9} {'A us':>10} {'B us':>10} {'B/A':>6}")
slower = 0
for cfg, n, size in keys:
    a = statistics.median(t[(cfg, n, size, "a")])
    b = statistics.median(t[(cfg, n, size, "b")])
    flag = "  slower" if b > 1.05 * a else ""
    slower += bool(flag)
    print(f"{cfg:<10} {n:>5} {size:>9} {a:>10.2f} {b:>10.2f} {b / a:>6.2f}{flag}")
print(f"{slower} of {len(keys)} cells: B more than 5% slower than A (medians)")
EOF
