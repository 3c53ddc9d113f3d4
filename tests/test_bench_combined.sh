#!/usr/bin/env bash
# test_bench_combined BUILD_DIR: `bench/combined --quick` runs its real campaigns (hpctune run, mpirun
# for the multi-rank ones) and writes combined.md and combined.json with Cray's three tables, each
# naming its command, and the validation table with a numeric median error or, when the installed
# `hpctune simulate` lacks --machine/--target, a clear 'not produced' marker. Then --reuse reads the
# kept campaigns back without running them again and writes the same measured figures.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: test_bench_combined.sh BUILD_DIR}
fail() { echo "test_bench_combined: FAILED: $*" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$root/bench/combined" --quick --build "$build" --out "$tmp/out" --keep "$tmp/keep" >"$tmp/log" 2>&1 ||
  { cat "$tmp/log" >&2; fail "bench/combined --quick exited non-zero"; }
md="$tmp/out/combined.md"
json="$tmp/out/combined.json"
[ -s "$md" ] && [ -s "$json" ] || fail "combined.md or combined.json missing"
for h in '## Table 1: one model' '## Table 2: genetic HPO, runs to the threshold by node count' \
         '## Table 3: combined' '## Validation: simulated against real wall time' \
         '| run | virtual nodes | time to epochs (s) | time to threshold (s) |' \
         '| nodes | search | generations | runs to threshold |' \
         '| configuration | runs | nodes | global batch | time to threshold (s) | speed-up |' \
         '| config | nodes | real (s) | simulated (s) | error |'; do
  grep -qF -- "$h" "$md" || fail "combined.md lacks '$h'"
done
[ "$(grep -c 'Reproduce: `bench/combined --quick`' "$md")" -ge 4 ] || fail "a table does not name its command"

/usr/bin/python3 - "$json" "$md" <<'PY' || fail "combined.json does not hold what it should"
import json, sys
res = json.load(open(sys.argv[1])); md = open(sys.argv[2]).read()
runs = res["runs"]
for k in ("single", "dp2", "mp2", "hpo1", "hpo2", "random1", "hpo_dp2"):
    m = runs[k]["measured"]
    assert m["wall_seconds"] > 0 and m["trials"] >= 1, (k, m)
assert runs["dp2"]["data"] == 2 and runs["mp2"]["model"] == 2 and runs["hpo2"]["groups"] == 2
assert runs["single"]["measured"]["time_to_target_seconds"] is not None, "the single model missed its threshold"
assert runs["hpo1"]["measured"]["reached"] and runs["hpo1"]["measured"]["runs_to_target"] >= 1
assert runs["hpo1"]["measured"]["generations"] >= 1
v = res["validation"]
assert len(v["rows"]) >= 5, v
if v["produced"]:
    med = v["median_error"]
    assert isinstance(med, float) and med >= 0, med
    assert "median error: **" in md and "%**" in md
else:
    assert v["median_error"] is None and "not produced" in v["note"], v
    assert "median error: **not produced**" in md
    assert all("not produced" in p["simulated"]["error"] for p in res["projections"]) or \
           all("error" in p["simulated"] for p in res["projections"])
print("median error:", v["median_error"], "|", v["note"])
PY

cp "$json" "$tmp/first.json"
t0=$(date +%s)
"$root/bench/combined" --quick --build "$build" --out "$tmp/out" --keep "$tmp/keep" --reuse >"$tmp/log2" 2>&1 ||
  { cat "$tmp/log2" >&2; fail "bench/combined --quick --reuse exited non-zero"; }
[ $(( $(date +%s) - t0 )) -lt 20 ] || fail "--reuse ran the campaigns again"
/usr/bin/python3 - "$tmp/first.json" "$json" <<'PY' || fail "--reuse changed the measured figures"
import json, sys
a, b = (json.load(open(p))["runs"] for p in sys.argv[1:3])
for k in a:
    wa, wb = a[k]["measured"], b[k]["measured"]
    assert wa["wall_seconds"] == wb["wall_seconds"] and wa["trials"] == wb["trials"], k
    assert wb.get("reused") is True, k
PY
echo "test_bench_combined: passed"
