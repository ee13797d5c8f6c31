#!/usr/bin/env bash
# Precision of the quantized collectives: relative L2 error against the exact (fp64) result on
# N(0, 1) data, for every reduce-scatter algorithm on flat and pretend-host layouts, and the
# unbiasedness of stochastic rounding.
#
#   bench/quant/error_table.sh BUILD_DIR [OUT_DIR]        (a few minutes; no root needed)
#
# BUILD_DIR needs chorus-run and quant_probe (ninja -C BUILD_DIR chorus-run quant_probe).
# Layouts: flat (one host, shm) with W = 1, 2, 3, 4, 6, 8 ranks, and pretend hosts made of
# contiguous ranks with CHORUS_HOST_ID (shm inside a host, TCP over loopback between hosts: the
# error does not depend on the link): 2x2, 3x2, 4x2, 2x3, 2x4 (hosts x ranks), hosts of 2, 1
# and 3 ranks, and 4x1. For each layout and each reduce-scatter algorithm (quant_direct,
# quant_two_hop, quant_ring, forced with CHORUS_ALGO) one job runs, on the same inputs:
#   - the reduce-scatter at groups 32, 128, 256, 1024, 4096 x int4, int8 (symmetric, nearest),
#     and at group 256 also stochastic rounding and asymmetric;
#   - with quant_direct also the flat all-gather and the one-hop all-reduce, with quant_two_hop
#     the rail all-gather (qwZ) and the two-hop all-reduce, int4 and int8 at group 256.
# recvcount COUNT (default 131072 elements: each rank's reduce-scatter input is W x 512 KiB).
# Every row names the algorithm that actually ran (chorusCommGetStats): where the 2-hop cannot
# apply (one host, hosts of one rank, unequal hosts) it builds its one-hop form, and the tables
# say "quant_direct" there.
# Then the unbiasedness trials (2x2, quant_two_hop and quant_ring, TRIALS calls, default 64):
# stochastic against nearest rounding, on Gaussian data and on "outlier" data (one 8 per group,
# the rest 0.02 + 0.01 N(0, 1), below half a code step).
#
# With NETNS=1 (root), four of the layouts run again on real hosts, the network-namespace test bed
# of tests/netns (every host its own namespace and veth link, TCP between hosts): 2x2, 3x2,
# hosts of 2, 1 and 3, and 4x1, with quant_direct and quant_two_hop, int4 and int8 at group 256
# (nearest, stochastic, asymmetric) and the all-gather and all-reduce items. Their rows
# (netns.csv) must equal the pretend hosts' bit for bit — the same schedule does the same
# arithmetic whatever carries the bytes — and the tables show them side by side.
#
# Output: OUT_DIR/error.csv and trials.csv (the probe's ROW lines), netns.csv with NETNS=1, logs,
# and error_tables.md (bench/quant/quant_tables.py errors), which is also printed. Exit 1 when a
# job fails, or when a netns row differs from its pretend-host twin.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/common.sh"
quant_setup error_table bench/quant/quant_probe "$@"
probe=$tool
count=${COUNT:-131072}
trials=${TRIALS:-64}

# name|W|--hosts value (empty: flat)
layouts=(
  "flat|1|" "flat|2|" "flat|3|" "flat|4|" "flat|6|" "flat|8|"
  "2x2|4|2,2" "3x2|6|2,2,2" "4x2|8|2,2,2,2" "2x3|6|3,3" "2x4|8|4,4" "2+1+3|6|2,1,3" "4x1|4|1,1,1,1"
)
rs_items=()
for bits in 4 8; do
  for g in 32 128 256 1024 4096; do rs_items+=("rs/int$bits:$g"); done
  rs_items+=("rs/int$bits:256:stochastic=1" "rs/int$bits:256:asym")
