#include "cli/commands.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <iostream>
#include <set>

#include "report/report_tables.h"
#include "common/clock.h"
#include "config/config.h"
#include "scheduler/master.h"
#include "store/store.h"
#include "protocol/transport.h"
#include "trainers/trainer_factory.h"
#include "worker/worker.h"

namespace hpctune::cli {

int exit_code_for(const Error& error) {
  switch (error.code()) {
    case Errc::kConfig:
    case Errc::kUsage:
    case Errc::kInvalidArgument:
    case Errc::kNotFound:
      return kExitUsage;
    case Errc::kCancelled:
      return kExitInterrupted;
    default:
      return kExitFailure;
  }
}

namespace {

bool stderr_is_tty() { return isatty(STDERR_FILENO) == 1; }

int terminal_width() {
  winsize ws{};
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 120;
}

std::string timestamp() {
  std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%H:%M:%S", std::localtime(&now));
  return buf;
}

// The live progress line on a terminal, plain log lines elsewhere.
class Console {
 public:
  Console() : tty_(stderr_is_tty()) {}

  void log(const std::string& line) {
    clear();
    std::fprintf(stderr, "%s  %s\n", timestamp().c_str(), line.c_str());
    redraw();
  }

  void progress(const scheduler::Progress& p, double elapsed) {
    if (tty_) {
      // One column short of the width: a line that fills the last column wraps on some terminals.
      last_ = report::progress_line(p, elapsed, std::max(terminal_width() - 1, 1));
      std::fprintf(stderr, "\r\033[2K%s", last_.c_str());
      std::fflush(stderr);
      return;
    }
    const int64_t finished = p.done + p.pruned + p.failed;
    if (finished != last_finished_) {
      last_finished_ = finished;
      std::fprintf(stderr, "%s  %s\n", timestamp().c_str(), report::progress_line(p, elapsed, 0).c_str());
    }
  }

  void finish() {
    if (tty_ && !last_.empty()) std::fprintf(stderr, "\n");
    last_.clear();
  }

 private:
  void clear() {
    if (tty_ && !last_.empty()) std::fprintf(stderr, "\r\033[2K");
  }
  void redraw() {
    if (tty_ && !last_.empty()) std::fprintf(stderr, "%s", last_.c_str());
    std::fflush(stderr);
  }
  bool tty_;
  std::string last_;
  int64_t last_finished_ = -1;
};

// The end of a command's output to stdout: buffered writes fail silently (a full disk, a closed
// pipe, /dev/full), so flush now and look at the stream's error flag, which sticks.
Status finish_stdout() {
  errno = 0;
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    const int e = errno;
    return err(Errc::kIo, std::string("cannot write the output to standard output: ") +
                              (e != 0 ? std::strerror(e) : "a write failed"));
  }
  return {};
}

// Writes `text` to `path` whole or not at all: into a temporary file in the same directory, then
// renamed over `path`, so that a failure (a full disk, a quota) leaves no empty or partial file and
// an existing one untouched. A path that exists and is not a regular file (a FIFO), or one under
// /dev or /proc (/dev/stdout redirected to a file) is written directly: it cannot be replaced.
Status write_file_atomically(const std::string& path, const std::string& text) {
  auto write_all = [&](int fd, const std::string& name) -> Status {
    std::size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return err(Errc::kIo, "cannot write " + name + ": " + std::strerror(errno));
      done += static_cast<std::size_t>(n);
    }
    return {};
  };
  struct stat st {};
  const bool device_name = path.rfind("/dev/", 0) == 0 || path.rfind("/proc/", 0) == 0;  // /dev/stdout
  if ((::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) || device_name) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);  // after what the shell wrote
    if (fd < 0) return err(Errc::kIo, "cannot open " + path + ": " + std::strerror(errno));
    Status s = write_all(fd, path);
    if (::close(fd) != 0 && s.ok()) return err(Errc::kIo, "cannot write " + path + ": " + std::strerror(errno));
    return s;
  }
  // Through a symlink, the file it points to is replaced, not the link.
  std::error_code ec;
  const std::filesystem::path target =
      std::filesystem::is_symlink(path, ec) ? std::filesystem::weakly_canonical(path, ec) : std::filesystem::path(path);
  std::string name = ".";  // not "." + ...: GCC 12's -Wrestrict false positive (PR 105329)
  name += target.filename().string();
  name += ".tmp-XXXXXX";
  std::string tmp = (target.parent_path() / name).string();
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) return err(Errc::kIo, "cannot create a file beside " + path + ": " + std::strerror(errno));
  // mkstemp creates 0600; give the file the mode a plain create would (0666 less the umask).
  const mode_t mask = ::umask(0);
  ::umask(mask);
  Status s = write_all(fd, path);
  if (s.ok() && ::fchmod(fd, 0666 & ~mask) != 0) s = err(Errc::kIo, "cannot set the mode of " + path + ": " + std::strerror(errno));
  if (s.ok() && ::fsync(fd) != 0) s = err(Errc::kIo, "cannot write " + path + ": " + std::strerror(errno));
  if (::close(fd) != 0 && s.ok()) s = err(Errc::kIo, "cannot write " + path + ": " + std::strerror(errno));
  if (s.ok() && ::rename(tmp.c_str(), target.c_str()) != 0) {
    s = err(Errc::kIo, "cannot rename " + tmp + " to " + target.string() + ": " + std::strerror(errno));
  }
  if (!s.ok()) ::unlink(tmp.c_str());
  return s;
}

