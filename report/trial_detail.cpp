// One trial in full (trial_detail.h).
#include "report/trial_detail.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "report/campaign.h"
#include "report/trial_json.h"

namespace hpctune::report {

Result<TrialDetail> load_trial(CampaignView& v, int64_t trial_id) {
  auto it = std::find_if(v.trials.begin(), v.trials.end(), [&](const store::TrialRow& t) { return t.id == trial_id; });
  if (it == v.trials.end()) {
    return err(Errc::kNotFound, "campaign '" + v.campaign.name + "' in " + v.db_path + " has no trial " +
                                    std::to_string(trial_id) + " (its trials: " +
                                    (v.trials.empty() ? std::string("none")
                                                      : std::to_string(v.trials.front().id) + ".." +
                                                            std::to_string(v.trials.back().id)) + ")");
  }
  TrialDetail d;
  d.trial = *it;
  HPCTUNE_ASSIGN(d.metrics, v.store->metrics(d.trial.id));
  HPCTUNE_ASSIGN(d.attempts, v.store->attempts(d.trial.id));
  HPCTUNE_ASSIGN(d.artifacts, v.store->artifacts(d.trial.id));
  // Through the index on events.trial_id: a campaign of many trials has many more events.
  HPCTUNE_ASSIGN(d.events, v.store->trial_events(d.trial.id));
  d.logs = trial_logs(v.db_path, d.trial.id, d.artifacts);
  return d;
}

nlohmann::json trial_detail_json(const TrialDetail& d, const CampaignView& v, int64_t log_lines) {
  nlohmann::json j = trials_json({d.trial}, v.front())[0];
  j["metrics_by_step"] = metrics_by_step_json(d.metrics);
  j["attempts"] = d.attempts;
  j["events"] = nlohmann::json::array();
  for (const auto& e : d.events) j["events"].push_back(event_json(e));
  j["artifacts"] = nlohmann::json::array();
  for (const auto& a : d.artifacts) {
    j["artifacts"].push_back({{"attempt", a.attempt}, {"kind", a.kind}, {"path", a.path}, {"bytes", a.bytes},
                              {"created_at", a.created_at}});
  }
  j["logs"] = nlohmann::json::array();
  for (const auto& path : d.logs) j["logs"].push_back({{"path", path}, {"tail", tail_lines(path, log_lines)}});
  return j;
}

namespace {

// Whether `path` resolves to a regular file under `root` (both made canonical: links followed).
bool inside(const std::filesystem::path& root, const std::string& path) {
  std::error_code ec;
  const auto file = std::filesystem::canonical(path, ec);
  if (ec || !std::filesystem::is_regular_file(file, ec)) return false;
  auto f = file.begin();
  for (auto r = root.begin(); r != root.end(); ++r, ++f) {
    if (f == file.end() || *f != *r) return false;
  }
  return f != file.end();
}

}  // namespace

std::vector<std::string> trial_logs(const std::string& db, int64_t id, const std::vector<store::ArtifactRow>& artifacts) {
  std::vector<std::string> out;
  std::error_code ec;
  const auto root = std::filesystem::canonical(db + ".trials", ec);
  if (ec) return out;  // no trial directories: nothing of theirs to show
  for (const auto& a : artifacts) {
    if (a.kind == "log" && std::find(out.begin(), out.end(), a.path) == out.end() && inside(root, a.path)) {
      out.push_back(a.path);
    }
  }
  const std::string dir = db + ".trials/" + std::to_string(id);
  for (const char* name : {"stdout.log", "stderr.log"}) {
    const std::string path = dir + "/" + name;
    const bool listed = std::any_of(out.begin(), out.end(), [&](const std::string& p) {
      std::error_code ec;
      return std::filesystem::equivalent(p, path, ec);
    });
    if (!listed && inside(root, path)) out.push_back(path);
  }
  return out;
}

std::string tail_lines(const std::string& path, int64_t lines) {
  std::ifstream in(path, std::ios::binary);
  if (!in || lines <= 0) return "";
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff from = std::max<std::streamoff>(0, size - (256 << 10));
  in.seekg(from);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  if (!text.empty() && text.back() == '\n') text.pop_back();
  size_t start = 0, pos = text.size();
  for (int64_t n = 0; n < lines; ++n) {
    const size_t nl = pos == 0 ? std::string::npos : text.rfind('\n', pos - 1);
    if (nl == std::string::npos) {
      start = 0;  // fewer lines than asked for: all of them
      break;
    }
    start = nl + 1;
    pos = nl;
  }
  return text.substr(start);
}

}  // namespace hpctune::report
