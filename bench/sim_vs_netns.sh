#!/usr/bin/env bash
# chorus-sim against measurements on hosts made of network namespaces (tests/netns), in one run.
#
#   bench/sim_vs_netns.sh [build-dir] [reps]                 (defaults: build 3; needs root)
#
# For each layout (LAYOUTS, run_job.sh --hosts syntax) and algorithm (ALGOS), `reps`
# repetitions with the algorithms and layouts interleaved: chorus-perf all-reduce float32 of
# SIZES, `-n ITERS -w 1 -c 0`, every host link limited to RATE by tc tbf (tests/netns/hosts.sh:
# a bucket of 4 ms of the rate, at least 64 KiB, on both directions of every host's link). Then
# chorus-sim on the same layout with flat hosts and the NICs at RATE, twice: with the links'
# token buckets modelled (--nic-burst-us 4000, what hosts.sh sets) and as physical links. The
# table gives the median measured time per call (out of place), both simulated times, and
# simulated / measured. Raw job output goes to $OUT/raw.txt.
#
# Environment: LAYOUTS (default "2,2 1,1,1,1"), ALGOS (default "ring hier tree
# recursive_doubling"), SIZES (default "-b 1M -e 64M -f 4"), ITERS (default 3), RATE (default
# 1gbit), OUT (default a new directory under /tmp).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${1:-build}
reps=${2:-3}
build=$(cd "$build" && pwd)
LAYOUTS=${LAYOUTS:-"2,2 1,1,1,1"}
ALGOS=${ALGOS:-"ring hier tree recursive_doubling"}
SIZES=${SIZES:-"-b 1M -e 64M -f 4"}
ITERS=${ITERS:-3}
RATE=${RATE:-1gbit}
OUT=${OUT:-$(mktemp -d /tmp/sim_vs_netns.XXXXXX)}
mkdir -p "$OUT"
run_job=$here/../tests/netns/run_job.sh
perf=$build/tools/chorus-perf/chorus-perf
sim=$build/tools/chorus-sim/chorus-sim
for f in "$perf" "$sim"; do
  [[ -x $f ]] || { echo "sim_vs_netns: $f not built" >&2; exit 1; }
done
[[ $RATE =~ ^([0-9]+)gbit$ ]] ||
  { echo "sim_vs_netns: RATE must be <N>gbit, not $RATE" >&2; exit 1; }
gbps=${BASH_REMATCH[1]}
read -ra sizes <<<"$SIZES"

measured=$OUT/measured.txt  # layout algo bytes us
: >"$measured"
for ((r = 1; r <= reps; r++)); do
  for layout in $LAYOUTS; do
    for algo in $ALGOS; do
      log=$(bash "$run_job" --hosts "$layout" --build "$build" --timeout 600 --rate "$RATE" \
              --env "CHORUS_ALGO=allreduce:$algo" -- "$perf" "${sizes[@]}" -n "$ITERS" -w 1 \
              -c 0 2>&1) || {
        echo "sim_vs_netns: job failed (hosts $layout, $algo):" >&2
        echo "$log" | tail -20 >&2
        exit 1
      }
      echo "$log" >>"$OUT/raw.txt"
      echo "$log" | awk -v l="$layout" -v a="$algo" \
        '/^\[h0\] \[0\] +[0-9]+ +[0-9]+ +float/ { print l, a, $3, $8 }' >>"$measured"
      echo "sim_vs_netns: run $r/$reps: $layout $algo done" >&2
    done
  done
done

simulate() {  # layout algo burst-us -> "bytes us" lines
  local layout=$1 algo=$2 burst=$3 hosts per
  hosts=$(awk -F, '{ print NF }' <<<"$layout")
  per=$(cut -d, -f1 <<<"$layout")
  [[ $(tr ',' '\n' <<<"$layout" | sort -u | wc -l) -eq 1 ]] ||
    { echo "sim_vs_netns: chorus-sim needs hosts of one size, not $layout" >&2; exit 1; }
  "$sim" --hosts "$hosts" -n "$per" --nic-gbps "$gbps" -c allreduce -a "$algo" "${sizes[@]}" \
    --nic-burst-us "$burst" --csv "$OUT/sim.csv" -q >/dev/null
  awk -F, 'NR > 1 { print $5, $7 }' "$OUT/sim.csv"
}

printf '| layout | algorithm | size | measured ms | simulated (tbf buckets) | sim/meas '
printf '| simulated (plain links) | sim/meas |\n'
printf '|---|---|---:|---:|---:|---:|---:|---:|\n'
for layout in $LAYOUTS; do
  for algo in $ALGOS; do
    simulate "$layout" "$algo" 4000 >"$OUT/sim_tbf.txt"
    simulate "$layout" "$algo" 0 >"$OUT/sim_plain.txt"
    while read -r bytes tbf; do
      plain=$(awk -v b="$bytes" '$1 == b { print $2 }' "$OUT/sim_plain.txt")
      med=$(awk -v l="$layout" -v a="$algo" -v b="$bytes" \
              '$1 == l && $2 == a && $3 == b { print $4 }' "$measured" | sort -g |
            awk '{ v[NR] = $1 }
                 END { if (NR) print (NR % 2) ? v[(NR + 1) / 2]
                                              : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
      [[ -n $med ]] || { echo "sim_vs_netns: no measurement for $layout $algo $bytes" >&2; exit 1; }
      awk -v l="$layout" -v a="$algo" -v b="$bytes" -v m="$med" -v t="$tbf" -v p="$plain" \
        'BEGIN { sz = b >= 1048576 ? sprintf("%d MiB", b / 1048576) : sprintf("%d KiB", b / 1024)
                 printf "| %s | %s | %s | %.2f | %.2f | %.2f | %.2f | %.2f |\n",
                 l, a, sz, m / 1000, t / 1000, t / m, p / 1000, p / m }'
    done <"$OUT/sim_tbf.txt"
  done
done
echo "sim_vs_netns: raw output in $OUT" >&2