Result<std::unique_ptr<store::Store>> open_for_reading(const std::string& db) {
  auto s = store::Store::open_readonly(db);
  if (!s.ok()) return std::move(s).error();
  return std::move(s).value();
}

struct Loaded {
  std::unique_ptr<store::Store> store;
  store::CampaignRow campaign;
  std::vector<store::TrialRow> trials;
  std::string metric = "objective";
  bool maximize = true;
  std::vector<std::string> objective_metrics;  // every objective's metric, in order
  std::set<int64_t> pareto;                    // the recorded front (several objectives only)
  const std::set<int64_t>* front() const { return objective_metrics.size() > 1 ? &pareto : nullptr; }
  // The objectives' metrics for the tables: every objective, or the one.
  std::vector<std::string> objectives() const {
    return objective_metrics.size() > 1 ? objective_metrics : std::vector<std::string>{metric};
  }
};

Result<Loaded> load(const std::string& db) {
  Loaded l;
  HPCTUNE_ASSIGN(l.store, open_for_reading(db));
  HPCTUNE_ASSIGN(auto campaign, l.store->load_campaign());
  if (!campaign) return err(Errc::kNotFound, db + " holds no campaign");
  l.campaign = std::move(*campaign);
  HPCTUNE_ASSIGN(l.trials, l.store->trials(l.campaign.id));
  const auto& cj = l.campaign.config_json;
  if (cj.contains("objectives") && cj["objectives"].is_array() && !cj["objectives"].empty()) {
    l.metric = cj["objectives"][0].value("metric", l.metric);
    l.maximize = cj["objectives"][0].value("mode", std::string("max")) == "max";
  } else if (cj.contains("objective") && cj["objective"].is_object()) {
    l.metric = cj["objective"].value("metric", l.metric);
    l.maximize = cj["objective"].value("mode", std::string("max")) == "max";
  }
  if (cj.contains("objectives") && cj["objectives"].is_array()) {
    for (const auto& o : cj["objectives"]) {
      if (o.is_object()) l.objective_metrics.push_back(o.value("metric", std::string("objective")));
    }
  }
  l.pareto = report::recorded_pareto_front(l.campaign);
  return l;
}

