#!/usr/bin/env bash
# Step time and traffic of chorus-train per mode on 2 hosts x 2 ranks made of network
# namespaces (tests/netns/run_job.sh: one namespace per host, a bridge between them, tbf on
# both ends of every host's link), at each link rate. Prints a markdown table: medians of the
# step time, of its exposed communication and of the compute (steps 3..STEPS; the first two
# warm up), and the bytes rank 0 sent per step inside its host and to the other host
# (chorusCommGetStats), with the algorithms the tuner ran.
#
# usage: [RATES="1gbit 10gbit"] [MODES="dp zero1 zero2 zero3 zeropp"] [STEPS=12] [DTYPE=bf16]
#        [HOSTS=2,2 (ranks per host, as run_job.sh --hosts)]
#        [MODEL="--layers 4 --width 512 ..."] examples/train/netns_speed.sh BUILD_DIR
# Needs root and ip netns (run_job.sh exits 77 otherwise, and so does this script). Nothing
# outside the namespaces run_job.sh creates is touched; it removes them on exit, also when
# this script is interrupted (its child run_job.sh gets SIGTERM and tears down).
set -euo pipefail
build=${1:?usage: netns_speed.sh BUILD_DIR}
build=$(realpath "$build")
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
run_job=$here/../../tests/netns/run_job.sh
train=$build/examples/train/chorus-train
RATES=${RATES:-"1gbit 10gbit"}
MODES=${MODES:-"dp zero1 zero2 zero3 zeropp"}
STEPS=${STEPS:-12}
DTYPE=${DTYPE:-bf16}
HOSTS=${HOSTS:-2,2}
# Wide and shallow in tokens: many parameters per token computed, so that at 1 Gbit/s zero3's
# step is mostly communication (see README.md).
MODEL=${MODEL:-"--layers 4 --width 512 --heads 8 --context 8 --batch 4"}
tmp=$(mktemp -d)
child=""
cleanup() {
  [ -n "$child" ] && kill -TERM "$child" 2>/dev/null && wait "$child" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

median() { sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) print "nan"; else
  printf "%.1f", NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

echo "model: $MODEL --dtype $DTYPE, $STEPS steps, ranks per host $HOSTS; load: $(cut -d' ' \
  -f1-3 /proc/loadavg)"
echo
echo "| rate | mode | step ms | compute ms | exposed comm ms | comm % | KiB/step in host |" \
  "KiB/step to other host | algorithms (world) |"
echo "|---|---|---|---|---|---|---|---|---|"
for rate in $RATES; do
  for mode in $MODES; do
    csv=$tmp/$rate.$mode.csv
    log=$tmp/$rate.$mode.log
    # shellcheck disable=SC2086
    "$run_job" --hosts "$HOSTS" --rate "$rate" --build "$build" --timeout 900 -- \
      "$train" --mode "$mode" --dtype "$DTYPE" $MODEL --steps "$STEPS" --eval-every 0 \
      --sample-chars 0 --threads 1 --timeout 120 --csv "$csv" >"$log" 2>&1 &
    child=$!
    rc=0
    wait "$child" || rc=$?
    child=""
    if [ "$rc" -eq 77 ]; then
      echo "netns_speed: skipped (run_job.sh: needs root and ip netns)" >&2
      exit 77
    fi
    if [ "$rc" -ne 0 ]; then
      echo "netns_speed: $mode at $rate failed ($rc):" >&2
      tail -30 "$log" >&2
      exit 1
    fi
    step=$(awk -F, 'NR > 1 && $1 >= 3 { print $6 }' "$csv" | median)
    comp=$(awk -F, 'NR > 1 && $1 >= 3 { print $7 }' "$csv" | median)
    comm=$(awk -F, 'NR > 1 && $1 >= 3 { print $8 }' "$csv" | median)
    pct=$(awk -v a="$comm" -v b="$step" 'BEGIN { printf "%.0f", 100 * a / b }')
    traffic=$(grep -m1 "\[0\] traffic of rank 0 per step" "$log" || true)
    intra=$(echo "$traffic" | sed -n 's/.*sent \([0-9.]*\) KiB within.*/\1/p')
    inter=$(echo "$traffic" | sed -n 's/.*host, \([0-9.]*\) KiB to other.*/\1/p')
    algos=$(grep -m1 "\[0\] algorithms run:" "$log" | sed 's/.*algorithms run: //' || true)
    echo "| $rate | $mode | $step | $comp | $comm | $pct | $intra | $inter | $algos |"
  done
done
