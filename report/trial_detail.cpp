// One trial in full (trial_detail.h).
#include "report/trial_detail.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/safe_open.h"
#include "common/text.h"
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
  HPCTUNE_ASSIGN(d.sync_mode, v.store->sync_mode(d.trial.id));
  HPCTUNE_ASSIGN(d.parents, v.store->lineage(d.trial.id));
  HPCTUNE_ASSIGN(const auto stages, v.store->stages(v.campaign.id));
  d.stage = stage_name(d.trial, stages);
  d.logs = trial_logs(v.db_path, d.trial.id, d.artifacts);
  return d;
}

nlohmann::json trial_detail_json(const TrialDetail& d, const CampaignView& v, int64_t log_lines) {
  nlohmann::json j = trials_json({d.trial}, v.front())[0];
  j["stage"] = d.stage;
  nlohmann::json parents = nlohmann::json::array();
  for (const auto& l : d.parents) parents.push_back({{"trial", l.parent_trial_id}, {"relation", l.relation}});
  j["lineage"]["parents"] = std::move(parents);
  j["metrics_by_step"] = metrics_by_step_json(d.metrics);
  j["attempts"] = d.attempts;
  if (!d.sync_mode.empty()) j["sync_mode"] = d.sync_mode;
  j["events"] = nlohmann::json::array();
  for (const auto& e : d.events) j["events"].push_back(event_json(e));
  j["artifacts"] = nlohmann::json::array();
  for (const auto& a : d.artifacts) {
    j["artifacts"].push_back({{"attempt", a.attempt}, {"kind", a.kind}, {"path", a.path}, {"bytes", a.bytes},
                              {"created_at", a.created_at}});
  }
  j["logs"] = nlohmann::json::array();
  // A log holds whatever the trainer wrote: NUL and control bytes go out JSON-escaped (\u0000),
  // bytes that are not UTF-8 as U+FFFD (nlohmann::json's dump throws on them).
  for (const auto& path : d.logs) {
    j["logs"].push_back({{"path", sanitize_utf8(path)}, {"tail", sanitize_utf8(tail_lines(v.db_path, path, log_lines))}});
  }
  return j;
}

namespace {

// The database's trial directories (<db>.trials), opened without following a link: the directory
// that holds the database is the user's choice, but what is in it may be someone else's.
Result<UniqueFd> open_trials_root(const std::string& db) {
  const std::filesystem::path p(db);
  const std::string parent = p.parent_path().empty() ? std::string(".") : p.parent_path().string();
  UniqueFd dir(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) return err(Errc::kNotFound, "cannot open " + parent + ": " + std::strerror(errno));
  return open_own_at(dir.get(), p.filename().string() + ".trials", /*directory=*/true);
}

// `path` relative to <db>.trials ("" when it is not under it): lexically, after the part up to
// "<name>.trials", which must be the database's own directory (compared by device and inode).
std::string under_trials(const std::string& db, const std::string& path) {
  std::error_code ec;
  const auto file = std::filesystem::absolute(path, ec).lexically_normal();
  if (ec) return "";
  const std::filesystem::path dbp = std::filesystem::absolute(db, ec).lexically_normal();
  if (ec) return "";
  const std::string root_name = dbp.filename().string() + ".trials";
  struct stat want {};
  if (::stat(dbp.parent_path().c_str(), &want) != 0) return "";
  std::filesystem::path prefix;
  for (auto it = file.begin(); it != file.end(); ++it) {
    if (*it == root_name) {
      struct stat have {};
      if (::stat((prefix.empty() ? std::filesystem::path("/") : prefix).c_str(), &have) == 0 &&
          have.st_dev == want.st_dev && have.st_ino == want.st_ino) {
        std::filesystem::path rest;
        for (++it; it != file.end(); ++it) rest /= *it;
        return rest.string();
      }
    }
    prefix /= *it;
  }
  return "";
}

}  // namespace

Result<UniqueFd> open_trial_file(const std::string& db, const std::string& path) {
  // A recorded path with a NUL would name one file and open another (the system call stops there).
  if (path.find('\0') != std::string::npos) return err(Errc::kInvalidArgument, "a path with a NUL byte names no file");
  const std::string relative = under_trials(db, path);
  if (relative.empty()) return err(Errc::kInvalidArgument, path + " is not under " + db + ".trials");
  HPCTUNE_ASSIGN(UniqueFd root, open_trials_root(db));
  auto fd = open_own_file_under(root.get(), relative);
  if (!fd.ok()) return std::move(fd).error().with_context("while opening " + path);
  return fd;
}

std::vector<std::string> trial_logs(const std::string& db, int64_t id, const std::vector<store::ArtifactRow>& artifacts) {
  std::vector<std::string> out;
  std::vector<std::pair<dev_t, ino_t>> seen;
  auto add = [&](const std::string& path) {
    auto fd = open_trial_file(db, path);
    if (!fd.ok()) return;  // not the user's own file under <db>.trials: left out
    struct stat st {};
    if (::fstat(fd->get(), &st) != 0) return;
    const std::pair<dev_t, ino_t> key{st.st_dev, st.st_ino};
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) return;
    seen.push_back(key);
    out.push_back(path);
  };
  for (const auto& a : artifacts) {
    if (a.kind == "log") add(a.path);
  }
  const std::string dir = db + ".trials/" + std::to_string(id);
  for (const char* name : {"stdout.log", "stderr.log"}) add(dir + "/" + name);
  return out;
}

std::string tail_lines(const std::string& db, const std::string& path, int64_t lines) {
  if (lines <= 0) return "";
  auto fd = open_trial_file(db, path);
  if (!fd.ok()) return "";
  struct stat st {};
  if (::fstat(fd->get(), &st) != 0) return "";
  const off_t from = std::max<off_t>(0, st.st_size - (256 << 10));
  std::string text(static_cast<std::size_t>(st.st_size - from), '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::pread(fd->get(), text.data() + got, text.size() - got, from + static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  text.resize(got);
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