void print_summary(const std::string& db, int64_t top) {
  auto loaded = load(db);
  if (!loaded.ok()) {
    std::fprintf(stderr, "cannot read the results back: %s\n", loaded.error().to_string().c_str());
    return;
  }
  auto ranked = report::rank_trials(loaded->trials, loaded->maximize);
  if (static_cast<int64_t>(ranked.size()) > top) ranked.resize(top);
  std::printf("\nTop %zu trials by %s (%s):\n%s", ranked.size(), loaded->metric.c_str(),
              loaded->maximize ? "max" : "min",
              report::trials_table(ranked, loaded->objectives(), loaded->front()).c_str());
  if (loaded->front()) {
    std::printf("\nPareto front: %zu trials (marked * under `pareto`; all of them: hpctune trials %s)\n",
                loaded->pareto.size(), db.c_str());
  }
  if (!ranked.empty() && ranked.front().objective) {
    std::printf("\nbest trial %lld: %s = %s  %s\n", static_cast<long long>(ranked.front().id), loaded->metric.c_str(),
                report::format_number(*ranked.front().objective).c_str(), ranked.front().params.dump().c_str());
  }
  std::printf("database: %s\n", db.c_str());
}

// "; the first failure, trial N: <reason>" for the closing message of a campaign without a
// success ("" when none is recorded).
std::string first_failure(const std::string& db) {
  auto loaded = load(db);
  if (!loaded.ok()) return "";
  const store::TrialRow* first = nullptr;
  for (const auto& t : loaded->trials) {
    if (t.state == store::TrialState::kFailed && (!first || t.finished_at < first->finished_at)) first = &t;
  }
  if (!first) return "";
  std::string error = first->error;
  while (!error.empty() && (error.back() == '\n' || error.back() == ' ')) error.pop_back();
  return "\nthe first failure, trial " + std::to_string(first->id) + ": " + error;
}

// Runs the master with what `run` and `resume` share (the interrupt flag, the test-only fail
// point, the console) and prints the outcome.
template <typename Args>
Status run_and_report(scheduler::MasterOptions& options, const Args& args, const std::atomic<int>& interrupt,
                      bool& interrupted) {
  options.groups = args.groups;
  options.interrupt = &interrupt;
  options.failpoint = args.failpoint;
  options.failpoint_hit = args.failpoint_hit;
  Console console;
  options.log = [&](const std::string& line) { console.log(line); };
  options.progress = [&](const scheduler::Progress& p, double elapsed) { console.progress(p, elapsed); };
  auto outcome = scheduler::run_master(options);
  console.finish();
  if (!outcome.ok()) return std::move(outcome).error();
  const auto& o = outcome.value();
  interrupted = o.interrupted;
  const auto& p = o.progress;
  std::printf("campaign '%s' %s in %s: %lld done, %lld pruned, %lld failed, %lld interrupted\n", o.name.c_str(),
              o.interrupted ? "interrupted" : !o.gave_up.empty() ? "stopped" : "completed",
              report::format_duration(o.elapsed_s).c_str(),
              static_cast<long long>(p.done), static_cast<long long>(p.pruned), static_cast<long long>(p.failed),
              static_cast<long long>(p.interrupted));
  const auto& c = o.counters;
  if (c.malformed + c.unregistered + c.out_of_order + c.stale_results + c.bad_version > 0) {
    std::printf("dropped messages: %lld malformed, %lld from unknown peers, %lld out of order, %lld stale results\n",
                static_cast<long long>(c.malformed), static_cast<long long>(c.unregistered),
                static_cast<long long>(c.out_of_order), static_cast<long long>(c.stale_results));
  }
  print_summary(o.db_path, 10);
  if (o.interrupted) {
    std::printf("continue with: hpctune resume %s\n", o.db_path.c_str());
    return {};
  }
  if (!o.gave_up.empty()) {
    return err(Errc::kFailed, "campaign '" + o.name + "' stopped: " + o.gave_up + first_failure(o.db_path) +
                                  "\nfix the trainer or the config; `hpctune trials " + o.db_path +
                                  " --format json` shows every error");
  }
  if (p.done + p.pruned == 0) {
    return err(Errc::kFailed, "no trial succeeded in campaign '" + o.name + "' (" + std::to_string(p.failed) +
                                  " failed)" + first_failure(o.db_path) + "\n`hpctune trials " + o.db_path +
                                  " --format json` shows every error");
  }
  return {};
}

// --- one trial -----------------------------------------------------------------------------------

