#!/usr/bin/env bash
# hosts.sh: several "hosts" on one machine, each a network namespace with a UTS namespace of its
# own, joined by a bridge that lives in a namespace of its own as well.
#
#   hosts.sh up K [--rate 1gbit] [--prefix NAME] [--owner PID]   prints the prefix (NAME)
#   hosts.sh info [--prefix NAME]      one line per host: index netns hostname address ifname
#   hosts.sh run [--prefix NAME] HOST cmd args...     runs cmd inside host HOST (0-based)
#   hosts.sh kill [--prefix NAME] [SIGNAL]     signals every process inside the test bed
#   hosts.sh pids [--prefix NAME]      the processes inside the test bed, one pid a line
#   hosts.sh shared [--prefix NAME]    a directory every host sees, removed with the test bed
#   hosts.sh down [--prefix NAME]      kills what still runs inside, removes everything
#   hosts.sh gc                        removes the test beds whose owner process has gone
#   hosts.sh list                      the test beds that exist, with their owners
# --prefix defaults to $CHORUS_NETNS_PREFIX (every command but up).
#
# Layout of test bed P with K hosts (nothing of it is visible from the root namespace but the
# names under /run/netns and the state under /run/chorus-netns/P):
#
#   netns P-br   lo, bridge br0, ports port0..port{K-1}
#   netns P-h<i> lo, veth<i> = 10.213.<S>.<i+1>/24 (peer of port<i>); UTS namespace with
#                hostname P-h<i>, kept alive by a bind mount on /run/chorus-netns/P/h<i>.uts
#
# S is reserved per test bed under /run/chorus-netns/subnets/, so concurrent test beds use
# different subnets (they could not reach each other anyway: each has its own bridge).
# With --rate, a tbf qdisc limits both directions of every host's link: veth<i> (what the host
# sends) and port<i> (what it receives).
#
# Why a UTS namespace: chorus tells hosts apart by boot id + hostname, so each namespace needs a
# hostname of its own for its ranks to count as another host (shm inside, TCP across). `ip netns
# exec` does not create one, so commands run as
#   nsenter --uts=/run/chorus-netns/P/h<i>.uts -- ip netns exec P-h<i> cmd...
# (ip netns exec also remounts /sys in a private mount namespace, so /sys/class/net shows the
# host's own interfaces to topology detection). Needs root, iproute2, util-linux (unshare,
# nsenter); tc for --rate. Without them (or when `ip netns add` is refused, as in an
# unprivileged container) every command that would create something exits 77.
#
# Names carry the prefix (default "cn<pid>"); `up` records its owner (--owner, default the
# calling process) and `gc`, which `up` runs first, removes test beds whose owner has died
# without tearing down (SIGKILL). `up` tears down what it created when it fails or is
# interrupted; afterwards tearing down is the caller's job (`down` in a trap: see run_job.sh).
set -euo pipefail

readonly STATE_ROOT=/run/chorus-netns
readonly SKIP=77
me=${0##*/}

# Messages never stop a teardown: when whoever read our stderr is gone (a Ctrl-C took the test
# driver down first), run_job.sh ignores SIGPIPE and a failed write must not trip set -e.
say() { echo "$me: $*" >&2 || true; }
die() { say "$*"; exit 1; }
skip() { say "skipped: needs root and ip netns ($*)"; exit "$SKIP"; }
usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

# ---- names and state ------------------------------------------------------------------------

bed_dir() { echo "$STATE_ROOT/$1"; }
host_ns() { echo "$1-h$2"; }
bridge_ns() { echo "$1-br"; }

check_prefix() {
  [[ $1 =~ ^[a-z][a-z0-9]{0,11}$ ]] ||
    die "prefix '$1' must be a lowercase letter, then at most 11 lowercase letters or digits"
}

# "pid starttime" of a process: a pid alone could be reused by an unrelated process.
proc_identity() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }  # the command name may contain spaces; fields after it are fixed
  echo "$1 $(echo "$stat" | awk '{print $20}')"
}

