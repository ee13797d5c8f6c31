#!/usr/bin/env bash
# Self-test of scripts/check_abi.sh, so the ABI test cannot pass by accident (a check that
# never fails guards nothing).
#
#   scripts/check_abi_test.sh LIB LIST      (ctest -L abi runs it on the build's libchorus.so)
#
# On copies of LIST in a temporary directory (LIST itself is never written):
#   1. LIST as committed passes;
#   2. LIST plus a made-up symbol fails with exit status 1, naming that symbol and no other;
#   3. a list of comments only is refused (exit 2), since it would pass any library;
#   4. a missing library is refused (exit 2);
#   5. --update on a list lacking one exported symbol and holding a made-up one adds the
#      former and keeps the latter: entries are only ever added.
set -euo pipefail

[ $# -eq 2 ] || { echo "usage: $0 LIB LIST" >&2; exit 2; }
lib=$1
list=$2
check=$(cd "$(dirname "$0")" && pwd)/check_abi.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fake=chorusNoSuchSymbolForTheAbiSelfTest

failures=0
fail() {
  echo "check_abi_test: FAILED: $*" >&2
  failures=$((failures + 1))
}
# expect STATUS NAME CMD...: runs CMD, keeps its output in $tmp/NAME.out, checks the status.
expect() {
  local want=$1 name=$2 rc=0
  shift 2
  "$@" >"$tmp/$name.out" 2>&1 || rc=$?
  if [ "$rc" -ne "$want" ]; then
    fail "$name: exit status $rc, expected $want: $*"
    sed 's/^/    /' "$tmp/$name.out" >&2
  fi
}

# 1
expect 0 committed bash "$check" "$lib" "$list"

# 2
{ cat "$list"; echo "$fake"; } >"$tmp/fake.abi"
expect 1 made_up bash "$check" "$lib" "$tmp/fake.abi"
grep -q "missing: $fake\$" "$tmp/made_up.out" || fail "made_up: $fake not named in the output"
[ "$(grep -c 'missing: ' "$tmp/made_up.out")" -eq 1 ] ||
  fail "made_up: other symbols reported missing: $(grep 'missing: ' "$tmp/made_up.out" | tr '\n' ' ')"

# 3
printf '# nothing\n\n' >"$tmp/empty.abi"
expect 2 empty_list bash "$check" "$lib" "$tmp/empty.abi"

# 4
expect 2 no_library bash "$check" "$tmp/no-such-lib.so" "$list"

# 5
first=$(grep -v -E '^[[:space:]]*(#|$)' "$list" | head -n1)
{ grep -v -x -F "$first" "$list"; echo "$fake"; } >"$tmp/update.abi"
expect 0 update bash "$check" --update "$lib" "$tmp/update.abi"
grep -q -x -F "$first" "$tmp/update.abi" || fail "update: $first was not added back"
grep -q -x -F "$fake" "$tmp/update.abi" || fail "update: $fake was removed"
grep -q '^# ' "$tmp/update.abi" || fail "update: the comment header is gone"
body=$(grep -v '^#' "$tmp/update.abi")
[ "$body" = "$(LC_ALL=C sort -u <<<"$body")" ] || fail "update: the list is not sorted"

if [ "$failures" -ne 0 ]; then
  echo "check_abi_test: $failures check(s) failed" >&2
  exit 1
fi
echo "check_abi_test: OK: check_abi.sh passes the committed list, names a made-up symbol," \
  "refuses empty lists and missing libraries, and --update only adds"
