#!/usr/bin/env bash
# Fails when libchorus.so stops exporting a symbol of a released ABI.
#
#   scripts/check_abi.sh LIB LIST             check: every symbol in LIST is exported by LIB
#   scripts/check_abi.sh --update LIB LIST    add LIB's exported symbols to LIST (never removes)
#
# LIB is a built shared library (build/libchorus.so); LIST is the committed symbol list
# (cmake/chorus.abi): one symbol per line, sorted, '#' comments and blank lines ignored.
# "Exported" means a defined symbol of the dynamic symbol table (nm -D --defined-only), with
# any version suffix (@VER, @@VER) dropped.
#
# The exported set must be a superset of LIST: a symbol missing from LIB fails the check (exit
# 1) and is named, since programs linked against an earlier release would no longer load.
# Symbols LIB exports beyond LIST are only reported; --update records them. Nothing here ever
# removes an entry: removing one is an ABI break and a decision for a major version, made by
# editing LIST by hand. Exit status 2: bad usage or unreadable input.
set -euo pipefail

usage() {
  echo "usage: $0 [--update] LIB LIST" >&2
  exit 2
}
die() {
  echo "check_abi: $*" >&2
  exit 2
}

update=0
if [ "${1:-}" = --update ]; then
  update=1
  shift
fi
[ $# -eq 2 ] || usage
lib=$1
list=$2

[ -f "$lib" ] || die "$lib: no such library (build it first: cmake --build build --target chorus)"
command -v nm >/dev/null || die "nm not found (binutils)"

# The exported symbols, one per line, sorted bytewise so the order does not depend on the locale.
exported() {
  local out
  out=$(nm -D --defined-only "$lib") || die "nm -D --defined-only $lib failed"
  # nm prints "address type name" (no address for absolute or weak-undefined entries): the name
  # is the last field.
  awk 'NF >= 2 { name = $NF; sub(/@.*/, "", name); print name }' <<<"$out" | LC_ALL=C sort -u
}
# The symbols LIST records.
listed() {
  { grep -v -E '^[[:space:]]*(#|$)' "$list" || true; } |
    sed -E 's/^[[:space:]]+//; s/[[:space:]]+$//' | LC_ALL=C sort -u
}
# Lines in a newline-separated list held in a variable (0 for the empty string).
count() {
  if [ -z "$1" ]; then echo 0; else printf '%s\n' "$1" | wc -l; fi
}

have=$(exported)
[ -n "$have" ] || die "$lib exports no symbols: not a shared library, or stripped of .dynsym?"

if [ "$update" = 1 ]; then
  old=""
  [ -f "$list" ] && old=$(listed)
  tmp=$(mktemp)
  trap 'rm -f "$tmp"' EXIT
  {
    echo "# The exported dynamic symbols of libchorus.so: the ABI every release keeps."
    echo "# tests/CMakeLists.txt (ctest -L abi) fails when the built library lacks any of them:"
    echo "#   scripts/check_abi.sh build/libchorus.so cmake/chorus.abi"
    echo "# Entries are only ever added. After adding a public function, record it with"
    echo "#   scripts/check_abi.sh --update build/libchorus.so cmake/chorus.abi"
    echo "# which adds what the library exports and removes nothing. Removing an entry breaks"
    echo "# programs linked against an earlier release: a major-version decision, made by hand."
    printf '%s\n%s\n' "$old" "$have" | grep -v '^$' | LC_ALL=C sort -u
  } >"$tmp"
  added=$(LC_ALL=C comm -13 <(printf '%s\n' "$old") <(printf '%s\n' "$have") | grep -v '^$' || true)
  mv "$tmp" "$list"
  trap - EXIT
  echo "check_abi: $list: $(count "$(listed)") symbols, $(count "$added") added"
  [ -z "$added" ] || sed 's/^/  + /' <<<"$added"
  exit 0
fi

[ -f "$list" ] || die "$list: no such symbol list (create it with --update)"
want=$(listed)
# An empty list would pass whatever the library exports: treat it as a broken input.
[ -n "$want" ] || die "$list lists no symbols"

missing=$(LC_ALL=C comm -23 <(printf '%s\n' "$want") <(printf '%s\n' "$have"))
extra=$(LC_ALL=C comm -13 <(printf '%s\n' "$want") <(printf '%s\n' "$have"))
n_want=$(count "$want")

if [ -n "$missing" ]; then
  echo "check_abi: FAILED: $lib no longer exports $(count "$missing") of the $n_want symbols" \
    "in $list:" >&2
  sed 's/^/  missing: /' <<<"$missing" >&2
  echo "A released symbol must stay exported (see the header of $list)." >&2
  exit 1
fi
echo "check_abi: OK: $lib exports all $n_want symbols of $list"
if [ -n "$extra" ]; then
  echo "check_abi: $(count "$extra") exported symbols are not in $list yet (record them with:" \
    "$0 --update $lib $list):"
  sed 's/^/  new: /' <<<"$extra"
fi
