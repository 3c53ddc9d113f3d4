// The trials as CSV, one writer for `trials --format csv`, `export --format csv` and the
// dashboard's `format=csv`: cells a spreadsheet will not run as formulas and a CSV reader reads
// back whole.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "store/store.h"

namespace hpctune::report {

// A text cell. One starting with = + - @, a tab or a carriage return, or with one of those right
// after a ';' (where a ';'-separated locale splits it), gets a ' there so that a spreadsheet does
// not run it as a formula (CSV injection); text that is a plain number ("-0.5", "+3", "1e-3") is
// left as it is. Quoted when it holds a comma, ';', '"', a carriage return or a line feed.
std::string csv_field(std::string_view text);
// A number at full precision (the shortest text that reads back the same); "" for NaN, "inf" and
// "-inf" for the infinities. Never guarded: -0.5 stays -0.5.
std::string csv_number(double value);
// A parameter's or metric's value: numbers as numbers, booleans as true/false, text guarded,
// lists and objects as guarded JSON; null as "".
std::string csv_value(const nlohmann::json& value);

struct TrialsCsvOptions {
  const std::set<int64_t>* pareto = nullptr;             // adds a `pareto` column (1 or 0)
  const std::vector<store::StageRow>* stages = nullptr;  // names the `stage` column's cells
};

// One row per trial, in the given order. Columns: trial, seq, stage, generation, state, attempt,
// group, created_at, started_at, finished_at, seconds, objective, step, [pareto], params.<name>...
// (the searched values), lineage.<name>... and run_settings.<name>... (the keys hpctune adds:
// trial_json.h, shown_params), metrics.<name>... (in the order first seen), error. Times every
// digit, empty while unset.
std::string trials_csv(const std::vector<const store::TrialRow*>& trials, const TrialsCsvOptions& options = {});
std::string trials_csv(const std::vector<store::TrialRow>& trials, const TrialsCsvOptions& options = {});

}  // namespace hpctune::report