done
# CHORUS_ALGO and the all-gather / all-reduce items that go with each reduce-scatter algorithm.
declare -A mask=(
  [quant_direct]="reducescatter:quant_direct,allgather:quant_direct,allreduce:quant_direct"
  [quant_two_hop]="reducescatter:quant_two_hop,allgather:quant_hier,allreduce:quant_two_hop"
  [quant_ring]="reducescatter:quant_ring"
)
extra=(ag/int4:256 ag/int8:256 ar/int4:256 ar/int8:256)

# job LOG CSV W HOSTS ALGO_MASK PROBE_ARGS...: one chorus-run job; ROW lines appended to CSV.
job() {
  local log=$1 csv=$2 w=$3 hosts=$4 algo=$5
  shift 5
  local args=()
  [ -n "$hosts" ] && args+=(--hosts "$hosts")
  if ! CHORUS_ALGO=$algo timeout --kill-after=10 600 \
      "$run" -n "$w" --no-prefix --timeout 550 -- "$probe" "${args[@]}" "$@" >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    echo "error_table: FAILED: W=$w hosts=${hosts:-flat} CHORUS_ALGO=$algo $* (log: $log)" >&2
    exit 1
  fi
  grep '^ROW,' "$log" | cut -d, -f2- >>"$csv"
}

: >"$out/error.csv"
for spec in "${layouts[@]}"; do
  IFS='|' read -r name w hosts <<<"$spec"
  for algo in quant_direct quant_two_hop quant_ring; do
    items=("${rs_items[@]}")
    [ "$algo" != quant_ring ] && items+=("${extra[@]}")
    echo "error_table: $name W=$w $algo" >&2
    job "$out/error-$name-$w-$algo.log" "$out/error.csv" "$w" "$hosts" "${mask[$algo]}" \
      --count "$count" error "${items[@]}"
  done
done

: >"$out/trials.csv"
for algo in quant_two_hop quant_ring; do
  for data in gaussian outlier; do
    echo "error_table: trials 2x2 $algo $data" >&2
    job "$out/trials-$algo-$data.log" "$out/trials.csv" 4 2,2 "${mask[$algo]}" \
      --count 32768 --trials "$trials" --data "$data" trials \
      rs/int8:256 rs/int8:256:stochastic=1 rs/int4:256 rs/int4:256:stochastic=1
  done
done

netns_args=()
if [ "${NETNS:-0}" = 1 ]; then
  [ "$(id -u)" = 0 ] || { echo "error_table: NETNS=1 needs root (network namespaces)" >&2; exit 1; }
  run_job=$here/../../tests/netns/run_job.sh
  netns_items=(rs/int4:256 rs/int8:256 rs/int4:256:stochastic=1 rs/int8:256:stochastic=1
               rs/int4:256:asym rs/int8:256:asym "${extra[@]}")
  : >"$out/netns.csv"
  for spec in "2x2|4|2,2" "3x2|6|2,2,2" "2+1+3|6|2,1,3" "4x1|4|1,1,1,1"; do
    IFS='|' read -r name w hosts <<<"$spec"
    for algo in quant_direct quant_two_hop; do
      echo "error_table: netns $name W=$w $algo" >&2
      log=$out/netns-$name-$algo.log
      if ! bash "$run_job" --hosts "$hosts" --build "$build" --timeout 550 \
          --env "CHORUS_ALGO=${mask[$algo]}" -- "$probe" --count "$count" error \
          "${netns_items[@]}" >"$log" 2>&1; then
        tail -n 20 "$log" >&2
        echo "error_table: FAILED: netns hosts $hosts CHORUS_ALGO=${mask[$algo]} (log: $log)" >&2
        exit 1
      fi
      # run_job prefixes every line with "[h<host>] ", chorus-run with "[<local rank>] ".
      sed -nE 's/^\[h0\] \[0\] ROW,//p' "$log" >>"$out/netns.csv"
    done
  done
  netns_args=(--netns "$out/netns.csv")
fi

python3 "$here/quant_tables.py" errors "$out/error.csv" "$out/trials.csv" "${netns_args[@]}" |
  tee "$out/error_tables.md"
echo "error_table: raw rows and logs in $out" >&2
