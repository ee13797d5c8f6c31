#!/usr/bin/env bash
# The memory table of README.md: chorus-train --memory-report for every mode, dtype and world
# size on this host, rank 0's peaks per phase (libtorch's CPU allocator by tag, and the resident
# set), next to the ZeRO formulas for what parameters, gradients and optimizer states take.
#
# usage: [MODES="dp zero1 zero2 zero3 zeropp"] [DTYPES="bf16 fp32"] [WORLDS="2 4"]
#        [MODEL="--layers 6 --width 384 ..."] examples/train/memory_table.sh BUILD_DIR
set -euo pipefail
build=$1
MODES=${MODES:-"dp zero1 zero2 zero3 zeropp"}
DTYPES=${DTYPES:-"bf16 fp32"}
WORLDS=${WORLDS:-"2 4"}
MODEL=${MODEL:-"--layers 6 --width 384 --heads 6 --context 32 --batch 4"}
export CHORUS_SOCKET_IFNAME=${CHORUS_SOCKET_IFNAME:-lo}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for dtype in $DTYPES; do
  for w in $WORLDS; do
    for mode in $MODES; do
      # shellcheck disable=SC2086
      "$build/tools/chorus-run/chorus-run" -n "$w" -- "$build/examples/train/chorus-train" \
        $MODEL --mode "$mode" --dtype "$dtype" --steps 3 --eval-every 0 --sample-chars 0 \
        --quiet --memory-report --no-malloc-cache >"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
      grep -o "memory-csv,.*" "$tmp/log" >>"$tmp/all.csv"
    done
  done
done
echo "model: $MODEL, 3 steps, load $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$tmp/all.csv" <<'EOF'
import csv, sys
from collections import defaultdict
MiB = 1048576.0
runs = defaultdict(dict)
for r in csv.reader(open(sys.argv[1])):
    _, mode, dtype, w, psi, phase, p, g, o, other, total, rss = r
    runs[(dtype, mode, int(w), int(psi))][phase] = [int(x) for x in (p, g, o, other, total, rss)]
# Bytes per parameter of (params, grads, optimizer states) at rest, K = 12 for AdamW with fp32
# master weights (bf16) or 8 (fp32: the parameters are the master weights).
def formula(dtype, mode, W):
    a, k = (2, 12) if dtype == "bf16" else (4, 8)
    return {"dp": (a, a, k), "zero1": (a, a, k / W), "zero2": (a, a / W, k / W),
            "zero3": (a / W, a / W, k / W), "zeropp": (a / W, a / W, k / W)}[mode]
def names(dtype, mode):
    if dtype == "bf16":
        return {"dp": "16Ψ", "zero1": "4Ψ+12Ψ/W", "zero2": "2Ψ+14Ψ/W", "zero3": "16Ψ/W",
                "zeropp": "16Ψ/W (+hpZ 2Ψ/L)"}[mode]
    return {"dp": "16Ψ", "zero1": "8Ψ+8Ψ/W", "zero2": "4Ψ+12Ψ/W", "zero3": "16Ψ/W",
            "zeropp": "16Ψ/W (+hpZ 4Ψ/L)"}[mode]
print("| dtype | mode | W | formula | = MiB (p + g + o) | params peak | grads peak "
      "| optimizer peak | torch total peak fwd / bwd / opt | RSS peak fwd / bwd / opt |")
print("|---|---|---|---|---|---|---|---|---|---|")
for (dtype, mode, W, psi), ph in runs.items():
    f = formula(dtype, mode, W)
    fm = [x * psi / MiB for x in f]
    peak = lambda i: max(v[i] for v in ph.values()) / MiB
    tot = " / ".join(f"{ph[p][4] / MiB:.0f}" for p in ("forward", "backward", "optimizer"))
    rss = " / ".join(f"{ph[p][5] / MiB:.0f}" for p in ("forward", "backward", "optimizer"))
    print(f"| {dtype} | {mode} | {W} | {names(dtype, mode)} | {sum(fm):.1f} ({fm[0]:.1f} + "
          f"{fm[1]:.1f} + {fm[2]:.1f}) | {peak(0):.1f} | {peak(1):.1f} | {peak(2):.1f} | {tot} "
          f"| {rss} |")
EOF
