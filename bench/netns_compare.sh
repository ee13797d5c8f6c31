#!/usr/bin/env bash
# All-reduce algorithms across hosts made of network namespaces (tests/netns), in one run.
#
#   bench/netns_compare.sh [build-dir] [reps]            (defaults: build 5; needs root)
#
# Two measurements of the issue-5 acceptance, each repeated `reps` times with the algorithms
# interleaved (a slow drift of the machine hits all alike), medians printed:
#   large  2 hosts x 2 ranks, every host link limited to RATE (default 1gbit, tbf on both ends),
#          all-reduce of LARGE (default 64M) floats-bytes: ring (the host-aware ring order),
#          hier, tree, and the tuner's choice. Theory for the host link (S bytes): ring
#          1.5 S, hier and tree S, so hier/ring = 1.5.
#   small  4 hosts x 1 rank, no rate limit, all-reduce of 8 B: ring, tree, rabenseifner,
#          recursive_doubling, oneshot and the tuner's choice. Theory (hops): ring 2 (n-1) = 6,
#          recursive doubling log2 n = 2, tree 2 log2 n = 4 (two trees, half the data each),
#          one-shot 1 hop but n-1 = 3 messages per rank.
# The tuner's choice is read from the CHORUS_DEBUG=INFO line of rank 0 ("allreduce:X for
# allreduce count C ... (tuner)"). Output: one table per measurement with the median time per
# call, the ratio to the ring and the tuner's pick; raw lines go to $OUT/raw.txt.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${1:-build}
reps=${2:-5}
build=$(cd "$build" && pwd)
RATE=${RATE:-1gbit}
LARGE=${LARGE:-64M}
OUT=${OUT:-$(mktemp -d /tmp/netns_compare.XXXXXX)}
mkdir -p "$OUT"
run_job=$here/../tests/netns/run_job.sh
perf=$build/tools/chorus-perf/chorus-perf

# One job: prints "<us per call> <algorithm that ran>".
one() {  # hosts rate size iters warmup algo
  local hosts=$1 rate=$2 size=$3 iters=$4 warm=$5 algo=$6 args=() log
  [[ -n $rate ]] && args+=(--rate "$rate")
  [[ -n $algo ]] && args+=(--env "CHORUS_ALGO=allreduce:$algo")
  log=$(bash "$run_job" --hosts "$hosts" --build "$build" --timeout 300 "${args[@]}" \
          --env CHORUS_DEBUG=INFO --env CHORUS_DEBUG_SUBSYS=TUNE \
          -- "$perf" -b "$size" -e "$size" -n "$iters" -w "$warm" -c 1 2>&1) || {
    echo "netns_compare: job failed (hosts $hosts, algo ${algo:-tuned}):" >&2
    echo "$log" | tail -20 >&2
    exit 1
  }
  echo "$log" >> "$OUT/raw.txt"
  local us ran
  us=$(echo "$log" | awk '/^\[h0\] \[0\] +[0-9]+ +[0-9]+ +float/ { print $8; exit }')
  ran=$(echo "$log" | grep -E '^\[h0\] \[0\].*INFO allreduce:[a-z_]+ for allreduce' |
          grep -v 'count 1 x\|count 0 x' | tail -1 | sed -E 's/.*INFO allreduce:([a-z_]+) for.*/\1/')
  echo "$us ${ran:-?}"
}

median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

table() {  # title hosts rate size iters warmup algos...
  local title=$1 hosts=$2 rate=$3 size=$4 iters=$5 warm=$6
  shift 6
  local algos=("$@") a r
  declare -A times picks
  for ((r = 1; r <= reps; r++)); do
    for a in "${algos[@]}"; do
      read -r us ran < <(one "$hosts" "$rate" "$size" "$iters" "$warm" "$([[ $a == tuned ]] || echo "$a")")
      times[$a]+="$us "
      [[ $a == tuned ]] && picks[$a]=$ran
    done
  done
  local ring
  ring=$(echo "${times[ring]}" | tr ' ' '\n' | grep . | median)
  echo
  echo "## $title (hosts $hosts${rate:+, links $rate}, $size B, medians of $reps)"
  echo
  echo "| algorithm | us per call (median) | runs | ring / algorithm |"
  echo "| --- | ---: | --- | ---: |"
  for a in "${algos[@]}"; do
    local m
    m=$(echo "${times[$a]}" | tr ' ' '\n' | grep . | median)
    local name=$a
    [[ $a == tuned ]] && name="tuner's choice: ${picks[$a]}"
    printf '| %s | %.1f | %s | %.2f |\n' "$name" "$m" "${times[$a]% }" "$(awk -v a="$ring" -v b="$m" 'BEGIN { print a / b }')"
  done
}

table "large all-reduce" 2,2 "$RATE" "$LARGE" 3 1 ring hier tree tuned
table "small all-reduce" 1,1,1,1 "" 8 2000 200 ring tree rabenseifner recursive_doubling oneshot tuned
echo
echo "raw output: $OUT/raw.txt"
