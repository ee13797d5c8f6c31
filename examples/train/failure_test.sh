#!/usr/bin/env bash
# ctest train.kill_and_resume: a rank killed mid-step ends every other rank with a clear error
# within seconds, and the last checkpoint resumes.
#
# Three ranks are started as separate processes with torchrun-style variables (no launcher
# that would end the others for them: they must notice the death through chorus). Once a
# checkpoint exists and a few more steps have run, rank 1 gets SIGKILL. Every survivor must
# exit non-zero within $DEADLINE s with an error line naming its rank and the dead peer. Then a
# 3-rank run resumes from the newest checkpoint (under chorus-run) and must reproduce the losses
# the killed run printed for the steps after that checkpoint, exactly (the resume is
# deterministic), and go on to finish.
#
# usage: failure_test.sh CHORUS_TRAIN CHORUS_RUN [MODE]
set -euo pipefail
train=$1 launcher=$2 mode=${3:-zero3}
export CHORUS_SOCKET_IFNAME=${CHORUS_SOCKET_IFNAME:-lo}
DEADLINE=${DEADLINE:-10}
tmp=$(mktemp -d)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$tmp"/rank*.err; do echo "--- $f"; cat "$f"; done; exit 1; }
now() { date +%s.%N; }

common=(--layers 2 --width 32 --heads 2 --context 16 --batch 12 --lr 3e-3 --dropout 0.1
        --eval-every 0 --sample-chars 0 --threads 1 --mode "$mode" --save-every 3
        --save-dir "$tmp/ck" --timeout 30)
port=$((20000 + RANDOM % 20000))
for r in 0 1 2; do
  MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r WORLD_SIZE=3 \
    "$train" "${common[@]}" --steps 100000 --csv "$tmp/killed.csv" \
    >"$tmp/rank$r.out" 2>"$tmp/rank$r.err" &
  pids+=($!)
done

# Wait for the step-6 checkpoint and one more step (so the kill falls between checkpoints,
# in the middle of some step: every step is communication from start to end).
t0=$(now)
steps_done() { awk -F, 'NR > 1 { n = $1 } END { print n + 0 }' "$tmp/killed.csv" 2>/dev/null; }
until [ -f "$tmp/ck/step-6/manifest.json" ] && [ "$(steps_done)" -ge 7 ]; do
  for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || fail "a rank exited before the kill"; done
  if awk -v a="$t0" -v b="$(now)" 'BEGIN { exit !(b - a > 90) }'; then
    fail "no step-6 checkpoint after 90 s"
  fi
  sleep 0.05
done
killed_at=$(now)
kill -KILL "${pids[1]}"
echo "killed rank 1 (pid ${pids[1]}) after step $(awk -F, 'NR > 1 { n = $1 } END { print n }' \
  "$tmp/killed.csv")"

# Each survivor must exit by itself, non-zero, within the deadline.
for r in 0 2; do
  rc=0
  while kill -0 "${pids[r]}" 2>/dev/null; do
    if awk -v a="$killed_at" -v b="$(now)" -v d="$DEADLINE" 'BEGIN { exit !(b - a > d) }'; then
      fail "rank $r still running $DEADLINE s after rank 1 was killed"
    fi
    sleep 0.02
  done
  took=$(awk -v a="$killed_at" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')
  wait "${pids[r]}" || rc=$?
  [ "$rc" -ne 0 ] || fail "rank $r exited 0 after its peer died"
  msg=$(grep -m1 "chorus-train: error: rank $r:" "$tmp/rank$r.err" || true)
  [ -n "$msg" ] || fail "rank $r: no 'chorus-train: error: rank $r:' line"
  echo "$msg" | grep -Eq "rank 1 .*(died|dead)|remote error|connection" ||
    fail "rank $r: the error does not say a peer failed: $msg"
  echo "ok   rank $r exited $rc after ${took} s: ${msg:0:300}"
done
wait "${pids[1]}" 2>/dev/null || true
pids=()

# Resume from the newest complete checkpoint (a manifest is written last) before the last step
# the killed run finished, so that there are losses to compare.
done_steps=$(awk -F, 'NR > 1 { n = $1 } END { print n }' "$tmp/killed.csv")
last=$(ls -d "$tmp"/ck/step-*/manifest.json | sed 's|.*/step-\([0-9]*\)/manifest.json|\1|' |
       sort -n | awk -v d="$done_steps" '$1 < d' | tail -1)
until_step=$((done_steps + 2))
"$launcher" -n 3 --timeout 90 -- "$train" "${common[@]}" --resume "$tmp/ck/step-$last" \
  --steps "$until_step" --csv "$tmp/resumed.csv" --quiet >"$tmp/resume.log" 2>&1 ||
  { cat "$tmp/resume.log"; fail "the resume from step $last failed"; }
grep -q "resumed from .*step-$last at step $last" "$tmp/resume.log" ||
  { cat "$tmp/resume.log"; fail "no 'resumed from' line"; }
want=$(awk -F, -v s="$last" 'NR > 1 && $1 > s { print $1, $2 }' "$tmp/killed.csv")
got=$(awk -F, -v e="$done_steps" 'NR > 1 && $1 <= e { print $1, $2 }' "$tmp/resumed.csv")
[ -n "$want" ] && [ "$want" = "$got" ] ||
  fail "resumed losses differ: killed run [$(echo $want)] resumed [$(echo $got)]"
n=$(awk -F, 'NR > 1 { n = $1 } END { print n }' "$tmp/resumed.csv")
[ "$n" -eq "$until_step" ] || fail "the resumed run ended at step $n, not $until_step"
echo "ok   resumed from step $last on 3 ranks: losses of steps $((last + 1))-$done_steps" \
  "identical to the killed run's, then ran to step $until_step"
echo "failure_test: all passed"
