#!/usr/bin/env bash
# chorus's UCX transport against UCX's own ucx_perftest, two ranks on this host, over the same
# UCX transports (UCX_TLS), in one run.
#
#   bench/compare/ucx_vs_perftest.sh [build-dir] [reps]          (defaults: build 5)
#
# Per UCX_TLS setting (TLS_LIST), medians over `reps` repetitions; every repetition runs each of
# the measurements below once, interleaved, so slow drifts of a shared machine hit all alike:
#   chorus bw    chorus-perf --coll sendrecv -b 4M -e 4M, CHORUS_TRANSPORT=ucx: algbw (GB/s).
#                Both ranks send and receive at once (a ring shift of two ranks), so on a
#                machine whose cores the two ranks fill, each direction gets about half.
#   chorus bw1   chorus-perf --coll pingpong -b 4M -e 4M: one direction, one message at a time
#                (4 MiB over half a round trip): the pattern of perftest pp.
#   chorus bws   chorus-perf --coll stream -b 4M -e 4M: one direction, 64 messages posted back
#                to back per call (time per message): the pattern of perftest bw (and osu_bw).
#   perftest bw  ucx_perftest -t tag_bw -s 4194304: overall bandwidth, one direction, sends
#                streamed (GB/s).
#   perftest pp  ucx_perftest -t tag_lat -s 4194304: UCX's own 4 MiB ping-pong, as 4 MiB over
#                its half round trip (GB/s): the same pattern as chorus bw1.
#   chorus lat   chorus-perf --coll pingpong -b 8 -e 8: half a round trip (us), nonblocking
#                calls (chorusISend / chorusIRecv, each completed by chorusWait: -z 0, the
#                default); chorus lat1 the same with blocking calls (chorusSend / chorusRecv,
#                -z 1), as MPI ping-pongs are usually written.
#   perftest lat ucx_perftest -t tag_lat -s 8: overall average latency, half a round trip (us).
#   and, once per repetition, chorus bw over chorus's own tcp transport, for reference.
# and the ratios chorus / perftest. Every chorus run checks its results (-c 1); any failure,
# timeout or missing row stops the script (exit 1) naming the run and its log.
#
# Environment:
#   TLS_LIST      UCX_TLS values, space-separated            (default "tcp posix,cma")
#   BW_ITERS      timed iterations of the bandwidth runs     (default 50)
#   LAT_ITERS     timed iterations of the latency runs       (default 5000)
#   RUN_TIMEOUT   seconds one run may take                   (default 300)
#   BIND          none: neither side is bound to CPUs; core: chorus-run --bind-to core and
#                 ucx_perftest -c (server on the first allowed CPU, client on the second),
#                 as mpirun binds two ranks by default              (default none)
#   OUT           output directory (default bench/compare/results/<date>-<time>-ucx)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
reps=${2:-5}
tls_list=${TLS_LIST:-"tcp posix,cma"}
bw_iters=${BW_ITERS:-50}
lat_iters=${LAT_ITERS:-5000}
run_timeout=${RUN_TIMEOUT:-300}
bind=${BIND:-none}
out=${OUT:-$here/results/$(date +%Y%m%d-%H%M%S)-ucx}
run=$build/tools/chorus-run/chorus-run
perf=$build/tools/chorus-perf/chorus-perf

fail() { echo "ucx_vs_perftest: $*" >&2; exit 1; }
[ -x "$run" ] && [ -x "$perf" ] || fail "build chorus-run and chorus-perf in $build first"
command -v ucx_perftest >/dev/null || fail "ucx_perftest not found (apt-get install ucx-utils)"
chorus_bind=(--bind-to none)
server_cpu=() client_cpu=()
case $bind in
  none) ;;
  core)
    chorus_bind=(--bind-to core)
    # The CPUs this script may use, in order (chorus-run --bind-to core takes the same ones).
    mapfile -t cpus < <(python3 -c 'import os; print("\n".join(map(str, sorted(os.sched_getaffinity(0)))))')
    server_cpu=(-c "${cpus[0]}")
    client_cpu=(-c "${cpus[$((1 % ${#cpus[@]}))]}") ;;
  *) fail "BIND must be none or core, not '$bind'" ;;
esac
mkdir -p "$out/logs"
export CHORUS_SOCKET_IFNAME=${CHORUS_SOCKET_IFNAME:-lo}
{
  echo "date: $(date -u +%FT%TZ)"; echo "host: $(hostname)"; echo "nproc: $(nproc)"
  echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"; echo "ucx: $(ucx_info -v | head -1)"
  echo "reps: $reps  bw_iters: $bw_iters  lat_iters: $lat_iters  tls: $tls_list  bind: $bind"
} > "$out/meta.txt"
: > "$out/raw.csv"

