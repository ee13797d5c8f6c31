# shellcheck shell=bash
# shellcheck disable=SC2154  # tool, out, tmp and run_timeout are the caller's (see below)
# Shell functions shared by the comparison scripts (compare.sh, latency.sh); sourced, not run.
#
# The caller sets, before calling them:
#   tool         name in messages ("compare", "latency")
#   out          the results directory; raw.csv is appended there
#   tmp          a private temporary directory
#   run_timeout  seconds one run may take
# raw.csv has one line per table row of every run:
#   system,coll,nranks,rep,size,time_us,busbw_gbps,wrong

fail() {
  echo "$tool: FAILED: $*" >&2
  exit 1
}

has() {  # has WORD LIST...: whether WORD is one of the (space-separated) words
  local w=$1
  shift
  [[ " $* " == *" $w "* ]]
}

# run LOG CMD...: runs CMD bounded by run_timeout with its output in LOG; any failure ends the
# whole comparison, since a table with a silently missing or wrong run would mislead.
run() {
  local log=$1 rc=0
  shift
  timeout --kill-after=10 "$run_timeout" "$@" >"$log" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ]; then
    tail -n 20 "$log" >&2
    [ "$rc" -ne 124 ] || fail "timed out after ${run_timeout}s: $* (log: $log)"
    fail "exit status $rc: $* (log: $log)"
  fi
}

# record SYSTEM COLL N REP LOG: appends LOG's table rows to raw.csv. chorus-perf, mpi_perf and
# gloo_perf print the same columns: size count type redop root time algbw busbw #wrong
# (chorus-perf then adds the in-place half, not used here).
record() {
  local system=$1 coll=$2 n=$3 rep=$4 log=$5
  awk '/^ +[0-9]/ {print $1, $6, $8, $9}' "$log" >"$tmp/rows"
  [ -s "$tmp/rows" ] || fail "no result rows in $log"
  if awk '$4 != "0" {bad = 1} END {exit !bad}' "$tmp/rows"; then
    fail "wrong results (#wrong column, or unchecked N/A) in $log:" \
      "$(awk '$4 != "0" {printf " %s B: %s;", $1, $4}' "$tmp/rows")"
  fi
  awk -v s="$system" -v c="$coll" -v n="$n" -v r="$rep" \
    '{printf "%s,%s,%s,%s,%s,%s,%s,%s\n", s, c, n, r, $1, $2, $3, $4}' "$tmp/rows" >>"$out/raw.csv"
}
