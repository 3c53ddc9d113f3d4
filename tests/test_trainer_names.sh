#!/usr/bin/env bash
# test_trainer_names: tools/check-trainer-names passes on the tree (no trainer kind is compared by
# name outside trainers/: the master's side asks the catalog of capabilities; no metric the built-in
# trainers report is named there: it takes the objective or a stage's declared key), and fails,
# located, on a tree that compares one or names one.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
fail() { echo "test_trainer_names: FAILED: $*" >&2; exit 1; }

"$root/tools/check-trainer-names" "$root" || fail "the tree names a trainer kind outside trainers/"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/trainers" "$tmp/scheduler" "$tmp/workflow" "$tmp/config"
cp "$root/trainers/trainer_settings.cpp" "$tmp/trainers/"
cp "$root/workflow/stage_settings.h" "$tmp/workflow/"
# A comment or a longer string that contains a kind's name is no comparison.
printf '// the mlp and "cnn" kinds\nconst char* a = "an mlp trainer";\n/* "command"\n "sleep" */\n' >"$tmp/workflow/ok.cpp"
"$root/tools/check-trainer-names" "$tmp" >/dev/null || fail "a comment or a longer string was reported"

printf 'bool f(const std::string& kind) {\n  return kind == "command";  // "mlp"\n}\n' >"$tmp/scheduler/bad.cpp"
printf 'const char* key = k == "cnn" ? "epochs" : "steps";\n' >"$tmp/config/bad.h"
rc=0
out=$("$root/tools/check-trainer-names" "$tmp") || rc=$?
[ "$rc" -eq 1 ] || fail "a scheduler/ file comparing kind == \"command\": exit $rc, expected 1"
grep -q '^scheduler/bad.cpp:2: names the trainer kind "command"' <<<"$out" || fail "no located message: $out"
grep -q '^config/bad.h:1: names the trainer kind "cnn"' <<<"$out" || fail "no located message for config/: $out"
grep -q '"mlp"' <<<"$out" && fail "a kind in a comment was reported: $out"
[ "$(grep -c 'names the trainer kind' <<<"$out")" -eq 2 ] || fail "expected exactly 2 places: $out"

# The kinds are read from the catalog: a kind added there is checked too.
sed -i 's|{"sleep", |{"napper", "x", \&napper_specs()},\n      {"sleep", |' "$tmp/trainers/trainer_settings.cpp"
printf 'bool g(const std::string& k) { return k == "napper"; }\n' >"$tmp/workflow/new.cpp"
rc=0
out=$("$root/tools/check-trainer-names" "$tmp") || rc=$?
[ "$rc" -eq 1 ] && grep -q '^workflow/new.cpp:1: names the trainer kind "napper"' <<<"$out" || fail "a new kind of the catalog was not checked: $out"
# A metric the built-in trainers report, named on the master's side, is reported too (the stage
# takes the objective or a key it declares); one in a comment or a longer string is not.
mkdir -p "$tmp/report"
rm -f "$tmp/workflow/new.cpp" "$tmp/scheduler/bad.cpp" "$tmp/config/bad.h"
printf '// compared by "test_accuracy"\nconst char* a = "test_accuracy_mean";\n' >"$tmp/workflow/ok2.cpp"
printf 'double g(const json& m) {\n  return m["test_accuracy"].get<double>() - m.at("val_loss");\n}\n' >"$tmp/report/metric.cpp"
rc=0
out=$("$root/tools/check-trainer-names" "$tmp") || rc=$?
[ "$rc" -eq 1 ] || fail "a report/ file naming \"test_accuracy\": exit $rc, expected 1: $out"
grep -q '^report/metric.cpp:2: names the metric "test_accuracy"' <<<"$out" || fail "no located message for a metric: $out"
grep -q '^report/metric.cpp:2: names the metric "val_loss"' <<<"$out" || fail "no located message for val_loss: $out"
grep -q 'ok2.cpp' <<<"$out" && fail "a metric in a comment or a longer string was reported: $out"
[ "$(grep -c 'names the' <<<"$out")" -eq 2 ] || fail "expected exactly 2 places: $out"
# A stage kind named below workflow/ (config/, scheduler/, ...) is reported: the config asks what a
# kind declares (workflow/stage_settings.h), so a new stage kind touches only workflow/ and report/;
# workflow/ and report/ themselves may name their kinds.
rm -f "$tmp/report/metric.cpp"
printf 'if (st.kind == "pbt") finish_pbt(st);
' >"$tmp/config/stage.cpp"
printf 'const char* k = "transfer";
' >"$tmp/workflow/own.cpp"
printf 'if (stage.kind == "ensemble") return blend(r);
' >"$tmp/report/summary.cpp"
rc=0
out=$("$root/tools/check-trainer-names" "$tmp") || rc=$?
[ "$rc" -eq 1 ] || fail "a config/ file comparing st.kind == \"pbt\": exit $rc, expected 1: $out"
grep -q '^config/stage.cpp:1: names the stage kind "pbt"' <<<"$out" || fail "no located message for a stage kind: $out"
grep -q 'own.cpp\|summary.cpp' <<<"$out" && fail "workflow/ or report/ naming its stage kinds was reported: $out"
[ "$(grep -c 'names the' <<<"$out")" -eq 1 ] || fail "expected exactly 1 place: $out"
echo "test_trainer_names: 6 passed, 0 failed"