# chorus-perf's out-of-place row for `size`: column 7 is the time (us), 8 the algbw (GB/s).
chorus_run() {  # tls label coll size iters column [transport [-z mode]]
  local tls=$1 label=$2 coll=$3 size=$4 iters=$5 col=$6 transport=${7:-ucx} mode=${8:-0}
  local log=$out/logs/$label-${tls//,/_}-$rep.log
  if ! CHORUS_TRANSPORT=$transport UCX_TLS=$tls timeout "$run_timeout" "$run" -n 2 "${chorus_bind[@]}" "$perf" \
      --coll "$coll" -b "$size" -e "$size" -n "$iters" -w $((iters / 10 + 1)) -c 1 -z "$mode" \
      >"$log" 2>&1; then
    fail "$label ($tls) failed: see $log"
  fi
  local v
  v=$(awk -v s="$size" -v c="$col" '$1 == "[0]" && $2 == s { print $c; exit }' "$log")
  [ -n "$v" ] || fail "$label ($tls): no row for $size bytes in $log"
  awk -v s="$size" '$1 == "[0]" && $2 == s && $10 != "0" { exit 1 }' "$log" ||
    fail "$label ($tls): wrong elements, see $log"
  echo "\"$tls\",$label,$rep,$v" >> "$out/raw.csv"
}

# ucx_perftest's "Final:" row: field 4 the overall latency (us), 6 the overall bandwidth (MB/s,
# 2^20 bytes).
perftest_run() {  # tls label test size iters
  local tls=$1 label=$2 test=$3 size=$4 iters=$5
  local log=$out/logs/$label-${tls//,/_}-$rep.log
  local port=$((20000 + RANDOM % 20000))
  UCX_TLS=$tls timeout "$run_timeout" ucx_perftest -t "$test" -s "$size" -n "$iters" \
    -p "$port" "${server_cpu[@]}" >"$log.server" 2>&1 &
  local server=$!
  local ok=0
  for _ in $(seq 50); do
    sleep 0.2
    if UCX_TLS=$tls timeout "$run_timeout" ucx_perftest 127.0.0.1 -t "$test" -s "$size" \
        -n "$iters" -p "$port" "${client_cpu[@]}" >"$log" 2>&1; then ok=1; break; fi
    grep -q "Final:" "$log" && { ok=1; break; }
  done
  wait "$server" || true
  [ $ok = 1 ] || fail "$label ($tls) failed: see $log"
  local v
  if [ "$test" = tag_bw ]; then
    v=$(awk '$1 == "Final:" { printf "%.4f", $6 * 1048576 / 1e9 }' "$log")
  elif [ "$size" -gt 4096 ]; then
    v=$(awk -v s="$size" '$1 == "Final:" { printf "%.4f", s / $4 / 1e3 }' "$log")
  else
    v=$(awk '$1 == "Final:" { print $4 }' "$log")
  fi
  [ -n "$v" ] || fail "$label ($tls): no Final row in $log"
  echo "\"$tls\",$label,$rep,$v" >> "$out/raw.csv"
}

for rep in $(seq "$reps"); do
  for tls in $tls_list; do
    chorus_run "$tls" chorus_bw sendrecv 4194304 "$bw_iters" 8
    chorus_run "$tls" chorus_bw1 pingpong 4194304 "$bw_iters" 8
    # A stream call is 64 messages: a tenth of the iterations moves about as many bytes.
    chorus_run "$tls" chorus_bws stream 4194304 $((bw_iters / 10 + 1)) 8
    perftest_run "$tls" perftest_bw tag_bw 4194304 "$bw_iters"
    perftest_run "$tls" perftest_pp tag_lat 4194304 "$bw_iters"
    chorus_run "$tls" chorus_lat pingpong 8 "$lat_iters" 7
    chorus_run "$tls" chorus_lat1 pingpong 8 "$lat_iters" 7 ucx 1
    perftest_run "$tls" perftest_lat tag_lat 8 "$lat_iters"
  done
  chorus_run - chorus_tcp_bw sendrecv 4194304 "$bw_iters" 8 tcp
done

python3 - "$out/raw.csv" "$tls_list" <<'EOF' | tee "$out/tables.txt"
import csv, statistics, sys
rows = list(csv.reader(open(sys.argv[1])))
def med(tls, label):
    return statistics.median(float(r[3]) for r in rows if r[0] == tls and r[1] == label)
print("| UCX_TLS | chorus sendrecv 4 MiB GB/s (both ways) | chorus stream 4 MiB GB/s (one way) "
      "| ucx_perftest tag_bw GB/s | ratio | chorus pingpong 4 MiB GB/s (one way) "
      "| ucx_perftest tag_lat 4 MiB GB/s | ratio | chorus 8 B us -z 0 | chorus 8 B us -z 1 "
      "| ucx_perftest tag_lat us | ratios |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for tls in sys.argv[2].split():
    cb, cbs, pb = med(tls, "chorus_bw"), med(tls, "chorus_bws"), med(tls, "perftest_bw")
    cb1, pp = med(tls, "chorus_bw1"), med(tls, "perftest_pp")
    cl, cl1, pl = med(tls, "chorus_lat"), med(tls, "chorus_lat1"), med(tls, "perftest_lat")
    print(f"| {tls} | {cb:.3f} | {cbs:.3f} | {pb:.3f} | {cbs / pb:.2f} | {cb1:.3f} | {pp:.3f} "
          f"| {cb1 / pp:.2f} | {cl:.2f} | {cl1:.2f} | {pl:.2f} | {cl / pl:.2f}, {cl1 / pl:.2f} |")
tcp = med("-", "chorus_tcp_bw")
print(f"\nchorus's own tcp transport, same chorus-perf sendrecv 4 MiB: {tcp:.3f} GB/s")
EOF
echo "ucx_vs_perftest: results in $out"