owner_alive() {
  local owner now
  owner=$(cat "$(bed_dir "$1")/owner" 2>/dev/null) || return 1
  now=$(proc_identity "${owner%% *}") || return 1
  [[ $now == "$owner" ]]
}

ns_exists() { [[ -e /run/netns/$1 ]]; }

# Every namespace of a test bed that exists, hosts first.
bed_namespaces() {
  local p=$1 k i
  k=$(cat "$(bed_dir "$p")/hosts" 2>/dev/null || echo 0)
  for ((i = 0; i < k; i++)); do ns_exists "$(host_ns "$p" "$i")" && host_ns "$p" "$i"; done
  ns_exists "$(bridge_ns "$p")" && bridge_ns "$p"
  return 0
}

bed_pids() {
  local ns
  for ns in $(bed_namespaces "$1"); do ip netns pids "$ns" 2>/dev/null || true; done
}

require_bed() {
  [[ -n ${prefix:-} ]] || die "no test bed named: give --prefix or set CHORUS_NETNS_PREFIX"
  check_prefix "$prefix"
  [[ -f $(bed_dir "$prefix")/hosts ]] || die "no test bed '$prefix' (see '$me list')"
}

# ---- teardown -------------------------------------------------------------------------------

# Signals every process in the test bed's namespaces (they were all started through `run`).
signal_bed() {
  local p=$1 sig=$2 pid
  for pid in $(bed_pids "$p"); do kill "-$sig" "$pid" 2>/dev/null || true; done
}

teardown() {
  local p=$1 dir ns f i
  dir=$(bed_dir "$p")
  # A namespace whose processes live on outlives `ip netns del` (unnamed, with its veth), so
  # its processes go first.
  signal_bed "$p" KILL
  for ((i = 0; i < 50; i++)); do
    [[ -z $(bed_pids "$p") ]] && break
    sleep 0.05
  done
  [[ -z $(bed_pids "$p") ]] || say "processes of test bed $p survive SIGKILL"
  for ns in $(bed_namespaces "$p"); do
    ip netns del "$ns" 2>/dev/null || say "ip netns del $ns failed"
  done
  if [[ -d $dir ]]; then
    for f in "$dir"/*.uts; do
      [[ -e $f ]] || continue
      umount "$f" 2>/dev/null || true
    done
    if [[ -f $dir/subnet ]]; then rm -rf "$STATE_ROOT/subnets/$(cat "$dir/subnet")"; fi
    rm -rf "$dir"
  fi
}

gc() {
  local dir p
  [[ -d $STATE_ROOT ]] || return 0
  for dir in "$STATE_ROOT"/*/; do
    p=$(basename "$dir")
    [[ $p == subnets || ! -f $dir/owner ]] && continue
    if ! owner_alive "$p"; then
      say "removing test bed $p left by a dead owner ($(cat "$dir/owner"))"
      teardown "$p"
    fi
  done
}

# ---- up -------------------------------------------------------------------------------------

# tc rate ("1gbit", "100mbit", "2.5gbit") -> bytes per second.
rate_bytes() {
  [[ $1 =~ ^([0-9]+(\.[0-9]+)?)(bit|kbit|mbit|gbit|tbit)$ ]] ||
    die "rate '$1' is not a number followed by bit, kbit, mbit, gbit or tbit"
  local scale
  case ${BASH_REMATCH[3]} in
    bit) scale=1 ;; kbit) scale=1e3 ;; mbit) scale=1e6 ;; gbit) scale=1e9 ;; tbit) scale=1e12 ;;
  esac
  awk -v n="${BASH_REMATCH[1]}" -v s="$scale" 'BEGIN { printf "%.0f\n", n * s / 8 }'
}

