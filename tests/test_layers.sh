#!/usr/bin/env bash
# test_layers: tools/check-layers passes on the tree, and fails on a deliberately wrong include and on
# a folder that tools/layers.txt does not place.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
fail() { echo "test_layers: FAILED: $*" >&2; exit 1; }

"$root/tools/check-layers" "$root" || fail "the tree itself breaks tools/layers.txt"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/tools" "$tmp/search" "$tmp/scheduler"
cp "$root/tools/layers.txt" "$tmp/tools/"
printf '#include "common/result.h"\n#include "search/space.h"\n' >"$tmp/scheduler/ok.h"
printf '#pragma once\n#include "common/result.h"\n#include "store/store.h"\n' >"$tmp/search/bad.h"
rc=0
out=$("$root/tools/check-layers" "$tmp") || rc=$?
[ "$rc" -eq 1 ] || fail "a search/ file including store/store.h: exit $rc, expected 1"
grep -q '^search/bad.h:3: search/ may not include store/store.h' <<<"$out" || fail "no located message: $out"
grep -q 'scheduler/ok.h' <<<"$out" && fail "an allowed include was reported: $out"

# The master's side never includes the neural-network library (no BLAS or oneDNN in the master).
printf '#include "nn/network.h"\n' >"$tmp/scheduler/bad.cpp"
rc=0
out=$("$root/tools/check-layers" "$tmp") || rc=$?
[ "$rc" -eq 1 ] || fail "a scheduler/ file including nn/network.h: exit $rc, expected 1"
grep -q '^scheduler/bad.cpp:1: scheduler/ may not include nn/network.h' <<<"$out" || fail "no located message: $out"
rm "$tmp/scheduler/bad.cpp"

mkdir -p "$tmp/newthing" && printf 'int x;\n' >"$tmp/newthing/a.cpp"
rm "$tmp/search/bad.h"
rc=0
out=$("$root/tools/check-layers" "$tmp") || rc=$?
[ "$rc" -eq 1 ] || fail "a folder without a line in layers.txt: exit $rc, expected 1"
grep -q '^newthing/: has source files but no line in tools/layers.txt' <<<"$out" || fail "no message: $out"
echo "test_layers: 4 passed, 0 failed"
