// One trial in full, for `hpctune trial`: its row, its metrics at every step, its attempts,
// events and artifacts, and its log files (with their last lines).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "common/safe_open.h"
#include "store/store.h"

namespace hpctune::report {

struct CampaignView;

struct TrialDetail {
  store::TrialRow trial;
  std::vector<store::MetricRow> metrics;    // by attempt, step, name
  std::vector<nlohmann::json> attempts;     // Store::attempts: {attempt, group_id, state, started_at, ...}
  std::vector<store::ArtifactRow> artifacts;
  std::vector<store::EventRow> events;      // this trial's, in time order
  std::string sync_mode;                    // Store::sync_mode ("" = none recorded)
  std::vector<store::LineageRow> parents;   // Store::lineage: the trials it came from, with the relation
  std::string stage;                        // its stage's name ("" without stages)
  std::vector<std::string> logs;            // trial_logs()
};

// Reads trial `trial_id` of the view's campaign. kNotFound naming the campaign and its trials'
// range when it has no such trial.
Result<TrialDetail> load_trial(CampaignView& view, int64_t trial_id);

// `hpctune trial --format json`: trials_json's object (params, lineage and run_settings apart)
// plus stage, lineage.parents [{trial, relation}] (transfer_source, retrain_of, pbt_exploit,
// parent), metrics_by_step, attempts, events, artifacts and logs [{path, tail}] with the last
// `log_lines` lines of each.
nlohmann::json trial_detail_json(const TrialDetail& detail, const CampaignView& view, int64_t log_lines);

// The trial's logs: the log artifacts it recorded, and the files a command trainer writes in its
// trial directory (<db>.trials/<id>/stdout.log, stderr.log) when it recorded none; each file once.
// Only what open_trial_file() opens: a recorded path comes from a worker's message, the database
// and the folder beside it may have been planted by another user, and the dashboard shows these
// tails to whoever holds its token, so a path, link or directory pointing elsewhere is left out.
std::vector<std::string> trial_logs(const std::string& db, int64_t trial_id,
                                    const std::vector<store::ArtifactRow>& artifacts);

// Opens `path`, a file under the database's trial directories (<db>.trials/...), walking from the
// database's directory without following any symbolic link (<db>.trials itself included), and only
// through directories and to a regular file that belong to this user. kInvalidArgument otherwise.
Result<UniqueFd> open_trial_file(const std::string& db, const std::string& path);

// The last `lines` lines of one of the trial's files ("" if open_trial_file refuses it or it
// cannot be read), reading at most its last 256 KB. Opened again, as trial_logs() did: a file
// swapped for a link since then is not read.
std::string tail_lines(const std::string& db, const std::string& path, int64_t lines);

}  // namespace hpctune::report
