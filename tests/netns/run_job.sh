#!/usr/bin/env bash
# run_job.sh: runs one chorus job across several network-namespace hosts (hosts.sh).
#
#   run_job.sh --hosts 2,1,3 [--rate 1gbit] [--timeout S] [--env K=V]... [--build DIR]
#              [--chorus-run PATH] [--port P] [--prefix NAME] [--kill-grace S] [--fail-grace S]
#              -- prog args...
#
# Brings up one host per entry of --hosts and starts, on every host at once,
#   chorus-run -n R_h --rank-offset O_h --world-size N --job-secret S --root-host <host 0> --port P -- prog args...
# so that global ranks are contiguous per host (host h holds ranks off_h .. off_h + R_h - 1).
# Every rank sees CHORUS_ROOT=<host 0>:P, CHORUS_RANK, CHORUS_NRANKS (the whole job),
# CHORUS_LOCAL_RANK/NRANKS (its host), one CHORUS_JOB_SECRET for the job,
# CHORUS_SOCKET_IFNAME==veth<h> (its host's only link), and for test programs
# CHORUS_NETNS_HOSTS (the --hosts list), CHORUS_NETNS_HOST (h) and CHORUS_NETNS_SCRATCH (a
# directory every host sees, part of the test bed, so removed with it); then --env settings,
# which win.
#
# Output: every line is prefixed with "[h<host>] " (chorus-run adds "[<local rank>] "); stdout
# and stderr stay apart. When a host's chorus-run fails, the other hosts get --fail-grace
# seconds (default 10) to notice by themselves (their ranks should fail with chorusRemoteError
# within about a second) before they are killed. --timeout (default 120) kills everything.
# Killing is SIGTERM to every process of the test bed, SIGKILL after --kill-grace seconds
# (default 2, also chorus-run's own grace between its ranks' SIGTERM and SIGKILL).
#
# Exit status: 0 when every host's chorus-run exits 0; 124 on timeout; otherwise the status of
# the first host that failed; 77 when the test bed cannot be made (not root, no ip netns);
# 130/143/129 when interrupted. Everything is torn down in every case (an EXIT trap); after a
# SIGKILL of this script, the next hosts.sh up removes the leftovers.
#
# chorus-run is taken from --chorus-run, else <--build or $CHORUS_BUILD>/tools/chorus-run/.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly HOSTS_SH=$here/hosts.sh
me=run_job.sh

say() { echo "$me: $*" >&2 || true; }
die() { say "$*"; exit 2; }
usage() { sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
now() { echo "$EPOCHREALTIME"; }
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
is_number() { [[ $1 =~ ^[0-9]+(\.[0-9]+)?$ ]]; }

hosts_spec="" rate="" timeout=120 build=${CHORUS_BUILD:-} chorus_run="" port=29500
prefix="" kill_grace=2 fail_grace=10
user_env=()
while (($#)); do
  case $1 in
    --hosts) hosts_spec=${2:?--hosts needs a list}; shift 2 ;;
    --rate) rate=${2:?--rate needs a value}; shift 2 ;;
    --timeout) timeout=${2:?--timeout needs seconds}; shift 2 ;;
    --env) [[ ${2:-} == *=* ]] || die "--env needs K=V"; user_env+=("$2"); shift 2 ;;
    --build) build=${2:?--build needs a directory}; shift 2 ;;
    --chorus-run) chorus_run=${2:?--chorus-run needs a path}; shift 2 ;;
    --port) port=${2:?--port needs a number}; shift 2 ;;
    --prefix) prefix=${2:?--prefix needs a name}; shift 2 ;;
    --kill-grace) kill_grace=${2:?--kill-grace needs seconds}; shift 2 ;;
    --fail-grace) fail_grace=${2:?--fail-grace needs seconds}; shift 2 ;;
    --) shift; break ;;
    -h | --help) usage ;;
    *) die "unknown argument '$1' (the program follows --)" ;;
  esac
