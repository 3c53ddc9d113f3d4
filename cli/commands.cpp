#include "cli/commands.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <set>

#include "cli/report_tables.h"
#include "scheduler/config.h"
#include "scheduler/master.h"
#include "scheduler/store.h"
#include "scheduler/transport.h"
#include "trainers/worker.h"

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
      last_ = progress_line(p, elapsed, terminal_width());
      const int width = terminal_width();
      std::fprintf(stderr, "\r\033[2K%s", last_.c_str());
      (void)width;
      std::fflush(stderr);
      return;
    }
    const int64_t finished = p.done + p.pruned + p.failed;
    if (finished != last_finished_) {
      last_finished_ = finished;
      std::fprintf(stderr, "%s  %s\n", timestamp().c_str(), progress_line(p, elapsed, 0).c_str());
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
  l.pareto = recorded_pareto_front(l.campaign);
  return l;
}

void print_summary(const std::string& db, int64_t top) {
  auto loaded = load(db);
  if (!loaded.ok()) {
    std::fprintf(stderr, "cannot read the results back: %s\n", loaded.error().to_string().c_str());
    return;
  }
  auto ranked = rank_trials(loaded->trials, loaded->maximize);
  if (static_cast<int64_t>(ranked.size()) > top) ranked.resize(top);
  std::printf("\nTop %zu trials by %s (%s):\n%s", ranked.size(), loaded->metric.c_str(),
              loaded->maximize ? "max" : "min", trials_table(ranked, loaded->metric).c_str());
  if (!ranked.empty() && ranked.front().objective) {
    std::printf("\nbest trial %lld: %s = %s  %s\n", static_cast<long long>(ranked.front().id), loaded->metric.c_str(),
                format_number(*ranked.front().objective).c_str(), ranked.front().params.dump().c_str());
  }
  std::printf("database: %s\n", db.c_str());
}

Status run_and_report(scheduler::MasterOptions& options, bool& interrupted) {
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
              o.interrupted ? "interrupted" : "completed", format_duration(o.elapsed_s).c_str(),
              static_cast<long long>(p.done), static_cast<long long>(p.pruned), static_cast<long long>(p.failed),
              static_cast<long long>(p.interrupted));
  const auto& c = o.counters;
  if (c.malformed + c.unregistered + c.out_of_order + c.stale_results + c.bad_version > 0) {
    std::printf("dropped messages: %lld malformed, %lld from unknown peers, %lld out of order, %lld stale results\n",
                static_cast<long long>(c.malformed), static_cast<long long>(c.unregistered),
                static_cast<long long>(c.out_of_order), static_cast<long long>(c.stale_results));
  }
  print_summary(o.db_path, 10);
  if (o.interrupted) std::printf("continue with: hpctune resume %s\n", o.db_path.c_str());
  return {};
}

}  // namespace

Status cmd_run(const RunArgs& args, const std::atomic<int>& interrupt, bool& interrupted) {
  HPCTUNE_ASSIGN(auto cfg, config::load_config(args.config));
  scheduler::MasterOptions options;
  options.db_path = args.db.empty() ? cfg.storage : args.db;
  options.config = std::move(cfg);
  options.groups = args.groups;
  options.seed = args.seed;
  options.interrupt = &interrupt;
  options.failpoint = args.failpoint;
  options.failpoint_hit = args.failpoint_hit;
  return run_and_report(options, interrupted);
}

Status cmd_resume(const std::string& db, std::optional<int64_t> groups, const std::atomic<int>& interrupt,
                  bool& interrupted, const std::string& failpoint, int64_t failpoint_hit) {
  scheduler::MasterOptions options;
  options.db_path = db;
  options.groups = groups;
  options.interrupt = &interrupt;
  options.failpoint = failpoint;
  options.failpoint_hit = failpoint_hit;
  return run_and_report(options, interrupted);
}

