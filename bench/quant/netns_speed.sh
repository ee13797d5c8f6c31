#!/usr/bin/env bash
# Speed of the quantized collectives across rate-limited hosts (tests/netns): 2 hosts x 2 ranks,
# every host link limited with tbf (tests/netns/hosts.sh --rate), medians of interleaved runs.
#
#   bench/quant/netns_speed.sh BUILD_DIR [OUT_DIR]        (needs root; ~15 minutes)
#
# BUILD_DIR needs chorus-run and chorus-perf. Measurements, each job one chorus-perf run
# (-n ITERS -w WARMUP -c 0, blocking calls; the time is the mean over ITERS calls and ranks):
#   reduce-scatter, SIZE (default 64M) of float32 gradient per rank (the input), at every rate
#   of RATES (default "1gbit 10gbit"), without a limit, and (as the bound where the network is
#   free: "shm") the 4 ranks on this one host over shared memory, no test bed, with the
#   unquantized tuner's choice and the quantized quant_direct:
#     fp32 tuned / hier / ring   the unquantized reduce-scatter: the tuner's choice and the two
#                                forced with CHORUS_ALGO; "fp32 best" is the fastest median;
#     int4 / int8                --quant int4:256 / int8:256 with
#                                CHORUS_ALGO=reducescatter:quant_two_hop (qgZ);
#   all-gather at AG_RATES (default 1gbit), AG_SIZE (default 64M) of float32 output per rank
#   (a 16 MiB shard per rank; bfloat16 gathers the same elements in 32M):
#     fp32 / bf16 tuned, hier, ring (best of each) against --quant int8:256 with
#     CHORUS_ALGO=allgather:quant_hier (qwZ).
# REPS (default 5) repetitions, interleaved: rep 1 of every configuration, then rep 2, ...
# The algorithm each job ran is read from rank 0's CHORUS_DEBUG=INFO TUNE line.
# The split of the time: the wire time at a rate is the bytes that cross each host's link (from
# the schedules; bench/quant/bytes_table.sh checks them) over the rate; the run without a limit
# is the same job where only the machine limits the wire (TCP over veth, on the same cores as
# the ranks), and "shm" is the job without a network.
#
# While it measures, the file QUIET_FILE (when set, e.g. /work/QUIET) exists, so that other
# work on a shared machine can pause; it is removed on every exit (a trap).
#
# Output: OUT_DIR/speed.csv (one line per job: rate,coll,config,rep,us,algorithm,load), logs, and
# speed_tables.md (bench/quant/quant_tables.py speed), which is also printed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/common.sh"
quant_setup netns_speed tools/chorus-perf/chorus-perf "$@"
perf=$tool
reps=${REPS:-5}
hosts=2,2
rates=${RATES:-1gbit 10gbit}
ag_rates=${AG_RATES:-1gbit}
size=${SIZE:-64M}
ag_size=${AG_SIZE:-64M}
iters=${ITERS:-5}
warmup=${WARMUP:-2}
run_job=$here/../../tests/netns/run_job.sh
[ "$(id -u)" = 0 ] || { echo "netns_speed: needs root (network namespaces)" >&2; exit 77; }