nlohmann::json event_json(const store::EventRow& e) {
  nlohmann::json j = {{"t", e.t}, {"kind", e.kind}, {"detail", e.detail}};
  if (e.trial_id > 0) j["trial"] = e.trial_id;
  if (e.attempt > 0) j["attempt"] = e.attempt;
  if (e.group_id >= 0) j["group"] = e.group_id;
  return j;
}

// The reports, one entry per (attempt, step): [{attempt, step, t, metrics: {name: value}}].
nlohmann::json metrics_by_step_json(const std::vector<store::MetricRow>& rows) {
  nlohmann::json out = nlohmann::json::array();
  int64_t attempt = -1, step = -1;
  for (const auto& r : rows) {  // ordered by attempt, step, name
    if (r.attempt != attempt || r.step != step) {
      attempt = r.attempt, step = r.step;
      out.push_back({{"attempt", attempt}, {"step", step}, {"t", r.t}, {"metrics", nlohmann::json::object()}});
    }
    out.back()["metrics"][r.name] = std::isfinite(r.value) ? nlohmann::json(r.value) : nlohmann::json(nullptr);
  }
  return out;
}

// The last `lines` lines of a file ("" if it cannot be read), reading at most the last 256 KB.
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

std::string time_text(double t) {
  if (t <= 0) return "-";
  const std::time_t secs = static_cast<std::time_t>(t);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", std::localtime(&secs));
  return buf;
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// The trial's logs: the log artifacts it recorded, and the files a command trainer writes in its
// trial directory (<db>.trials/<id>/stdout.log, stderr.log) when it recorded none.
std::vector<std::string> trial_logs(const std::string& db, int64_t id, const std::vector<store::ArtifactRow>& artifacts) {
  std::vector<std::string> out;
  for (const auto& a : artifacts) {
    if (a.kind == "log" && std::find(out.begin(), out.end(), a.path) == out.end()) out.push_back(a.path);
  }
  const std::string dir = db + ".trials/" + std::to_string(id);
  for (const char* name : {"stdout.log", "stderr.log"}) {
    const std::string path = dir + "/" + name;
    const bool listed = std::any_of(out.begin(), out.end(), [&](const std::string& p) {
      std::error_code ec;
      return std::filesystem::equivalent(p, path, ec);
    });
    if (!listed && std::filesystem::exists(path)) out.push_back(path);
  }
  return out;
}

}  // namespace

Status cmd_run(const RunArgs& args, const std::atomic<int>& interrupt, bool& interrupted) {
  HPCTUNE_ASSIGN(auto cfg, config::load_config(args.config));
  scheduler::MasterOptions options;
  options.db_path = args.db.empty() ? cfg.storage : args.db;
  options.config = std::move(cfg);
  options.seed = args.seed;
  return run_and_report(options, args, interrupt, interrupted);
}

Status cmd_resume(const ResumeArgs& args, const std::atomic<int>& interrupt, bool& interrupted) {
  scheduler::MasterOptions options;
  options.db_path = args.db;
  options.max_trials = args.max_trials;
  return run_and_report(options, args, interrupt, interrupted);
}

namespace {

// Attempts closed as lost (a worker died or went silent, or the master restarted). Only a trial
// that was queued again (attempt > 1) or that failed (max_attempts lost attempts) can have one, so
// the others are not read.
Result<int64_t> count_lost_attempts(store::Store& db, const std::vector<store::TrialRow>& trials) {
  int64_t lost = 0;
  for (const auto& t : trials) {
    if (t.attempt <= 1 && t.state != store::TrialState::kFailed) continue;
    HPCTUNE_ASSIGN(auto attempts, db.attempts(t.id));
    for (const auto& a : attempts) lost += a.value("state", std::string()) == "lost";
  }
  return lost;
}

}  // namespace

