#!/usr/bin/env bash
# Plots loss vs step of several chorus-train --csv logs into one PNG (gnuplot): the training loss
# as lines, the held-out loss as points of the same colour.
#
# usage: examples/train/plot.sh OUT.png LABEL=RUN.csv [LABEL=RUN.csv ...]
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 OUT.png LABEL=RUN.csv [LABEL=RUN.csv ...]" >&2
  exit 2
fi
command -v gnuplot >/dev/null || { echo "$0: gnuplot not found (Debian: gnuplot-nox)" >&2; exit 2; }
out=$1
shift
plots=()
i=1
for spec in "$@"; do
  label=${spec%%=*} file=${spec#*=}
  [ "$label" != "$spec" ] || { echo "$0: '$spec' is not LABEL=FILE" >&2; exit 2; }
  [ -r "$file" ] || { echo "$0: cannot read $file" >&2; exit 2; }
  plots+=("'$file' every ::1 using 1:2 with lines lc $i title '$label'")
  plots+=("'$file' every ::1 using 1:3 with points pt 7 lc $i title '$label held-out'")
  i=$((i + 1))
done
joined=$(printf "%s, " "${plots[@]}")
gnuplot <<EOF
set terminal pngcairo size 900,560
set output '$out'
set datafile separator ','
set xlabel 'step'
set ylabel 'loss (nats per character)'
set grid
plot ${joined%, }
EOF
echo "wrote $out"
