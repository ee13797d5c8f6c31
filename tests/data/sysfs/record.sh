#!/usr/bin/env bash
# Records what chorus's sysfs topology detector reads (src/topology/detect_sysfs.cc) from this machine
# into a directory tree that tests and `chorus-topo --root DIR` read instead of /sys and /proc:
#
#   tests/data/sysfs/record.sh tests/data/sysfs/<name>
#
# DIR/sys holds the files and symlinks the detector opens, and nothing else: plain files are
# copied, symlinks (bus/pci/devices/*, class/net/*, class/infiniband/*) are recreated with
# relative targets and the directories they point to are created, so the tree can be moved and
# checked in. Files the kernel refuses to read (the speed of a link that is down) are left out,
# which is how the detector sees them too. DIR/proc holds the vendor and model lines of cpuinfo
# and the hostname. SYSFS_ROOT and PROC_ROOT record from another tree instead (for testing this
# script).
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 OUTPUT_DIR" >&2
  exit 2
fi
out=$1
sys=${SYSFS_ROOT:-/sys}
proc=${PROC_ROOT:-/proc}
if [ -e "$out" ]; then
  echo "record.sh: $out exists; remove it first" >&2
  exit 1
fi
mkdir -p "$out/sys" "$out/proc/sys/kernel"
out=$(cd "$out" && pwd)
sys=$(cd "$sys" && pwd -P)

# copy REL: the file $sys/REL, if it is readable, to $out/sys/REL (REL has no symlink in it).
copy() {
  local src="$sys/$1" dst="$out/sys/$1"
  [ -f "$src" ] || return 0
  [ -d "${dst%/*}" ] || mkdir -p "${dst%/*}"
  cat "$src" >"$dst" 2>/dev/null || rm -f "$dst"
}

# link REL: recreates the symlink $sys/REL relative to the tree and prints the real path of its
# target relative to $sys.
link() {
  local target real
  target=$(readlink -f "$sys/$1")
  real=${target#"$sys"/}
  mkdir -p "$out/sys/$real" "$(dirname "$out/sys/$1")"
  ln -s "$(realpath -m --relative-to="$(dirname "$out/sys/$1")" "$out/sys/$real")" "$out/sys/$1"
  echo "$real"
}

# NUMA nodes and CPUs.
for node in "$sys"/devices/system/node/node[0-9]*; do
  [ -d "$node" ] && copy "${node#"$sys"/}/cpulist"
done
copy devices/system/cpu/online
for cpu in "$sys"/devices/system/cpu/cpu[0-9]*; do
  rel=${cpu#"$sys"/}
  copy "$rel/topology/physical_package_id"
  copy "$rel/topology/core_id"
  for index in "$cpu"/cache/index[0-9]*; do
    [ -d "$index" ] || continue
    for f in level type size; do copy "$rel/cache/${index##*/}/$f"; done
  done
done

# PCI functions.
for dev in "$sys"/bus/pci/devices/*; do
  [ -e "$dev" ] || continue
  real=$(link "bus/pci/devices/${dev##*/}")
  for f in class vendor device numa_node local_cpulist current_link_speed current_link_width \
           max_link_speed max_link_width; do
    copy "$real/$f"
  done
done

# Network interfaces.
for dev in "$sys"/class/net/*; do
  [ -e "$dev" ] || continue
  real=$(link "class/net/${dev##*/}")
  for f in type flags speed operstate dev_port; do copy "$real/$f"; done
done

# RDMA devices and their ports.
for dev in "$sys"/class/infiniband/*; do
  [ -e "$dev" ] || continue
  real=$(link "class/infiniband/${dev##*/}")
  for port in "$sys/$real"/ports/[0-9]*; do
    [ -d "$port" ] || continue
    p="$real/ports/${port##*/}"
    for f in state link_layer rate gid_attrs/ndevs/0; do copy "$p/$f"; done
  done
done

# The CPU identity and the host name.
grep -E '^(processor|vendor_id|model name)[[:space:]]*:' "$proc/cpuinfo" \
  | sed -E 's/^processor/\nprocessor/' | sed '1{/^$/d}' >"$out/proc/cpuinfo" || true
cat "$proc/sys/kernel/hostname" >"$out/proc/sys/kernel/hostname"

echo "recorded $(find "$out" -type f | wc -l) files and $(find "$out" -type l | wc -l) links in $out"