Status cmd_status(const std::string& db, const std::string& format) {
  if (format != "table" && format != "json") {
    return err(Errc::kUsage, "--format: '" + format + "' is not one of table, json");
  }
  HPCTUNE_ASSIGN(Loaded l, load(db));
  HPCTUNE_ASSIGN(auto counts, l.store->count_by_state(l.campaign.id));
  const double now = unix_now();
  if (format == "json") {
    report::CampaignStatus st;
    st.campaign = l.campaign;
    HPCTUNE_ASSIGN(st.stages, l.store->stages(l.campaign.id));
    st.counts = std::move(counts);
    HPCTUNE_ASSIGN(st.attempts_lost, count_lost_attempts(*l.store, l.trials));
    st.trials = std::move(l.trials);
    st.objectives = l.objectives();
    st.maximize = l.maximize;
    st.front = l.front();
    st.now = now;
    std::printf("%s\n", report::status_json(st).dump(2).c_str());
    return finish_stdout();
  }
  const auto& c = l.campaign;
  std::printf("campaign   %s\nstate      %s\ndatabase   %s\nseed       %llu\n", c.name.c_str(), c.state.c_str(),
              db.c_str(), static_cast<unsigned long long>(c.seed));
  if (auto elapsed = report::campaign_elapsed(c, now)) std::printf("elapsed    %s\n", report::format_duration(*elapsed).c_str());
  std::vector<std::vector<std::string>> rows;
  int64_t total = 0;
  for (const auto state : store::kTrialStates) {
    const char* s = store::to_string(state);
    const int64_t n = counts.count(s) ? counts[s] : 0;
    total += n;
    rows.push_back({s, std::to_string(n)});
  }
  rows.push_back({"total", std::to_string(total)});
  std::printf("\nTrials by state:\n%s", report::format_table({"state", "trials"}, rows).c_str());
  if (auto best = report::best_trial(l.trials, l.maximize)) {
    const auto& b = *best;
    std::printf("\nBest trial %lld (%s = %s, attempt %lld)\n", static_cast<long long>(b.id), l.metric.c_str(),
                report::format_number(*b.objective).c_str(), static_cast<long long>(b.attempt));
    std::vector<std::vector<std::string>> prow;
    for (auto it = b.params.begin(); it != b.params.end(); ++it) {
      prow.push_back({it.key(), it->is_string() ? it->get<std::string>() : it->dump()});
    }
    std::printf("%s", report::format_table({"parameter", "value"}, prow).c_str());
    if (b.metrics.is_object() && !b.metrics.empty()) {
      std::vector<std::vector<std::string>> mrow;
      for (auto it = b.metrics.begin(); it != b.metrics.end(); ++it) {
        mrow.push_back({it.key(), it->is_number() ? report::format_number(it->get<double>()) : it->dump()});
      }
      std::printf("%s", report::format_table({"metric", "value"}, mrow).c_str());
    }
  } else {
    std::printf("\nNo finished trial yet.\n");
  }
  if (l.front()) {
    std::printf("\nPareto front (%zu trials, as of the last saved search state):\n%s", l.pareto.size(),
                report::pareto_table(l.trials, l.pareto, l.objective_metrics).c_str());
  }
  return finish_stdout();
}

Status cmd_trials(const std::string& db, int64_t top, const std::string& format) {
  HPCTUNE_ASSIGN(Loaded l, load(db));
  auto ranked = report::rank_trials(l.trials, l.maximize);
  if (top > 0 && static_cast<int64_t>(ranked.size()) > top) ranked.resize(top);
  if (format == "table") {
    std::printf("%s", report::trials_table(ranked, l.objectives(), l.front()).c_str());
  } else if (format == "csv") {
    std::printf("%s", report::trials_csv(ranked, l.front()).c_str());
  } else if (format == "json") {
    std::printf("%s\n", report::trials_json(ranked, l.front()).dump(2).c_str());
  } else {
    return err(Errc::kUsage, "--format: '" + format + "' is not one of table, csv, json");
  }
  return finish_stdout();
}

namespace {

// --format, or else the extension of -o's file.
Result<std::string> export_format(const std::string& format, const std::string& output) {
  if (!format.empty()) return format;
  const auto ext = std::filesystem::path(output).extension().string();
  if (ext == ".json" || ext == ".csv") return ext.substr(1);
  if (output.empty() || output == "-") return err(Errc::kUsage, "--format is required when writing to standard output (csv or json)");
  return err(Errc::kUsage, "cannot tell the format from '" + output + "' (not .csv or .json): give --format csv or json");
}

}  // namespace

