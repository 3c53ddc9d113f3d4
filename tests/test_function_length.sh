#!/usr/bin/env bash
# test_function_length: no function in trainers/, collectives/, gpu/, worker/, cli/, common/ or bench/ is longer than
# 200 lines (tools/check-function-length), and the check fails, located, on a function that is.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
fail() { echo "test_function_length: FAILED: $*" >&2; exit 1; }

out=$("$root/tools/check-function-length" --root "$root" trainers collectives gpu worker cli common bench) ||
  fail "the tree has a function over 200 lines: $out"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/trainers"
{
  echo 'int short_one() { return 1; }'
  echo 'int long_one(int x) {'
  for i in $(seq 1 205); do echo "  x += $i;"; done
  echo '  return x;'
  echo '}'
} >"$tmp/trainers/long.cpp"
rc=0
out=$("$root/tools/check-function-length" --root "$tmp" trainers) || rc=$?
[ "$rc" -eq 1 ] || fail "a 208-line function: exit $rc, expected 1 ($out)"
grep -q '^trainers/long.cpp:2: long_one is 208 lines (limit 200)$' <<<"$out" || fail "no located message: $out"
grep -q 'short_one' <<<"$out" && fail "a short function was reported: $out"
echo "test_function_length: ok"