done
(($#)) || usage
prog=("$@")
[[ $hosts_spec =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || die "--hosts '$hosts_spec' is not like 2,1,3"
for v in "$timeout" "$kill_grace" "$fail_grace"; do
  is_number "$v" || die "'$v' is not a number of seconds"
done
if ! [[ $port =~ ^[0-9]+$ ]] || ((port < 1 || port > 65535)); then
  die "--port '$port' is not a port"
fi
if [[ -z $chorus_run ]]; then
  [[ -n $build ]] || die "no chorus-run: give --build DIR, --chorus-run PATH or set CHORUS_BUILD"
  chorus_run=$build/tools/chorus-run/chorus-run
fi
[[ -x $chorus_run ]] || die "chorus-run not found at $chorus_run"
chorus_run=$(realpath "$chorus_run")
prefix=${prefix:-cj$$}

IFS=, read -r -a per_host <<<"$hosts_spec"
nhosts=${#per_host[@]}
nranks=0
offset=()
for n in "${per_host[@]}"; do offset+=("$nranks"); nranks=$((nranks + n)); done

# The host identity must come from each namespace's hostname (see hosts.sh).
unset CHORUS_HOST_ID

# ---- teardown, whatever happens -------------------------------------------------------------

bed_up="" watchdog="" grace_timer="" cleaned=""
declare -A host_of=()  # live host job pid -> host index

# shellcheck disable=SC2317  # reached through the EXIT trap
cleanup() {
  local rc=$? i
  [[ -n $cleaned ]] && return
  cleaned=1
  trap '' INT TERM HUP PIPE
  for i in $watchdog $grace_timer; do kill "$i" 2>/dev/null || true; done
  if [[ -n $bed_up ]]; then
    if [[ -n $("$HOSTS_SH" pids --prefix "$prefix" 2>/dev/null) ]]; then
      "$HOSTS_SH" kill --prefix "$prefix" TERM 2>/dev/null || true
      for ((i = 0; i < 10; i++)); do
        [[ -z $("$HOSTS_SH" pids --prefix "$prefix" 2>/dev/null) ]] && break
        sleep "$(awk -v g="$kill_grace" 'BEGIN { print (g + 1) / 10 }')"
      done
    fi
    "$HOSTS_SH" down --prefix "$prefix" || true
  fi
  # The host jobs end once their processes are gone and their output is flushed.
  wait 2>/dev/null || true
  exit "$rc"
}
# SIGPIPE is ignored from the first signal on: a Ctrl-C may take down whoever reads our output
# before we are done, and a write to that pipe must not end the teardown half way.
trap cleanup EXIT
trap 'trap "" PIPE; say "interrupted (SIGINT); tearing down"; exit 130' INT
trap 'trap "" PIPE; say "terminated (SIGTERM); tearing down"; exit 143' TERM
trap 'trap "" PIPE; say "hung up (SIGHUP); tearing down"; exit 129' HUP
trap 'trap "" PIPE; exit 141' PIPE

# ---- hosts ----------------------------------------------------------------------------------

t0=$(now)
bed_up=1
up_rc=0
"$HOSTS_SH" up "$nhosts" --prefix "$prefix" --owner $$ ${rate:+--rate "$rate"} >/dev/null ||
  up_rc=$?
((up_rc == 0)) || exit "$up_rc"  # 77: skipped, with hosts.sh's message

addr=() ifname=()
while read -r i _ _ a dev; do
  addr[i]=$a
  ifname[i]=$dev
done < <("$HOSTS_SH" info --prefix "$prefix")
root="${addr[0]}:$port"
secret=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
scratch=$("$HOSTS_SH" shared --prefix "$prefix")
say "$nranks ranks on $nhosts hosts ($hosts_spec) of test bed $prefix" \
  "(up in $(since "$t0") s), root $root${rate:+, links $rate}"

# ---- the job --------------------------------------------------------------------------------

# chorus-run's own timeout is the backstop for when this script is killed without its trap.
backstop=$(awk -v t="$timeout" 'BEGIN { printf "%d", t + 30 }')
t1=$(now)
for ((h = 0; h < nhosts; h++)); do
  (
    set -o pipefail
    {
      env CHORUS_NETNS_HOSTS="$hosts_spec" CHORUS_NETNS_HOST="$h" \
        CHORUS_NETNS_SCRATCH="$scratch" CHORUS_NETNS_PREFIX="$prefix" \
        CHORUS_SOCKET_IFNAME="=${ifname[h]}" \
        "${user_env[@]}" \
        "$HOSTS_SH" run --prefix "$prefix" "$h" \
        "$chorus_run" -n "${per_host[h]}" --rank-offset "${offset[h]}" --world-size "$nranks" \
        --job-secret "$secret" --root-host "${addr[0]}" --port "$port" \
        --timeout "$backstop" --kill-grace "$kill_grace" -- "${prog[@]}" \
        2>&1 1>&3 3>&- | sed -u "s/^/[h$h] /" >&2
    } 3>&1 | sed -u "s/^/[h$h] /"
  ) &
  host_of[$!]=$h
done

# The timers sleep inside host 0, so that they go with the test bed even when this script is
# killed without its trap.
timer() { exec "$HOSTS_SH" run --prefix "$prefix" 0 sleep "$1"; }
timer "$timeout" &
watchdog=$!
declare -A rc_of=()
first_failed="" timed_out="" gave_up=""
while ((${#host_of[@]})); do
  done_pid="" rc=0
  wait -n -p done_pid "${!host_of[@]}" "$watchdog" $grace_timer || rc=$?
  [[ -n $done_pid ]] || continue
  if [[ $done_pid == "$watchdog" ]]; then
    timed_out=1
    break
  fi
  if [[ $done_pid == "$grace_timer" ]]; then
    gave_up=1
    break
  fi
  h=${host_of[$done_pid]}
  unset "host_of[$done_pid]"
  rc_of[$h]=$rc
  say "host $h (ranks ${offset[h]}..$((offset[h] + per_host[h] - 1))): chorus-run exited" \
    "$rc after $(since "$t1") s"
  if ((rc != 0)) && [[ -z $first_failed ]]; then
    first_failed=$h
    if ((${#host_of[@]})); then
      timer "$fail_grace" &
      grace_timer=$!
    fi
  fi
done

if [[ -n $timed_out || -n $gave_up ]]; then
  still=$(for p in "${!host_of[@]}"; do echo "${host_of[$p]}"; done | sort -n | paste -sd, -)
  if [[ -n $timed_out ]]; then
    say "timeout after $timeout s; hosts $still still running; killing the job"
  else
    say "hosts $still still running $fail_grace s after host $first_failed failed;" \
      "killing them"
  fi
fi
if [[ -n $timed_out ]]; then
  exit 124
elif [[ -n $first_failed ]]; then
  exit "${rc_of[$first_failed]}"
fi
say "every host succeeded in $(since "$t1") s"
exit 0