# tbf on one end of a link. The bucket holds 4 ms of traffic (at least 64 KiB, so a full-size
# GSO packet of the veth fits), and a packet waits at most 20 ms in the queue.
limit_link() {
  local ns=$1 dev=$2 rate=$3 bytes=$4 burst
  burst=$((bytes / 250))
  ((burst < 65536)) && burst=65536
  ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate "$rate" burst "$burst" latency 20ms
}

reserve_subnet() {
  local p=$1 start id i
  mkdir -p "$STATE_ROOT/subnets"
  start=$(($$ % 254))
  for ((i = 0; i < 254; i++)); do
    id=$(((start + i) % 254 + 1))
    if mkdir "$STATE_ROOT/subnets/$id" 2>/dev/null; then
      echo "$p" >"$STATE_ROOT/subnets/$id/bed"
      echo "$id" >"$(bed_dir "$p")/subnet"
      return 0
    fi
  done
  die "all 254 subnets 10.213.<1..254>.0/24 are in use by other test beds"
}

up_done=""
on_up_exit() {
  local rc=$?
  if [[ -z $up_done && -n ${prefix:-} && -d $(bed_dir "$prefix") ]]; then
    say "up failed or was interrupted; tearing down $prefix"
    teardown "$prefix"
  fi
  exit "$rc"
}

cmd_up() {
  local k="" rate="" owner=$PPID
  while (($#)); do
    case $1 in
      --rate) rate=${2:?--rate needs a value}; shift 2 ;;
      --prefix) prefix=${2:?--prefix needs a value}; shift 2 ;;
      --owner) owner=${2:?--owner needs a pid}; shift 2 ;;
      -*) die "up: unknown option $1" ;;
      *) [[ -z $k ]] || die "up: one host count only"; k=$1; shift ;;
    esac
  done
  if ! [[ $k =~ ^[1-9][0-9]*$ ]] || ((k > 200)); then die "up: host count '$k' is not in 1..200"; fi
  prefix=${prefix:-cn$$}
  check_prefix "$prefix"
  local bytes=""
  [[ -n $rate ]] && bytes=$(rate_bytes "$rate")

  ((EUID == 0)) || skip "running as uid $EUID"
  local tool
  for tool in ip nsenter unshare ${rate:+tc}; do
    command -v "$tool" >/dev/null || skip "$tool not found"
  done
  local ownerId
  ownerId=$(proc_identity "$owner") || die "up: owner pid $owner does not exist"

  mkdir -p "$STATE_ROOT"
  gc
  local dir br
  dir=$(bed_dir "$prefix")
  mkdir "$dir" 2>/dev/null || die "up: test bed '$prefix' exists already"
  trap on_up_exit EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  trap 'exit 129' HUP
  # Written whole or not at all: a concurrent gc must never read a half-written owner.
  echo "$ownerId" >"$dir/owner.tmp"
  mv "$dir/owner.tmp" "$dir/owner"
  echo "$k" >"$dir/hosts"
  mkdir -m 0700 "$dir/shared"
  echo "$rate" >"$dir/rate"
  reserve_subnet "$prefix"
  local subnet
  subnet=$(cat "$dir/subnet")

  br=$(bridge_ns "$prefix")
  local err
  if ! err=$(ip netns add "$br" 2>&1); then
    teardown "$prefix"
    up_done=1
    skip "ip netns add: $err"
  fi
  ip -n "$br" link set lo up
  ip -n "$br" link add br0 type bridge
  ip -n "$br" link set br0 up

  local i ns
  for ((i = 0; i < k; i++)); do
    ns=$(host_ns "$prefix" "$i")
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    # Created inside the bridge namespace with its peer moved straight into the host: neither
    # end ever exists in the root namespace.
    ip -n "$br" link add "port$i" type veth peer name "veth$i" netns "$ns"
    ip -n "$br" link set "port$i" master br0
    ip -n "$br" link set "port$i" up
    ip -n "$ns" addr add "10.213.$subnet.$((i + 1))/24" dev "veth$i"
    ip -n "$ns" link set "veth$i" up
    touch "$dir/h$i.uts"
    unshare --uts="$dir/h$i.uts" hostname "$ns"
    if [[ -n $rate ]]; then
      limit_link "$ns" "veth$i" "$rate" "$bytes"
      limit_link "$br" "port$i" "$rate" "$bytes"
    fi
  done
  up_done=1
  trap - EXIT INT TERM HUP
  say "test bed $prefix: $k hosts on 10.213.$subnet.0/24${rate:+, links limited to $rate}"
  echo "$prefix"
}