half() {  # half of a size like 64M -> 32M
  local n=${1%[KMG]} u=${1##*[0-9]}
  echo "$((n / 2))$u"
}

# The configurations: name|collective|chorus-perf args|CHORUS_ALGO (empty: the tuner's).
rs_configs=(
  "fp32 tuned|reducescatter|-d float -b $size -e $size|"
  "fp32 hier|reducescatter|-d float -b $size -e $size|reducescatter:hier"
  "fp32 ring|reducescatter|-d float -b $size -e $size|reducescatter:ring"
  "int4|reducescatter|-d float -b $size -e $size --quant int4:256|reducescatter:quant_two_hop"
  "int8|reducescatter|-d float -b $size -e $size --quant int8:256|reducescatter:quant_two_hop"
)
ag_half=$(half "$ag_size")
ag_configs=(
  "fp32 tuned|allgather|-d float -b $ag_size -e $ag_size|"
  "fp32 hier|allgather|-d float -b $ag_size -e $ag_size|allgather:hier"
  "fp32 ring|allgather|-d float -b $ag_size -e $ag_size|allgather:ring"
  "bf16 tuned|allgather|-d bfloat16 -b $ag_half -e $ag_half|"
  "bf16 hier|allgather|-d bfloat16 -b $ag_half -e $ag_half|allgather:hier"
  "bf16 ring|allgather|-d bfloat16 -b $ag_half -e $ag_half|allgather:ring"
  "int8|allgather|-d float -b $ag_size -e $ag_size --quant int8:256|allgather:quant_hier"
)

if [ -n "${QUIET_FILE:-}" ]; then
  while [ -e "$QUIET_FILE" ]; do sleep 20; done  # someone else is timing
  trap 'rm -f "$QUIET_FILE"' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  touch "$QUIET_FILE"
fi

# one LOG RATE CONFIG: one job; prints "<us per call> <algorithm> <1-minute load average before
# the job>" (the load shows how busy the shared machine was). RATE "shm" runs the 4 ranks on
# this one host (chorus-run, shared memory, no network) instead of the test bed.
one() {
  local log=$1 rate=$2 spec=$3 name coll args algo load
  IFS='|' read -r name coll args algo <<<"$spec"
  load=$(cut -d' ' -f1 /proc/loadavg)
  local env=(--env CHORUS_DEBUG=INFO --env CHORUS_DEBUG_SUBSYS=TUNE) cmd
  [ -n "$algo" ] && env+=(--env "CHORUS_ALGO=$algo")
  [ "$rate" != none ] && [ "$rate" != shm ] && env+=(--rate "$rate")
  # shellcheck disable=SC2206  # args is a word list
  local prog=("$perf" --coll "$coll" $args -n "$iters" -w "$warmup" -c 0 -z 1)
  if [ "$rate" = shm ]; then
    cmd=(env CHORUS_DEBUG=INFO CHORUS_DEBUG_SUBSYS=TUNE ${algo:+CHORUS_ALGO=$algo}
         "$run" -n 4 --timeout 600 -- "${prog[@]}")
  else
    cmd=(bash "$run_job" --hosts "$hosts" --build "$build" --timeout 600 "${env[@]}" -- "${prog[@]}")
  fi
  if ! "${cmd[@]}" >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    echo "netns_speed: FAILED: $name $coll at $rate (log: $log)" >&2
    exit 1
  fi
  # run_job prefixes "[h0] [0]", chorus-run alone "[0]".
  sed -i -E 's/^\[0\]/[h0] [0]/' "$log"
  local us ran
  us=$(awk '/^\[h0\] \[0\] +[0-9]+ +[0-9]+ +(float|bfloat16)/ { print $8; exit }' "$log")
  ran=$(grep -E "^\[h0\] \[0\].*INFO $coll:[a-z_]+ for $coll" "$log" | grep -v 'count 1 x\|count 0 x' |
          tail -1 | sed -E "s/.*INFO $coll:([a-z_]+) for.*/\1/")
  [ -n "$us" ] || { echo "netns_speed: no time in $log" >&2; exit 1; }
  echo "$us ${ran:-?} $load"
}

: >"$out/speed.csv"
for ((r = 1; r <= reps; r++)); do
  for rate in $rates none shm; do
    for spec in "${rs_configs[@]}"; do
      name=${spec%%|*}
      # One host: the unquantized tuner's choice, and the one-hop quantized algorithm.
      [ "$rate" = shm ] && case $name in "fp32 hier" | "fp32 ring") continue ;; esac
      [ "$rate" = shm ] && spec=${spec/quant_two_hop/quant_direct}
      res=$(one "$out/rs-${rate}-${name// /_}-$r.log" "$rate" "$spec")
      echo "$rate,reducescatter,$name,$r,${res// /,}" | tee -a "$out/speed.csv" >&2
    done
  done
  for rate in $ag_rates; do
    for spec in "${ag_configs[@]}"; do
      name=${spec%%|*}
      res=$(one "$out/ag-${rate}-${name// /_}-$r.log" "$rate" "$spec")
      echo "$rate,allgather,$name,$r,${res// /,}" | tee -a "$out/speed.csv" >&2
    done
  done
done
if [ -n "${QUIET_FILE:-}" ]; then rm -f "$QUIET_FILE"; fi

python3 "$here/quant_tables.py" speed "$out/speed.csv" --size "$size" --ag-size "$ag_size" |
  tee "$out/speed_tables.md"
echo "netns_speed: raw rows and logs in $out" >&2
