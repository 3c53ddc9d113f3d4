#!/usr/bin/env bash
# test_algorithm_names: tools/check-algorithm-names passes on the tree (no search algorithm is named
# outside search/: the config, report/, the dashboard and simulate ask search::algorithm_traits),
# and fails, located, on a tree that compares one; a comment or a longer string is no comparison;
# an algorithm added to the registry is checked too.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
fail() { echo "test_algorithm_names: FAILED: $*" >&2; exit 1; }

"$root/tools/check-algorithm-names" "$root" || fail "the tree names a search algorithm outside search/"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/search" "$tmp/config" "$tmp/dashboard" "$tmp/tests"
cp "$root/search/searcher_factory.cpp" "$tmp/search/"
printf '// the "genetic" and tpe searches\nconst char* a = "a tpe model";\n/* "cmaes"\n "rl" */\n' >"$tmp/config/ok.cpp"
printf 'bool t(const std::string& a) { return a == "tpe"; }\n' >"$tmp/tests/driver.cpp"  # tests/ drive algorithms by name
"$root/tools/check-algorithm-names" "$tmp" >/dev/null || fail "a comment, a longer string or tests/ was reported"

printf 'bool f(const std::string& algorithm) {\n  return algorithm == "genetic";  // "cmaes"\n}\n' >"$tmp/dashboard/bad.cpp"
printf 'const char* key = a == "tpe" ? "n_startup" : "n_initial";\n' >"$tmp/config/bad.h"
rc=0
out=$("$root/tools/check-algorithm-names" "$tmp") || rc=$?
[ "$rc" -eq 1 ] || fail "a dashboard/ file comparing algorithm == \"genetic\": exit $rc, expected 1"
grep -q '^dashboard/bad.cpp:2: names the search algorithm "genetic"' <<<"$out" || fail "no located message: $out"
grep -q '^config/bad.h:1: names the search algorithm "tpe"' <<<"$out" || fail "no located message for config/: $out"
grep -q '"cmaes"' <<<"$out" && fail "an algorithm in a comment was reported: $out"
[ "$(grep -c 'names the search algorithm' <<<"$out")" -eq 2 ] || fail "expected exactly 2 places: $out"

# "auto" is also other settings' value: reported where the line speaks of the algorithm only.
rm -f "$tmp/dashboard/bad.cpp" "$tmp/config/bad.h"
printf 'bool p(const Resources& r) { return r.mps == "auto"; }\nbool q(const Config& c) { return c.algorithm == "auto"; }\n' >"$tmp/config/auto.cpp"
rc=0
out=$("$root/tools/check-algorithm-names" "$tmp") || rc=$?
[ "$rc" -eq 1 ] && grep -q '^config/auto.cpp:2: names the search algorithm "auto"' <<<"$out" ||
  fail "c.algorithm == \"auto\" was not reported: $out"
grep -q '^config/auto.cpp:1:' <<<"$out" && fail "another setting's value \"auto\" was reported: $out"
rm -f "$tmp/config/auto.cpp"

# The names are read from the registry: an algorithm added there is checked too.
sed -i 's|{"rl", &rl_settings,|{"hyperband_bo", \&hb_settings, \&make_hb, {}},\n      {"rl", \&rl_settings,|' "$tmp/search/searcher_factory.cpp"
printf 'bool g(const std::string& a) { return a != "hyperband_bo"; }\n' >"$tmp/config/new.cpp"
rc=0
out=$("$root/tools/check-algorithm-names" "$tmp") || rc=$?
[ "$rc" -eq 1 ] && grep -q '^config/new.cpp:1: names the search algorithm "hyperband_bo"' <<<"$out" ||
  fail "a new algorithm of the registry was not checked: $out"
# No registry: exit 2, not a pass.
rm -f "$tmp/search/searcher_factory.cpp"
rc=0
"$root/tools/check-algorithm-names" "$tmp" >/dev/null 2>&1 || rc=$?
[ "$rc" -eq 2 ] || fail "a missing registry: exit $rc, expected 2"
echo "test_algorithm_names: 6 passed, 0 failed"