Status cmd_export(const std::string& db, const std::string& format_arg, const std::string& output) {
  HPCTUNE_ASSIGN(const std::string format, export_format(format_arg, output));
  HPCTUNE_ASSIGN(Loaded l, load(db));
  std::string text;
  if (format == "csv") {
    text = report::trials_csv(l.trials, l.front());
  } else if (format == "json") {
    // Everything a trial recorded: its metrics at every step and its events, besides the summary.
    nlohmann::json trials = report::trials_json(l.trials, l.front());
    HPCTUNE_ASSIGN(auto events, l.store->events(l.campaign.id, 0));
    std::map<int64_t, nlohmann::json> events_of;
    nlohmann::json campaign_events = nlohmann::json::array();
    for (const auto& e : events) (e.trial_id > 0 ? events_of[e.trial_id] : campaign_events).push_back(event_json(e));
    for (auto& j : trials) {
      const int64_t id = j["trial"].get<int64_t>();
      HPCTUNE_ASSIGN(auto metrics, l.store->metrics(id));
      j["metrics_by_step"] = metrics_by_step_json(metrics);
      j["events"] = events_of.count(id) ? events_of[id] : nlohmann::json::array();
    }
    nlohmann::json doc = {{"campaign", {{"name", l.campaign.name},
                                        {"state", l.campaign.state},
                                        {"seed", l.campaign.seed},
                                        {"config", l.campaign.config_json},
                                        {"created_at", report::time_or_null(l.campaign.created_at)},
                                        {"finished_at", report::time_or_null(l.campaign.finished_at)}}},
                          {"trials", std::move(trials)},
                          {"events", std::move(campaign_events)}};
    if (l.front()) doc["pareto_front"] = l.pareto;
    text = doc.dump(2) + "\n";
  } else {
    return err(Errc::kUsage, "--format: '" + format + "' is not one of csv, json");
  }
  if (output.empty() || output == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return finish_stdout();
  }
  HPCTUNE_TRY(write_file_atomically(output, text));
  std::fprintf(stderr, "wrote %zu trials to %s\n", l.trials.size(), output.c_str());
  return {};
}

