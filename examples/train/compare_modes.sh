#!/usr/bin/env bash
# Runs chorus-train once per mode on N ranks with the same arguments and prints, per mode, the
# median step time split into compute and exposed communication, tokens/s, and the held-out
# losses of the run (from each run's --csv).
#
# usage: examples/train/compare_modes.sh BUILD_DIR NRANKS "MODES" [chorus-train args...]
#   e.g. examples/train/compare_modes.sh build 2 "dp zero1 zero2 zero3 zeropp" --steps 30
#   a mode may carry flags: "zeropp:--error-feedback"
set -euo pipefail
build=$1 n=$2 modes=$3
shift 3
export CHORUS_SOCKET_IFNAME=${CHORUS_SOCKET_IFNAME:-lo}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "chorus-run -n $n chorus-train $* --mode MODE"
printf "%-26s %9s %11s %9s %9s  %s\n" mode "step ms" "compute ms" "comm ms" "tok/s" \
  "held-out loss (step:loss)"
for spec in $modes; do
  mode=${spec%%:*} extra=""
  [ "$spec" != "$mode" ] && extra=${spec#*:}
  # shellcheck disable=SC2086
  "$build/tools/chorus-run/chorus-run" -n "$n" -- "$build/examples/train/chorus-train" "$@" \
    --mode "$mode" $extra --csv "$tmp/run.csv" --sample-chars 0 --quiet >"$tmp/log" 2>&1 ||
    { echo "$spec failed:"; cat "$tmp/log"; exit 1; }
  python3 - "$tmp/run.csv" "$spec" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
timed = rows[2:] if len(rows) > 4 else rows   # the first steps warm up allocators and plans
med = lambda k: statistics.median(float(r[k]) for r in timed)
held = " ".join(f"{r['step']}:{float(r['heldout_loss']):.4f}" for r in rows if r['heldout_loss'])
print(f"{sys.argv[2].replace(':', ' '):<26} {med('step_ms'):9.1f} {med('compute_ms'):11.1f} "
      f"{med('comm_ms'):9.1f} {med('tokens_per_s'):9.0f}  first loss {float(rows[0]['loss']):.4f}; {held}")
EOF
done
