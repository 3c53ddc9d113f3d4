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
         '| config | where | nodes | real (s) | its runs (s) |'; do
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

# The simulated path, without waiting for an hpctune whose simulate prices the mlp trainer: a stand-in
# binary answers `simulate` with the JSON contract of issue 24 (wall time 3 s, 2 s of compute), so
# the validation table gets a numeric median and the cost breakdown of the configs off by > 10%.
mkdir -p "$tmp/fake"
cat >"$tmp/fake/hpctune" <<'SH'
#!/usr/bin/env bash
[ "$1" = simulate ] || exit 9
[ "$2" = --help ] && { echo "  --machine FILE  --target VALUE"; exit 0; }
nodes=0; db=""; while [ $# -gt 0 ]; do [ "$1" = --nodes ] && nodes=$2; [ "$1" = --db ] && db=$2; shift; done
# Its store: a campaign of 3.0 s with one trial of 2.0 s whose params no real run has.
/usr/bin/python3 -c '
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("CREATE TABLE campaigns (created_at REAL, finished_at REAL)")
c.execute("INSERT INTO campaigns VALUES (100.0, 103.0)")
c.execute("CREATE TABLE trials (id INTEGER PRIMARY KEY, params TEXT, started_at REAL, finished_at REAL, state TEXT)")
c.execute("INSERT INTO trials (params, started_at, finished_at, state) VALUES (?, 100.5, 102.5, ?)", ("{\"fake\": 1}", "done"))
c.commit()' "$db"
printf '{"nodes": %s, "groups": 1, "data": 1, "model": 1, "global_batch": 64, "trials": {"done": 3}, "simulated_seconds": 3.0, "wall_seconds": 0.01, "target": null, "time_to_target_seconds": 2.5, "runs_to_target": 3, "generations": 1, "node_utilization": 0.9, "speedup": null, "machine": "fake", "extrapolated": %s, "db": "%s", "cost": {"compute_s": 2.0, "allreduce_s": 0.0, "bubble_s": 0.0, "startup_s": 0.5, "checkpoint_s": 0.0, "decision_s": 0.1}}\n' "$nodes" "$([ "$nodes" -gt 4 ] && echo true || echo false)" "$db"
SH
chmod +x "$tmp/fake/hpctune"
"$root/bench/combined" --quick --build "$tmp/fake" --out "$tmp/sim" --keep "$tmp/keep" --reuse >"$tmp/log3" 2>&1 ||
  { cat "$tmp/log3" >&2; fail "bench/combined --reuse with a simulate that answers exited non-zero"; }
/usr/bin/python3 - "$tmp/sim/combined.json" "$tmp/sim/combined.md" <<'PY' || fail "the simulated rows or the median are wrong"
import json, statistics, sys
res = json.load(open(sys.argv[1])); md = open(sys.argv[2]).read()
v = res["validation"]
assert v["produced"] and res["simulate"] == "ok", v
errs = [abs(3.0 - r["real_s"]) / r["real_s"] for r in v["rows"]]
assert abs(v["median_error"] - statistics.median(errs)) < 1e-3, (v["median_error"], errs)
assert f"median error: **{100 * v['median_error']:.1f}%**" in md
off = [r for r in v["rows"] if r["error"] > 0.10]
# The parts from the two stores: the fake's one trial of 2.0 s, its 3.0 s campaign, no configuration in common.
for r in off:
    b = r["breakdown"]
    assert b["trials (summed)"]["simulated_s"] == 2.0 and r["worst_part"], r
    groups = int(r["nodes"].split("x")[0])
    assert abs(b["outside the trials, per group"]["simulated_s"] - (3.0 - 2.0 / groups)) < 1e-6, r
    assert b["matched"]["configurations"] == 0 and b["matched"]["of"] == 1, r
if off:
    assert "(most off)" in md
assert "| 8 | genetic | 1 | 3 | 2.5 | 3.0 | *sim* (extrapolated) |" in md, md
assert "| HPO+DP+MP | 3 | 16 x 16 x 8 | 64 | 2.5 | 1.00x | *sim* (extrapolated), 7 hidden layers |" in md, md
PY
echo "test_bench_combined: passed"