Status cmd_trial(const std::string& db, int64_t trial_id, const std::string& format, int64_t log_lines) {
  HPCTUNE_ASSIGN(Loaded l, load(db));
  auto it = std::find_if(l.trials.begin(), l.trials.end(), [&](const store::TrialRow& t) { return t.id == trial_id; });
  if (it == l.trials.end()) {
    return err(Errc::kNotFound, "campaign '" + l.campaign.name + "' in " + db + " has no trial " +
                                    std::to_string(trial_id) + " (its trials: " +
                                    (l.trials.empty() ? std::string("none")
                                                      : std::to_string(l.trials.front().id) + ".." +
                                                            std::to_string(l.trials.back().id)) + ")");
  }
  const store::TrialRow& t = *it;
  HPCTUNE_ASSIGN(auto metrics, l.store->metrics(t.id));
  HPCTUNE_ASSIGN(auto attempts, l.store->attempts(t.id));
  HPCTUNE_ASSIGN(auto artifacts, l.store->artifacts(t.id));
  HPCTUNE_ASSIGN(auto all_events, l.store->events(l.campaign.id, 0));
  std::vector<store::EventRow> events;
  for (auto& e : all_events) {
    if (e.trial_id == t.id) events.push_back(std::move(e));
  }
  const auto logs = trial_logs(db, t.id, artifacts);

  if (format == "json") {
    nlohmann::json j = report::trials_json({t}, l.front())[0];
    j["metrics_by_step"] = metrics_by_step_json(metrics);
    j["attempts"] = attempts;
    j["events"] = nlohmann::json::array();
    for (const auto& e : events) j["events"].push_back(event_json(e));
    j["artifacts"] = nlohmann::json::array();
    for (const auto& a : artifacts) {
      j["artifacts"].push_back({{"attempt", a.attempt}, {"kind", a.kind}, {"path", a.path}, {"bytes", a.bytes},
                                {"created_at", a.created_at}});
    }
    j["logs"] = nlohmann::json::array();
    for (const auto& path : logs) j["logs"].push_back({{"path", path}, {"tail", tail_lines(path, log_lines)}});
    std::printf("%s\n", j.dump(2).c_str());
    return {};
  }

  std::printf("trial %lld of campaign '%s' (%s)\n", static_cast<long long>(t.id), l.campaign.name.c_str(), db.c_str());
  std::vector<std::vector<std::string>> info = {
      {"state", store::to_string(t.state)},
      {"attempt", std::to_string(t.attempt)},
      {"group", t.group_id >= 0 ? std::to_string(t.group_id) : "-"},
      {"created", time_text(t.created_at)},
      {"started", time_text(t.started_at)},
      {"finished", time_text(t.finished_at)},
      {"seconds", t.finished_at > 0 && t.started_at > 0 ? report::format_number(std::round((t.finished_at - t.started_at) * 10) / 10) : "-"},
      {l.metric, t.objective ? report::format_number(*t.objective) : "-"}};
  if (l.front()) info.push_back({"pareto", l.pareto.count(t.id) ? "yes" : "no"});
  if (t.parent_trial_id) info.push_back({"parent", std::to_string(*t.parent_trial_id)});
  std::string error = t.error;
  while (!error.empty() && (error.back() == '\n' || error.back() == ' ')) error.pop_back();
  if (!error.empty() && error.find('\n') == std::string::npos) info.push_back({"error", error});
  std::printf("\n");
  for (const auto& row : info) std::printf("%-12s %s\n", row[0].c_str(), row[1].c_str());
  if (error.find('\n') != std::string::npos) std::printf("\nError:\n%s\n", error.c_str());

  std::vector<std::vector<std::string>> prow;
  for (auto p = t.params.begin(); p != t.params.end(); ++p) {
    prow.push_back({p.key(), p->is_string() ? p->get<std::string>() : p->dump()});
  }
  std::printf("\nParameters:\n%s", report::format_table({"parameter", "value"}, prow).c_str());

  // Metrics by step: one row per (attempt, step), one column per metric; long curves keep their
  // first and last rows.
  auto by_step = metrics_by_step_json(metrics);
  if (!by_step.empty()) {
    std::vector<std::string> names;
    for (const auto& r : metrics) {
      if (std::find(names.begin(), names.end(), r.name) == names.end()) names.push_back(r.name);
    }
    std::vector<std::string> header = {"attempt", "step"};
    header.insert(header.end(), names.begin(), names.end());
    std::vector<std::vector<std::string>> rows;
    constexpr size_t kHead = 10, kTail = 20;
    for (size_t i = 0; i < by_step.size(); ++i) {
      if (by_step.size() > kHead + kTail + 1 && i == kHead) {
        rows.push_back({"...", "(" + std::to_string(by_step.size() - kHead - kTail) + " more)"});
        i = by_step.size() - kTail - 1;
        continue;
      }
      const auto& r = by_step[i];
      std::vector<std::string> row = {std::to_string(r["attempt"].get<int64_t>()), std::to_string(r["step"].get<int64_t>())};
      for (const auto& n : names) {
        const auto& m = r["metrics"];
        row.push_back(!m.contains(n) ? "" : m[n].is_null() ? "nan" : report::format_number(m[n].get<double>()));
      }
      rows.push_back(std::move(row));
    }
    std::printf("\nMetrics by step:\n%s", report::format_table(header, rows).c_str());
  } else {
    std::printf("\nMetrics by step: none reported\n");
  }
  if (t.metrics.is_object() && !t.metrics.empty()) {
    std::vector<std::vector<std::string>> mrow;
    for (auto m = t.metrics.begin(); m != t.metrics.end(); ++m) {
      mrow.push_back({m.key(), m->is_number() ? report::format_number(m->get<double>()) : m->dump()});
    }
    std::printf("\nFinal metrics:\n%s", report::format_table({"metric", "value"}, mrow).c_str());
  }

  std::vector<std::vector<std::string>> arow;
  for (const auto& a : attempts) {
    const double s0 = a.value("started_at", 0.0), s1 = a.value("finished_at", 0.0);
    arow.push_back({std::to_string(a.value("attempt", int64_t{0})), std::to_string(a.value("group_id", int64_t{-1})),
                    a.value("state", std::string()), time_text(s0), s1 > 0 && s0 > 0 ? report::format_number(std::round((s1 - s0) * 10) / 10) : "-",
                    a.contains("error") && a["error"].is_string() ? first_line(a["error"].get<std::string>()) : ""});
  }
  std::printf("\nAttempts:\n%s", report::format_table({"attempt", "group", "state", "started", "seconds", "error"}, arow).c_str());

  std::vector<std::vector<std::string>> erow;
  for (const auto& e : events) {
    erow.push_back({time_text(e.t), e.kind, e.attempt > 0 ? std::to_string(e.attempt) : "",
                    e.detail.is_null() || e.detail.empty() ? "" : e.detail.dump()});
  }
  if (!erow.empty()) std::printf("\nEvents:\n%s", report::format_table({"time", "event", "attempt", "detail"}, erow).c_str());

  std::vector<std::vector<std::string>> frow;
  for (const auto& a : artifacts) {
    frow.push_back({std::to_string(a.attempt), a.kind, a.path, a.bytes >= 0 ? std::to_string(a.bytes) : "?"});
  }
  if (!frow.empty()) std::printf("\nArtifacts:\n%s", report::format_table({"attempt", "kind", "path", "bytes"}, frow).c_str());

  for (const auto& path : logs) {
    const std::string tail = tail_lines(path, log_lines);
    std::printf("\n--- %s (last %lld lines) ---\n%s%s", path.c_str(), static_cast<long long>(log_lines), tail.c_str(),
                tail.empty() ? "(empty)\n" : "\n");
  }
  return {};
}