# ---- the other commands ---------------------------------------------------------------------

cmd_info() {
  require_bed
  local dir k subnet i
  dir=$(bed_dir "$prefix")
  k=$(cat "$dir/hosts")
  subnet=$(cat "$dir/subnet")
  for ((i = 0; i < k; i++)); do
    echo "$i $(host_ns "$prefix" "$i") $(host_ns "$prefix" "$i") 10.213.$subnet.$((i + 1)) veth$i"
  done
}

cmd_run() {
  (($# >= 2)) || die "run: needs HOST and a command"
  require_bed
  local h=$1 dir
  shift
  dir=$(bed_dir "$prefix")
  if ! [[ $h =~ ^[0-9]+$ ]] || ((h >= $(cat "$dir/hosts"))); then
    die "run: no host '$h' in $prefix"
  fi
  # Both nsenter (without --fork) and ip netns exec replace themselves with the command, so
  # the caller's pid becomes the command's pid.
  exec nsenter --uts="$dir/h$h.uts" -- ip netns exec "$(host_ns "$prefix" "$h")" "$@"
}

cmd_kill() {
  require_bed
  signal_bed "$prefix" "${1:-TERM}"
}

cmd_shared() {
  require_bed
  echo "$(bed_dir "$prefix")/shared"
}

cmd_pids() {
  require_bed
  bed_pids "$prefix"
}

cmd_down() {
  [[ -n ${prefix:-} ]] || die "down: give --prefix or set CHORUS_NETNS_PREFIX"
  check_prefix "$prefix"
  # up makes the state directory first and teardown removes it last: without it there is
  # nothing to remove (and a caller's trap may call down after up was skipped).
  [[ -d $(bed_dir "$prefix") ]] || return 0
  ((EUID == 0)) || skip "running as uid $EUID"
  teardown "$prefix"
}

cmd_list() {
  local dir p
  [[ -d $STATE_ROOT ]] || return 0
  for dir in "$STATE_ROOT"/*/; do
    p=$(basename "$dir")
    [[ $p == subnets || ! -f $dir/owner ]] && continue
    echo "$p hosts=$(cat "$dir/hosts") subnet=10.213.$(cat "$dir/subnet" 2>/dev/null).0/24" \
      "owner=$(cut -d' ' -f1 "$dir/owner")$(owner_alive "$p" || echo ' (gone)')"
  done
}

main() {
  (($#)) || usage
  local cmd=$1
  shift
  prefix=${CHORUS_NETNS_PREFIX:-}
  if [[ $cmd != up ]]; then
    while (($#)) && [[ $1 == --prefix ]]; do
      prefix=${2:?--prefix needs a value}
      shift 2
    done
  fi
  case $cmd in
    up) prefix=""; cmd_up "$@" ;;
    info) cmd_info ;;
    run) cmd_run "$@" ;;
    kill) cmd_kill "$@" ;;
    pids) cmd_pids ;;
    shared) cmd_shared ;;
    down) cmd_down ;;
    gc) ((EUID == 0)) || skip "running as uid $EUID"; gc ;;
    list) cmd_list ;;
    -h | --help | help) usage ;;
    *) say "unknown command '$cmd'"; usage ;;
  esac
}

main "$@"
