#!/usr/bin/env bash
# chorus-sim against measurements on hosts made of network namespaces (tests/netns), in one run.
#
#   bench/sim_vs_netns.sh [build-dir] [reps]                 (defaults: build 3; needs root)
#
# For each layout (LAYOUTS, run_job.sh --hosts syntax) and algorithm (ALGOS), `reps`
# repetitions with the algorithms and layouts interleaved: chorus-perf all-reduce float32 of
# SIZES, `-n ITERS -w 1 -c 0`, every host link limited to RATE by tc tbf (tests/netns/hosts.sh:
# a bucket of 4 ms of the rate, at least 64 KiB, on both directions of every host's link). Then
# chorus-sim on the same layout with flat hosts and the NICs at RATE, three times: with the CPU
# model (SIM_FLAGS) and the links' token buckets (--nic-burst-us 4000, what hosts.sh sets); and
# without the CPU, with the buckets and as physical links (the model before the CPU). The table
# gives the median measured time per call (out of place), the simulated times and simulated /
# measured, then how many points are within 30% (below 1 MiB) and 15% (1 MiB and up). Raw job
# output goes to $OUT/raw.txt, the measurements (one line per job and size) to
# $OUT/measured.txt.
#
# Environment: LAYOUTS (default "2,2 1,1,1,1"), ALGOS (default "ring hier tree
# recursive_doubling"), SIZES (default "-b 1M -e 64M -f 4"), ITERS (default 3), RATE (default
# 1gbit), OUT (default a new directory under /tmp), SIM_FLAGS (chorus-sim's CPU model; default:
# the calibration in docs/simulation.md, "Calibration of the CPU terms"; the netns hosts share
# this machine's cores, which --machine-cores "$(nproc)" adds), MEASURED (a measured.txt of an
# earlier run: simulate only, no jobs; docs/perf/2026-12-02-sim-netns/ keeps some).
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
# Frozen 2026-11-28 from netns 1 x 1 only (docs/simulation.md, "Calibration of the CPU terms").
SIM_FLAGS=${SIM_FLAGS-"--msg-us 8 --msg-gbps 1 --call-us 5 --nic-burst-start steady"}
MEASURED=${MEASURED:-}
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
if [[ -n $MEASURED ]]; then
  [[ $(realpath "$MEASURED") == $(realpath -m "$measured") ]] || cp "$MEASURED" "$measured"
  reps=0
else
  : >"$measured"
fi
read -ra sim_flags <<<"$SIM_FLAGS"
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

simulate() {  # layout algo burst-us [chorus-sim flags] -> "bytes us" lines
  local layout=$1 algo=$2 burst=$3 hosts per
  shift 3
  hosts=$(awk -F, '{ print NF }' <<<"$layout")
  per=$(cut -d, -f1 <<<"$layout")
  [[ $(tr ',' '\n' <<<"$layout" | sort -u | wc -l) -eq 1 ]] ||
    { echo "sim_vs_netns: chorus-sim needs hosts of one size, not $layout" >&2; exit 1; }
  "$sim" --hosts "$hosts" -n "$per" --nic-gbps "$gbps" -c allreduce -a "$algo" "${sizes[@]}" \
    --nic-burst-us "$burst" --csv "$OUT/sim.csv" -q "$@" >/dev/null
  awk -F, 'NR > 1 { print $5, $7 }' "$OUT/sim.csv"
}

echo "sim_vs_netns: chorus-sim CPU model: ${SIM_FLAGS:-(none)}" >&2
printf '| layout | algorithm | size | measured ms | simulated, CPU | sim/meas '
printf '| no CPU (tbf buckets) | sim/meas | no CPU (plain links) | sim/meas |\n'
printf '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n'
: >"$OUT/ratios.txt"  # bytes cpu/meas tbf/meas
for layout in $LAYOUTS; do
  for algo in $ALGOS; do
    simulate "$layout" "$algo" 4000 "${sim_flags[@]}" >"$OUT/sim_cpu.txt"
    simulate "$layout" "$algo" 4000 >"$OUT/sim_tbf.txt"
    simulate "$layout" "$algo" 0 >"$OUT/sim_plain.txt"
    while read -r bytes cpu; do
      tbf=$(awk -v b="$bytes" '$1 == b { print $2 }' "$OUT/sim_tbf.txt")
      plain=$(awk -v b="$bytes" '$1 == b { print $2 }' "$OUT/sim_plain.txt")
      med=$(awk -v l="$layout" -v a="$algo" -v b="$bytes" \
              '$1 == l && $2 == a && $3 == b { print $4 }' "$measured" | sort -g |
            awk '{ v[NR] = $1 }
                 END { if (NR % 2) print v[(NR + 1) / 2]
                       else if (NR) print (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
      # chorus-sim adds -e itself where the factor does not reach it; chorus-perf does not.
      [[ -n $med ]] || { echo "sim_vs_netns: no measurement of $bytes B ($layout $algo)" >&2
                         continue; }
      awk -v l="$layout" -v a="$algo" -v b="$bytes" -v m="$med" -v c="$cpu" -v t="$tbf" \
          -v p="$plain" -v ratios="$OUT/ratios.txt" \
        'BEGIN { if (b >= 1048576) sz = sprintf("%d MiB", b / 1048576)
                 else if (b >= 1024) sz = sprintf("%d KiB", b / 1024)
                 else sz = sprintf("%d B", b)
                 printf "| %s | %s | %s | %.3f | %.3f | %.2f | %.3f | %.2f | %.3f | %.2f |\n",
                 l, a, sz, m / 1000, c / 1000, c / m, t / 1000, t / m, p / 1000, p / m
                 print b, c / m, t / m >>ratios }'
    done <"$OUT/sim_cpu.txt"
  done
done
awk '{ small = $1 < 1048576; lim = small ? 0.30 : 0.15
       k = small ? "below 1 MiB (30%)" : "1 MiB and up (15%)"; n[k]++
       if ($2 >= 1 - lim && $2 <= 1 + lim) c[k]++
       if ($3 >= 1 - lim && $3 <= 1 + lim) t[k]++ }
     END { for (k in n) printf "within, %s: CPU model %d of %d, no CPU (tbf) %d of %d\n",
                              k, c[k], n[k], t[k], n[k] }' "$OUT/ratios.txt" | sort
echo "sim_vs_netns: raw output in $OUT" >&2
