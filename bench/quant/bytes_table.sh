#!/usr/bin/env bash
# Wire bytes of the quantized collectives, per rank, inside and across hosts, from
# chorusCommGetStats, against the schedules' formulas.
#
#   bench/quant/bytes_table.sh BUILD_DIR [OUT_DIR]        (a minute; no root needed)
#
# BUILD_DIR needs chorus-run and quant_probe. Layouts: flat (4 ranks, one host) and pretend
# hosts of contiguous ranks (CHORUS_HOST_ID; shm inside a host, TCP between hosts): 2x2, 3x2,
# hosts of 2, 1 and 3, and 4x1. Per layout three jobs (CHORUS_ALGO): the one-hop set
# (reducescatter/allgather/allreduce:quant_direct), the host-aware set (quant_two_hop,
# quant_hier, quant_two_hop) and the ring (reducescatter:quant_ring). Each job makes one call of
# each of reduce-scatter, all-gather and all-reduce with int4:256, int8:256 and int8:256:asym,
# COUNT elements (default 100000: not a multiple of the group, so the last group is short), and
# records every rank's bytes sent and received during that call. quant_tables.py bytes sets them
# against the formulas (see there) plus the consistency headers, 112 B to each peer of the
# schedule per call, and fails (exit 1) when a rank's bytes differ.
#
# Output: OUT_DIR/bytes.csv, logs, and bytes_tables.md, which is also printed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/common.sh"
quant_setup bytes_table bench/quant/quant_probe "$@"
probe=$tool
count=${COUNT:-100000}

layouts=("flat|4|" "2x2|4|2,2" "3x2|6|2,2,2" "2+1+3|6|2,1,3" "4x1|4|1,1,1,1")
configs=(int4:256 int8:256 int8:256:asym)
sets=(
  "direct|reducescatter:quant_direct,allgather:quant_direct,allreduce:quant_direct|rs ag ar"
  "host-aware|reducescatter:quant_two_hop,allgather:quant_hier,allreduce:quant_two_hop|rs ag ar"
  "ring|reducescatter:quant_ring|rs"
)

: >"$out/bytes.csv"
for spec in "${layouts[@]}"; do
  IFS='|' read -r name w hosts <<<"$spec"
  for set in "${sets[@]}"; do
    IFS='|' read -r label algo colls <<<"$set"
    items=()
    for c in $colls; do
      for q in "${configs[@]}"; do items+=("$c/$q"); done
    done
    args=()
    [ -n "$hosts" ] && args+=(--hosts "$hosts")
    log=$out/bytes-$name-$label.log
    echo "bytes_table: $name $label" >&2
    if ! CHORUS_ALGO=$algo timeout --kill-after=10 300 "$run" -n "$w" --no-prefix --timeout 250 \
        -- "$probe" "${args[@]}" --count "$count" bytes "${items[@]}" >"$log" 2>&1; then
      tail -n 20 "$log" >&2
      echo "bytes_table: FAILED: $name $label (log: $log)" >&2
      exit 1
    fi
    grep '^ROW,' "$log" | cut -d, -f2- >>"$out/bytes.csv"
  done
done

python3 "$here/quant_tables.py" bytes "$out/bytes.csv" | tee "$out/bytes_tables.md"
echo "bytes_table: raw rows and logs in $out" >&2
