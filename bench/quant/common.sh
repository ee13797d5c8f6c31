# Shared start of the bench/quant scripts (sourced). quant_setup WHAT TOOL "$@" prints the
# script's header as usage when no build directory is given, and sets
#   build  the build directory (absolute)
#   out    the output directory: $2, or a fresh /tmp/quant_WHAT.XXXXXX (absolute)
#   run    chorus-run;  tool  TOOL under the build directory (quant_probe or chorus-perf)
# after checking that both are built. WHAT names the script in messages.
quant_setup() {
  local what=$1 rel=$2
  shift 2
  [ $# -ge 1 ] || { awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0"; exit 2; }
  build=$(cd "$1" && pwd)
  out=${2:-$(mktemp -d "/tmp/quant_$what.XXXXXX")}
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  run=$build/tools/chorus-run/chorus-run
  tool=$build/$rel
  local f
  for f in "$run" "$tool"; do
    [ -x "$f" ] || {
      echo "$what: $f not built (ninja -C $build chorus-run $(basename "$rel"))" >&2
      exit 1
    }
  done
}
