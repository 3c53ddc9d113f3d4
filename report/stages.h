// The stages of a campaign as people and scripts see them: each stage's trials by state, a
// one-line summary of its result by kind, the Stages table of `hpctune status`, and a pbt stage's
// schedule of hyperparameters (`hpctune schedule`).
//
// A stage's result is read as data: the keys each kind records are documented beside the code that
// writes them (workflow/search_stage.h, ensemble_stage.h, transfer_stage.h, pbt_stage.h), which
// report/ does not include (tools/layers.txt). A key that is missing or of another type shows as
// "?" in a summary; it never fails a view.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "store/store.h"

namespace hpctune::report {

// Each stage's trials by state (every state name, zeros included), in the order of `stages`. A
// trial without a stage (stage_id 0: recorded before stages had rows) counts for the first stage,
// the campaign's implicit single stage.
std::vector<std::map<std::string, int64_t>> trials_by_stage(const std::vector<store::StageRow>& stages,
                                                            const std::vector<store::TrialRow>& trials);

// One line about what the stage computed, by kind ("" when its result is empty):
//   search    reached val_accuracy >= 0.9 at trial #23 after 23 trials, 3 generations, 4:12
//             (only with search.stop_when; "... not reached after ...")
//   ensemble  greedy, 5 members vs best single #14 (lowest val log loss): val log loss 0.3100 vs 0.3500,
//             val accuracy 0.8912 vs 0.8801; test acc 0.8912 vs 0.8801, test log loss 0.3100 vs 0.3500
//             (the blend's figure first; the member with the lowest validation loss, the loss the
//             blend minimises, and the objective's value beside it; regression: val MSE, test MSE)
//   transfer  test acc 0.8410 vs baseline 0.7702 (+0.0708), source #14
//   pbt       8 members, 12 exploits: best #3 0.8850 (test 0.8801)
// A kind it does not know: the result as compact JSON.
std::string stage_summary(const store::StageRow& stage);

// The figure a transfer stage compares its targets and baselines by, the one its summary shows
// (and the dashboard's transfer view with it): its result's compare_metric (an older result: the
// keys it recorded); before it completes, its compare_metric setting, by default the objective's
// metric with val_ as test_ (workflow/stage_settings.h: held_out_metric). "" when none is known.
std::string transfer_metric(const store::StageRow& stage, const std::string& objective_metric);

// A metric's name as the summaries write it: "test_accuracy" as "test accuracy"; "?" for "".
std::string metric_label(const std::string& metric);

// A stage's state as the views show it: "interrupted" for a stage recorded running whose master is
// gone (report/status.h: MasterLiveness), as its campaign shows then; else the recorded state.
std::string shown_stage_state(const std::string& recorded, bool master_gone);
// shown_stage_state over every stage of `stages`, in place.
void show_stage_states(std::vector<store::StageRow>& stages, bool master_gone);

// Whether `status` shows the Stages table: with more than one stage, or a stage with a result. A
// single search stage with nothing to show keeps the status text of a campaign without stages.
bool show_stages(const std::vector<store::StageRow>& stages);

// The Stages table: stage (name), kind, state, trials (finished/total: done, pruned and failed
// over all; "-" for a stage that runs none) and result (stage_summary). Lines are cut to `width`
// columns, ending in "…" (the result is the last column, so it is what gets cut); 0 = no limit.
std::string stages_table(const std::vector<store::StageRow>& stages, const std::vector<store::TrialRow>& trials,
                         size_t width);

// The pbt stage `name` of `stages`, or with "" the campaign's only pbt stage, for `hpctune
// schedule`. kNotFound when there is no stage of that name or no pbt stage; kInvalidArgument when
// the named stage is of another kind or "" and there are several (the message lists them);
// kUnavailable when the stage has not completed yet (its schedule is recorded when it does).
Result<store::StageRow> find_pbt_stage(const std::vector<store::StageRow>& stages, const std::string& name);

// The schedule of hyperparameters of a completed pbt stage's best member (result "schedule":
// [{from_step, to_step, params, trial}], its intervals in order), in `format`:
//   table  a line naming the member, then from_step, to_step, each parameter (4 digits) and the
//          trial that trained the interval
//   json   {stage, best: {trial, value, test_accuracy}, schedule: [...]}: the recorded values
//   yaml   a comment naming the member, then the intervals as a YAML list, every digit, to keep
//          beside the config or to replay (each interval trains (from_step, to_step] with its
//          params, from the weights the interval before ended with)
// kUsage for another format; kFailed when the result has no schedule (no member finished) or a
// malformed one.
Result<std::string> schedule_text(const store::StageRow& stage, const std::string& format);

}  // namespace hpctune::report
