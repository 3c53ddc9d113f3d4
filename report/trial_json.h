// Trials as JSON, for scripts: the list (`trials --format json`), events, curves by step, and the
// whole campaign (`export --format json`). Times are seconds since the epoch, null when not yet.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "store/store.h"

namespace hpctune::report {

struct CampaignView;

// A time in seconds since the epoch for JSON: null when it is 0 ("not yet").
nlohmann::json time_or_null(double t);
// The seconds a finished trial trained: its attempts' (TrialRow::run_seconds: every pbt interval
// and every rung of a paused trial, not an attempt lost or interrupted), or from its start to its
// end where no attempt has times; 0 until it finished.
double trial_seconds(const store::TrialRow& trial);

// A trial's params as the views show them: the searched (and user-given) values apart from the
// keys hpctune itself adds (trainers/internal_params.h), its lineage (source_trial,
// source_checkpoint) and its run settings (max_step; also the kind's own step setting, epochs or
// steps, where the trial's meta says a stage set it: trainers/internal_params.h, kStageStepMeta; and
// the keys a stage set from its own settings, such as a transfer target's freeze: kStageSettingsMeta).
// Three objects, each possibly empty; what the trainer received is the three together.
struct ShownParams {
  nlohmann::json params = nlohmann::json::object();
  nlohmann::json lineage = nlohmann::json::object();
  nlohmann::json run_settings = nlohmann::json::object();
};
ShownParams shown_params(const nlohmann::json& params, const nlohmann::json& meta = nlohmann::json::object());

// The name of the stage a trial belongs to ("" without stages; a trial of stage 0 is the first
// stage's).
std::string stage_name(const store::TrialRow& trial, const std::vector<store::StageRow>& stages);

// One object per trial: trial, seq, state, attempt, group, params (the searched values), lineage
// and run_settings (shown_params), metrics, step, created_at, started_at, finished_at, generation,
// seconds, objective, and error / parent_trial when set. With a front, a "pareto" member (true or
// false); with the stages, a "stage" member (its name).
nlohmann::json trials_json(const std::vector<store::TrialRow>& trials, const std::set<int64_t>* pareto = nullptr,
                           const std::vector<store::StageRow>* stages = nullptr);

// {t, kind, detail} and trial / attempt / group when the event has them.
nlohmann::json event_json(const store::EventRow& event);

// The reports, one entry per (attempt, step): [{attempt, step, t, metrics: {name: value}}]; a
// value that is not finite is null. `rows` as Store::metrics returns them (by attempt, step, name).
nlohmann::json metrics_by_step_json(const std::vector<store::MetricRow>& rows);

// Everything the campaign recorded, for `export --format json`: {campaign: {name, state, seed,
// config, created_at, finished_at}, trials: [trials_json with stage + metrics_by_step + events], events:
// [the campaign's own], and pareto_front with several objectives}.
Result<nlohmann::json> export_json(CampaignView& view);

}  // namespace hpctune::report