Status cmd_status(const std::string& db) {
  HPCTUNE_ASSIGN(Loaded l, load(db));
  HPCTUNE_ASSIGN(auto counts, l.store->count_by_state(l.campaign.id));
  const auto& c = l.campaign;
  std::printf("campaign   %s\nstate      %s\ndatabase   %s\nseed       %llu\n", c.name.c_str(), c.state.c_str(),
              db.c_str(), static_cast<unsigned long long>(c.seed));
  if (c.created_at > 0) {
    const double end = c.finished_at > 0 ? c.finished_at
                                         : std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    std::printf("elapsed    %s\n", format_duration(end - c.created_at).c_str());
  }
  std::vector<std::vector<std::string>> rows;
  int64_t total = 0;
  for (const char* s : {"queued", "assigned", "running", "done", "pruned", "failed", "interrupted"}) {
    const int64_t n = counts.count(s) ? counts[s] : 0;
    total += n;
    rows.push_back({s, std::to_string(n)});
  }
  rows.push_back({"total", std::to_string(total)});
  std::printf("\nTrials by state:\n%s", format_table({"state", "trials"}, rows).c_str());
  auto ranked = rank_trials(l.trials, l.maximize);
  if (!ranked.empty() && ranked.front().objective && ranked.front().state != store::TrialState::kFailed) {
    const auto& b = ranked.front();
    std::printf("\nBest trial %lld (%s = %s, attempt %lld)\n", static_cast<long long>(b.id), l.metric.c_str(),
                format_number(*b.objective).c_str(), static_cast<long long>(b.attempt));
    std::vector<std::vector<std::string>> prow;
    for (auto it = b.params.begin(); it != b.params.end(); ++it) {
      prow.push_back({it.key(), it->is_string() ? it->get<std::string>() : it->dump()});
    }
    std::printf("%s", format_table({"parameter", "value"}, prow).c_str());
    if (b.metrics.is_object() && !b.metrics.empty()) {
      std::vector<std::vector<std::string>> mrow;
      for (auto it = b.metrics.begin(); it != b.metrics.end(); ++it) {
        mrow.push_back({it.key(), it->is_number() ? format_number(it->get<double>()) : it->dump()});
      }
      std::printf("%s", format_table({"metric", "value"}, mrow).c_str());
    }
  } else {
    std::printf("\nNo finished trial yet.\n");
  }
  if (l.front()) {
    std::printf("\nPareto front (%zu trials, as of the last saved search state):\n%s", l.pareto.size(),
                pareto_table(l.trials, l.pareto, l.objective_metrics).c_str());
  }
  return {};
}

Status cmd_trials(const std::string& db, int64_t top, const std::string& format) {
  HPCTUNE_ASSIGN(Loaded l, load(db));
  auto ranked = rank_trials(l.trials, l.maximize);
  if (top > 0 && static_cast<int64_t>(ranked.size()) > top) ranked.resize(top);
  if (format == "table") {
    std::printf("%s", trials_table(ranked, l.metric, l.front()).c_str());
  } else if (format == "csv") {
    std::printf("%s", trials_csv(ranked, l.front()).c_str());
  } else if (format == "json") {
    std::printf("%s\n", trials_json(ranked, l.front()).dump(2).c_str());
  } else {
    return err(Errc::kUsage, "--format: '" + format + "' is not one of table, csv, json");
  }
  return {};
}

Status cmd_export(const std::string& db, const std::string& format, const std::string& output) {
  HPCTUNE_ASSIGN(Loaded l, load(db));
  std::string text;
  if (format == "csv") {
    text = trials_csv(l.trials, l.front());
  } else if (format == "json") {
    nlohmann::json doc = {{"campaign", {{"name", l.campaign.name},
                                        {"state", l.campaign.state},
                                        {"seed", l.campaign.seed},
                                        {"config", l.campaign.config_json},
                                        {"created_at", l.campaign.created_at},
                                        {"finished_at", l.campaign.finished_at}}},
                          {"trials", trials_json(l.trials, l.front())}};
    if (l.front()) doc["pareto_front"] = l.pareto;
    text = doc.dump(2) + "\n";
  } else {
    return err(Errc::kUsage, "--format: '" + format + "' is not one of csv, json");
  }
  if (output.empty() || output == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return {};
  }
  std::ofstream out(output, std::ios::binary);
  if (!out || !(out << text)) return err(Errc::kIo, "cannot write " + output);
  std::fprintf(stderr, "wrote %zu trials to %s\n", l.trials.size(), output.c_str());
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
  std::printf("%s: ok\n", path.c_str());
  std::printf("  campaign '%s', %zu searched parameter(s), algorithm %s, up to %lld trials, trainer %s, %lld group(s)\n",
              cfg.name.c_str(), cfg.space.size(), cfg.algorithm.c_str(), static_cast<long long>(cfg.max_trials),
              cfg.trainer.value("kind", std::string("?")).c_str(), static_cast<long long>(cfg.resources.groups));
  return {};
}

Status cmd_worker(const std::string& master, int64_t group, int threads, const std::atomic<int>& terminate) {
  HPCTUNE_ASSIGN(auto transport, transport::connect_zmq(master));
  trainers::WorkerOptions options;
  options.group = group;
  options.threads = threads;
  options.terminate = &terminate;
  options.log = [group](const std::string& line) {
    std::fprintf(stderr, "%s  worker %lld: %s\n", timestamp().c_str(), static_cast<long long>(group), line.c_str());
  };
  return trainers::run_worker(*transport, options);
}

}  // namespace hpctune::cli