Status cmd_validate(const std::string& path, bool print_json) {
  HPCTUNE_ASSIGN(auto cfg, config::load_config(path));
  // A budget that never reaches the model is valid, but almost certainly not what was meant.
  if (auto startup = config::model_startup(cfg); startup && !startup->model_used)
    std::fprintf(stderr, "hpctune validate: warning: %s\n", startup->text.c_str());
  if (print_json) {
    std::printf("%s\n", cfg.normalized.dump(2).c_str());
    return {};
  }
  // Fixed values are part of every trial but are not searched.
  size_t searched = 0, fixed = 0;
  for (const auto& spec : cfg.space.params()) ++(spec.type == search::ParamType::kFixed ? fixed : searched);
  std::printf("%s: ok\n", path.c_str());
  std::printf("  campaign '%s', %zu searched parameter(s)%s, algorithm %s, up to %lld trials, trainer %s, %lld group(s)\n",
              cfg.name.c_str(), searched, fixed ? (" and " + std::to_string(fixed) + " fixed").c_str() : "",
              cfg.algorithm.c_str(), static_cast<long long>(cfg.max_trials),
              cfg.trainer.value("kind", std::string("?")).c_str(), static_cast<long long>(cfg.resources.groups));
  return {};
}

Status cmd_worker(const std::string& master, int64_t group, int threads, const std::string& secret,
                  const std::atomic<int>& terminate) {
  HPCTUNE_ASSIGN(auto transport, protocol::connect_zmq(master));
  worker::WorkerOptions options;
  options.group = group;
  options.threads = threads;
  options.secret = secret;
  options.terminate = &terminate;
  options.make = trainers::trainer_factory();
  options.kinds = trainers::trainer_kinds();
  options.log = [group](const std::string& line) {
    std::fprintf(stderr, "%s  worker %lld: %s\n", timestamp().c_str(), static_cast<long long>(group), line.c_str());
  };
  return worker::run_worker(*transport, options);
}

}  // namespace hpctune::cli
