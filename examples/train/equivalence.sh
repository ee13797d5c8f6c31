#!/usr/bin/env bash
# The equivalence table of README.md: every mode on 2, 3 and 4 ranks against one process after
# STEPS steps (dropout, accumulation and clipping on), worst ||dp||/||p|| over the tensors.
#
# usage: [EPS=1e-6] examples/train/equivalence.sh BUILD_DIR [STEPS]
set -euo pipefail
build=$1 steps=${2:-20}
train=$build/examples/train/chorus-train
compare=$build/examples/train/chorus-train-compare
launcher=$build/tools/chorus-run/chorus-run
export CHORUS_SOCKET_IFNAME=${CHORUS_SOCKET_IFNAME:-lo}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(--layers 2 --width 64 --heads 4 --context 32 --batch 24 --accum 2 --steps "$steps"
      --lr 2e-3 --eps "${EPS:-1e-6}" --dropout 0.1 --clip 1.0 --eval-every 0 --sample-chars 0
      --threads 1 --quiet)
echo "config: ${args[*]}"
"$launcher" -n 1 -- "$train" "${args[@]}" --mode dp --dump-params "$tmp/ref.bin" >/dev/null
printf "%-6s %12s %12s %12s\n" mode "W=2" "W=3" "W=4"
for mode in dp zero1 zero2 zero3; do
  row=$(printf "%-6s" "$mode")
  for w in 2 3 4; do
    "$launcher" -n "$w" -- "$train" "${args[@]}" --mode "$mode" --dump-params "$tmp/x.bin" >/dev/null
    worst=$( ("$compare" "$tmp/ref.bin" "$tmp/x.bin" --tol 1e-5 || true) | sed -E 's/.*= ([^ ]+) \(([^)]*)\).*: (ok|FAIL).*/\1 \3/')
    row+=$(printf " %12s" "${worst% *}$([ "${worst#* }" = ok ] || echo '!')")
  done
  echo "$row"
done
