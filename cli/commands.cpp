#include "cli/commands.h"
#include "cli/console.h"

#include <fcntl.h>
#include <limits.h>
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
#include <thread>

#include "common/clock.h"
#include "common/endpoint.h"
#include "common/safe_open.h"
#include "common/system.h"
#include "config/config.h"
#include "dashboard/server.h"
#include "launch/slurm_launcher.h"
#include "scheduler/master.h"
#include "workflow/pbt_policy.h"
#include "workflow/stages.h"
#include "store/store.h"
#include "trainers/command_trainer.h"
#include "trainers/idx_dataset.h"
#include "trainers/packed_engine.h"
#include "protocol/transport.h"
#include "report/campaign.h"
#include "report/csv.h"
#include "report/format.h"
#include "report/progress.h"
#include "report/ranking.h"
#include "report/stages.h"
#include "report/status.h"
#include "report/tables.h"
#include "report/trial_detail.h"
#include "report/trial_json.h"
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

// The columns of the terminal standard output goes to; 0 when it is not one (a pipe or a file:
// no line is cut).
size_t stdout_width() {
  winsize ws{};
  if (isatty(STDOUT_FILENO) == 1 && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 0;
}

// printf onto the end of `out`.
template <typename... Args>
void appendf(std::string& out, const char* format, Args... args) {
  const int n = std::snprintf(nullptr, 0, format, args...);
  if (n <= 0) return;
  const std::size_t at = out.size();
  out.resize(at + static_cast<std::size_t>(n) + 1);
  std::snprintf(out.data() + at, static_cast<std::size_t>(n) + 1, format, args...);
  out.resize(at + static_cast<std::size_t>(n));
}

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

// Writes `text` to stdout and flushes it (finish_stdout). A text larger than stdio's buffer is
// written at once, and the reason it failed (errno) is lost by the time of the flush: taken here.
Status write_stdout(const std::string& text) {
  errno = 0;
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size()) {
    const int e = errno;
    return err(Errc::kIo, std::string("cannot write the output to standard output: ") +
                              (e != 0 ? std::strerror(e) : "a write failed"));
  }
  return finish_stdout();
}


void print_summary(const std::string& db, int64_t top) {
  auto view = report::open_campaign(db);
  if (!view.ok()) {
    std::fprintf(stderr, "cannot read the results back: %s\n", view.error().to_string().c_str());
    return;
  }
  const auto& v = *view;
  const auto& obj = v.objectives;
  auto ranked = report::rank_trials(v.main_trials, obj.maximize);
  if (static_cast<int64_t>(ranked.size()) > top) ranked.resize(top);
  const std::string of_stage = v.main_stage.empty() ? "" : " of stage '" + v.main_stage + "'";
  std::printf("\nTop %zu trials%s by %s (%s):\n%s", ranked.size(), of_stage.c_str(), obj.metric.c_str(),
              obj.maximize ? "max" : "min", report::trials_table(ranked, obj.columns(), v.front()).c_str());
  if (v.front()) {
    std::printf("\nPareto front: %zu trials (marked * under `pareto`; all of them: hpctune trials %s)\n",
                v.pareto.size(), db.c_str());
  }
  if (!ranked.empty() && ranked.front().objective) {
    std::printf("\nbest trial %lld: %s = %s  %s\n", static_cast<long long>(ranked.front().id), obj.metric.c_str(),
                report::format_number(*ranked.front().objective).c_str(),
                report::shown_params(ranked.front().params, ranked.front().meta).params.dump().c_str());
  }
  // A workflow: what each stage made of it.
  if (auto stages = v.store->stages(v.campaign.id); stages.ok() && report::show_stages(*stages)) {
    report::show_stage_states(*stages, report::master_liveness(v.campaign, db, unix_now()).gone);
    std::printf("\nStages:\n%s", report::stages_table(*stages, v.trials, stdout_width()).c_str());
  }
  std::printf("database: %s\n", db.c_str());
}

// "; the first failure, trial N: <reason>" for the closing message of a campaign without a
// success ("" when none is recorded).
std::string first_failure(const std::string& db) {
  auto view = report::open_campaign(db);
  if (!view.ok()) return "";
  auto first = report::first_failure(view->trials);
  if (!first) return "";
  std::string error = first->error;
  while (!error.empty() && (error.back() == '\n' || error.back() == ' ')) error.pop_back();
  return "\nthe first failure, trial " + std::to_string(first->id) + ": " + error;
}

// A master that others can reach without CURVE (resources.security none off the private ipc
// socket): say so.
void warn_if_network_bind(const char* command, const config::Resources& r) {
  if (transport_warning_needed(r.security, r.bind))
    std::fprintf(stderr, "hpctune %s: warning: %s\n", command, network_bind_warning(r.bind).c_str());
}

// `run --dashboard`: the dashboard's API over the running campaign, on 127.0.0.1 (only this
// machine: a remote view is `hpctune dashboard DB --host ...`) with a generated token, served from a thread
// of its own while the master runs. Started at the first progress report, when the campaign is in
// its database; a port that cannot be bound is said in the log and the campaign goes on without
// it. The server's own failure is kept and said when it stops (never lost with its thread).
class LiveDashboard {
 public:
  bool tried = false;

  void start(const std::string& db_path, int64_t port, Console& console) {
    tried = true;
    dashboard::ServerOptions o;
    o.databases = {db_path};
    o.port = static_cast<int>(port);
    auto server = dashboard::Server::bind(o);
    if (!server.ok()) {
      console.log("dashboard: not started, the campaign goes on without it: " + server.error().message());
      return;
    }
    server_ = std::move(server).value();
    // The token is generated for this run: the URL carries it, as `hpctune dashboard` prints it.
    console.log("dashboard: the live campaign at " + server_->browser_url() + "#/c/0 (API at " + server_->url() +
                "api/campaigns/0/status with 'Authorization: Bearer " + server_->token() + "')");
    thread_ = std::thread([this] {
      Status served;
      try {
        served = server_->serve();
      } catch (const std::exception& e) {
        served = err(Errc::kFailed, std::string("the dashboard's thread failed: ") + e.what());
      }
      served_ = std::move(served);
      finished_.store(true, std::memory_order_release);
    });
  }

  // Stops the server and joins its thread; what serve() returned.
  Status stop() {
    if (!server_) return {};
    // A stop() before serve() has begun listening is lost: ask again until the thread ends.
    while (!finished_.load(std::memory_order_acquire)) {
      server_->stop();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    thread_.join();
    server_.reset();
    return served_;
  }

  ~LiveDashboard() { (void)stop(); }

 private:
  std::unique_ptr<dashboard::Server> server_;
  std::thread thread_;
  std::atomic<bool> finished_{false};
  Status served_;
};

// Runs the master with what `run` and `resume` share (the interrupt flag, the test-only fail
// point, the console, the bind warning) and prints the outcome.
template <typename Args>
Status run_and_report(const char* command, scheduler::MasterOptions& options, const Args& args,
                      const std::atomic<int>& interrupt, bool& interrupted) {
  options.warn = [command](const std::string& text) { std::fprintf(stderr, "hpctune %s: warning: %s\n", command, text.c_str()); };
  options.groups = args.groups;
  options.bind = args.bind;
  options.interrupt = &interrupt;
  options.preempt = args.preempt;
  options.failpoint = args.failpoint;
  options.failpoint_hit = args.failpoint_hit;
  Console console;
  options.log = [&](const std::string& line) { console.log(line); };
  LiveDashboard live;
  const std::string db_path = !options.db_path.empty() ? options.db_path : options.config ? options.config->storage : "";
  options.progress = [&](const hpctune::Progress& p, double elapsed) {
    // The first report comes once the campaign is in its database: the dashboard can open it.
    if (args.dashboard_port && !live.tried) live.start(db_path, *args.dashboard_port, console);
    console.progress(p, elapsed);
  };
  options.make_stage = workflow::make_stage;
  auto outcome = scheduler::run_master(options);
  const Status dashboard_status = live.stop();
  if (!dashboard_status.ok()) console.log("dashboard: " + dashboard_status.error().message());
  console.finish();
  if (!outcome.ok()) return std::move(outcome).error();
  const auto& o = outcome.value();
  interrupted = o.interrupted;
  const auto& p = o.progress;
  std::printf("campaign '%s' %s in %s: %lld done, %lld pruned, %lld failed, %lld interrupted\n", o.name.c_str(),
              o.interrupted ? "interrupted" : !o.gave_up.empty() ? "stopped" : !o.failed_stages.empty() ? "failed" : "completed",
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
  if (!o.requeue_job.empty()) {
    // Last: SLURM ends this batch job (this process too) as it requeues it; everything is recorded
    // and the store closed. The requeued job's script runs `hpctune resume`.
    std::printf("requeueing SLURM job %s: the requeued job resumes the campaign\n", o.requeue_job.c_str());
    HPCTUNE_TRY(finish_stdout());
    return launch::slurm_requeue(o.requeue_job);
  }
  if (o.interrupted) {
    std::printf("continue with: hpctune resume %s\n", o.db_path.c_str());
    return finish_stdout();
  }
  if (!o.gave_up.empty()) {
    // The stages it failed: the one that was running, and those that depend on a failed one.
    return err(Errc::kFailed, "campaign '" + o.name + "' stopped: " + o.gave_up + first_failure(o.db_path) +
                                  (o.failed_stages.empty() ? "" : "\n" + o.failed_stages) +
                                  "\nfix the trainer or the config; `hpctune trials " + o.db_path +
                                  " --format json` shows every error");
  }
  if (p.done + p.pruned == 0) {
    // The stages that failed first, each with why: one that could not start ran no trial, and its
    // reason is nowhere else in the message.
    const std::string stages = o.failed_stages.empty() ? "" : "campaign '" + o.name + "' failed: " + o.failed_stages + "\n";
    return err(Errc::kFailed, stages + "no trial succeeded in campaign '" + o.name + "' (" + std::to_string(p.failed) +
                                  " failed)" + first_failure(o.db_path) + "\n`hpctune trials " + o.db_path +
                                  " --format json` shows every error" +
                                  (stages.empty() ? "" : "; `hpctune status " + o.db_path + "` shows every stage"));
  }
  if (!o.failed_stages.empty()) {
    return err(Errc::kFailed, "campaign '" + o.name + "' failed: " + o.failed_stages + "\n`hpctune status " +
                                  o.db_path + "` shows every stage; `hpctune resume " + o.db_path +
                                  "` runs again what did not complete");
  }
  // The campaign is recorded whatever happens to the summary; a summary that could not be written
  // still makes the command fail, so a script sees it.
  return finish_stdout();
}

}  // namespace

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

Status cmd_run(const RunArgs& args, const std::atomic<int>& interrupt, bool& interrupted) {
  HPCTUNE_ASSIGN(auto cfg, config::load_config(args.config));
  for (const auto& text : config::idle_group_warnings(cfg, args.groups.value_or(cfg.resources.groups)))
    std::fprintf(stderr, "hpctune run: warning: %s\n", text.c_str());
  for (const auto& text : config::objective_direction_warnings(cfg))
    std::fprintf(stderr, "hpctune run: warning: %s\n", text.c_str());
  for (const auto& text : config::trainer_file_warnings(cfg))
    std::fprintf(stderr, "hpctune run: warning: %s\n", text.c_str());
  scheduler::MasterOptions options;
  options.db_path = args.db.empty() ? cfg.storage : args.db;
  options.config = std::move(cfg);
  options.seed = args.seed;
  return run_and_report("run", options, args, interrupt, interrupted);
}

Status cmd_resume(const ResumeArgs& args, const std::atomic<int>& interrupt, bool& interrupted) {
  // The campaign's own address unless --bind: the master reads it from the stored config, after
  // taking the master lock, and warns (options.warn) as for `run`.
  scheduler::MasterOptions options;
  options.db_path = args.db;
  options.max_trials = args.max_trials;
  return run_and_report("resume", options, args, interrupt, interrupted);
}

Status cmd_status(const std::string& db, const std::string& format) {
  if (format != "table" && format != "json") {
    return err(Errc::kUsage, "--format: '" + format + "' is not one of table, json");
  }
  HPCTUNE_ASSIGN(report::CampaignView v, report::open_campaign(db));
  HPCTUNE_ASSIGN(report::CampaignStatus st, report::campaign_status(v, unix_now()));
  if (format == "json") {
    return write_stdout(report::status_json(st).dump(2) + "\n");
  }
  return write_stdout(report::terminal_safe(report::status_text(v, st, stdout_width())));
}

Status cmd_schedule(const std::string& db, const std::string& stage, const std::string& format) {
  if (format != "table" && format != "json" && format != "yaml") {
    return err(Errc::kUsage, "--format: '" + format + "' is not one of table, json, yaml");
  }
  HPCTUNE_ASSIGN(report::CampaignView v, report::open_campaign(db));
  HPCTUNE_ASSIGN(auto stages, v.store->stages(v.campaign.id));
  HPCTUNE_ASSIGN(store::StageRow pbt, report::find_pbt_stage(stages, stage));
  HPCTUNE_ASSIGN(std::string out, report::schedule_text(pbt, format));
  // What is printed can be replayed: the intervals chain from step 0 (workflow/pbt_policy.h).
  if (auto replay = workflow::replay_schedule(pbt.result["schedule"], ""); !replay.ok()) {
    return err(Errc::kFailed, "pbt stage '" + pbt.name + "': its recorded schedule cannot be replayed: " +
                                  replay.error().message());
  }
  return write_stdout(out);
}

namespace {

// The trials of stage `name` ("" = every trial). An unknown name is an error that lists the stages.
Result<std::vector<store::TrialRow>> trials_of_stage(const std::vector<store::TrialRow>& trials,
                                                     const std::vector<store::StageRow>& stages, const std::string& name) {
  if (name.empty()) return trials;
  if (std::none_of(stages.begin(), stages.end(), [&](const store::StageRow& s) { return s.name == name; })) {
    std::string names;
    for (const auto& s : stages) names += (names.empty() ? "" : ", ") + s.name;
    return err(Errc::kUsage, "--stage: the campaign has no stage '" + name + "' (its stages: " +
                                 (names.empty() ? std::string("none") : names) + ")");
  }
  std::vector<store::TrialRow> out;
  for (const auto& t : trials) {
    if (report::stage_name(t, stages) == name) out.push_back(t);
  }
  return out;
}

}  // namespace

Status cmd_trials(const std::string& db, int64_t top, const std::string& format, const std::string& stage) {
  if (format != "table" && format != "csv" && format != "json") {
    return err(Errc::kUsage, "--format: '" + format + "' is not one of table, csv, json");
  }
  HPCTUNE_ASSIGN(report::CampaignView v, report::open_campaign(db));
  HPCTUNE_ASSIGN(const auto stages, v.store->stages(v.campaign.id));
  HPCTUNE_ASSIGN(const auto of_stage, trials_of_stage(v.trials, stages, stage));
  auto ranked = report::rank_trials(of_stage, v.objectives.maximize);
  if (top > 0 && static_cast<int64_t>(ranked.size()) > top) ranked.resize(top);
  if (format == "table") {
    const std::string mark = report::simulated_mark(v.simulated);  // "" for a campaign that ran for real
    return write_stdout((mark.empty() ? "" : mark + "\n") +
                        report::trials_table(ranked, v.objectives.columns(), v.front(), &stages));
  }
  if (format == "csv") return write_stdout(report::trials_csv(ranked, {v.front(), &stages}));
  return write_stdout(report::trials_json(ranked, v.front(), &stages).dump(2) + "\n");
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

namespace {

// Whether (dir, name) names the database `db` or one of the files SQLite and hpctune keep beside it
// (-wal, -shm, -journal, -master.lock): by name in the same directory (the file may not exist
// yet: a -wal appears when a campaign writes) and by device and inode (a hard link).
bool names_database(const std::string& db, int dir, const std::string& name) {
  struct stat out_dir {}, out_file {};
  if (::fstat(dir, &out_dir) != 0) return false;
  const bool out_exists = ::fstatat(dir, name.c_str(), &out_file, AT_SYMLINK_NOFOLLOW) == 0;
  std::vector<std::string> dbs = {db};
  char real[PATH_MAX];
  if (::realpath(db.c_str(), real) != nullptr) dbs.emplace_back(real);
  for (const auto& path : dbs) {
    const std::filesystem::path p(path);
    const std::string parent = p.parent_path().empty() ? std::string(".") : p.parent_path().string();
    struct stat db_dir {};
    const bool same_dir =
        ::stat(parent.c_str(), &db_dir) == 0 && db_dir.st_dev == out_dir.st_dev && db_dir.st_ino == out_dir.st_ino;
    for (const char* suffix : {"", "-wal", "-shm", "-journal", "-master.lock"}) {
      const std::string file = p.filename().string() + suffix;
      if (same_dir && name == file) return true;
      struct stat st {};
      if (out_exists && ::stat((path + suffix).c_str(), &st) == 0 && st.st_dev == out_file.st_dev &&
          st.st_ino == out_file.st_ino) {
        return true;
      }
    }
  }
  return false;
}

// Writes an export of `db` to `output`, whole or not at all, never onto what it reads: not onto the
// database or its -wal/-shm (by any name, link or hard link), not through a symbolic link that
// another user could have planted (common/safe_open.h), and only as a regular file (a FIFO would
// block, a device or directory is not an export). The file gets the database's mode (it holds
// what the database holds, trainer.env values included): a temporary file beside it, created
// exclusively with that mode, then renamed over `output`.
Status write_export(const std::string& db, const std::string& output, const std::string& text) {
  struct stat db_st {};
  if (::stat(db.c_str(), &db_st) != 0) return err(Errc::kIo, "cannot stat " + db + ": " + std::strerror(errno));
  const mode_t mode = db_st.st_mode & 0777;
  auto resolved = resolve_without_planted_links(output);
  // A directory on the way that does not exist is a write that cannot be made (exit 1, as a full
  // disk), not a missing input.
  if (!resolved.ok() && resolved.error().code() == Errc::kNotFound)
    return err(Errc::kIo, "cannot write " + output + ": " + resolved.error().message());
  HPCTUNE_ASSIGN(ResolvedPath out, std::move(resolved));
  const int dir = out.dir.get();
  if (names_database(db, dir, out.name)) {
    return err(Errc::kUsage, "-o " + output + " is the database " + db +
                                 " (or a file SQLite keeps beside it): an export never replaces what it reads");
  }
  struct stat st {};
  if (::fstatat(dir, out.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode)) {
    return err(Errc::kUsage, "-o " + output + " is not a regular file (" +
                                 (S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISDIR(st.st_mode) ? "a directory"
                                  : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device" : "not a file") +
                                 "); write to standard output with -o - or leave -o out");
  }
  unsigned char random[8];
  if (!random_bytes(random, sizeof random)) return err(Errc::kIo, "cannot draw a temporary name for " + output);
  std::string tmp = ".";  // not "." + ...: GCC 12's -Wrestrict false positive (PR 105329)
  tmp += out.name;
  tmp += ".tmp-";
  for (unsigned char b : random) {
    const char* hex = "0123456789abcdef";
    tmp += hex[b >> 4];
    tmp += hex[b & 15];
  }
  UniqueFd fd(::openat(dir, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
  if (!fd.valid()) return err(Errc::kIo, "cannot create a file beside " + output + ": " + std::strerror(errno));
  Status s;
  if (::fchmod(fd.get(), mode) != 0) s = err(Errc::kIo, "cannot set the mode of " + output + ": " + std::strerror(errno));
  for (std::size_t done = 0; s.ok() && done < text.size();) {
    const ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) s = err(Errc::kIo, "cannot write " + output + ": " + std::strerror(errno));
    else done += static_cast<std::size_t>(n);
  }
  if (s.ok() && ::fsync(fd.get()) != 0) s = err(Errc::kIo, "cannot write " + output + ": " + std::strerror(errno));
  const int closed = ::close(fd.get());
  (void)fd.release();
  if (s.ok() && closed != 0) s = err(Errc::kIo, "cannot write " + output + ": " + std::strerror(errno));
  if (s.ok() && ::renameat(dir, tmp.c_str(), dir, out.name.c_str()) != 0) {
    s = err(Errc::kIo, "cannot rename " + tmp + " to " + output + ": " + std::strerror(errno));
  }
  if (!s.ok()) ::unlinkat(dir, tmp.c_str(), 0);
  return s;
}

}  // namespace

Status cmd_export(const std::string& db, const std::string& format_arg, const std::string& output) {
  HPCTUNE_ASSIGN(const std::string format, export_format(format_arg, output));
  HPCTUNE_ASSIGN(report::CampaignView v, report::open_campaign(db));
  std::string text;
  if (format == "csv") {
    HPCTUNE_ASSIGN(const auto stages, v.store->stages(v.campaign.id));
    text = report::trials_csv(v.trials, {v.front(), &stages});
  } else if (format == "json") {
    HPCTUNE_ASSIGN(auto doc, report::export_json(v));
    text = doc.dump(2) + "\n";
  } else {
    return err(Errc::kUsage, "--format: '" + format + "' is not one of csv, json");
  }
  if (output.empty() || output == "-") {
    return write_stdout(text);
  }
  HPCTUNE_TRY(write_export(db, output, text));
  std::fprintf(stderr, "wrote %zu trials to %s\n", v.trials.size(), output.c_str());
  return {};
}

Status cmd_trial(const std::string& db, int64_t trial_id, const std::string& format, int64_t log_lines) {
  HPCTUNE_ASSIGN(report::CampaignView v, report::open_campaign(db));
  HPCTUNE_ASSIGN(report::TrialDetail d, report::load_trial(v, trial_id));
  if (format == "json") {
    return write_stdout(report::trial_detail_json(d, v, log_lines).dump(2) + "\n");
  }
  const store::TrialRow& t = d.trial;
  const auto& metrics = d.metrics;
  const auto& attempts = d.attempts;
  const auto& artifacts = d.artifacts;
  const auto& events = d.events;
  const auto& logs = d.logs;

  // Everything shown may come from the trainer (its error, log tails, metric names): collected,
  // then printed with terminal control characters escaped. Such text is appended as it is, never
  // through a %s, which would stop at its first NUL byte.
  std::string out = "trial " + std::to_string(t.id) + " of campaign '" + v.campaign.name + "' (" + db + ")\n";
  // A trial of several attempts (a pbt member's intervals, rungs, retries) started with its first:
  // `seconds` sums them all (report::trial_seconds), so `started` is the first one's start too.
  double first_start = t.started_at;
  for (const auto& a : attempts) {
    const double s0 = a.value("started_at", 0.0);
    if (s0 > 0 && (first_start <= 0 || s0 < first_start)) first_start = s0;
  }
  const double seconds = report::trial_seconds(t);
  char seconds_buf[32];
  std::snprintf(seconds_buf, sizeof seconds_buf, "%.1f", seconds);
  std::string seconds_text = seconds > 0 ? seconds_buf : "-";
  if (seconds > 0 && attempts.size() > 1) seconds_text += " (" + std::to_string(attempts.size()) + " attempts)";
  std::vector<std::vector<std::string>> info = {
      {"stage", d.stage.empty() ? "-" : d.stage},
      {"state", store::to_string(t.state)},
      {"attempt", std::to_string(t.attempt)},
      {"group", t.group_id >= 0 ? std::to_string(t.group_id) : "-"},
      {"created", report::time_text(t.created_at)},
      {"started", report::time_text(first_start)},
      {"finished", report::time_text(t.finished_at)},
      {"seconds", seconds_text},
      {v.objectives.metric, t.objective ? report::format_number(*t.objective) : "-"}};
  if (v.front()) info.push_back({"pareto", v.pareto.count(t.id) ? "yes" : "no"});
  if (t.parent_trial_id) info.push_back({"parent", std::to_string(*t.parent_trial_id)});
  if (!d.sync_mode.empty()) info.push_back({"sync mode", d.sync_mode});
  std::string error = t.error;
  while (!error.empty() && (error.back() == '\n' || error.back() == ' ')) error.pop_back();
  if (!error.empty() && error.find('\n') == std::string::npos) info.push_back({"error", error});
  out += "\n";
  for (const auto& row : info) out += row[0] + std::string(row[0].size() < 12 ? 12 - row[0].size() : 0, ' ') + " " + row[1] + "\n";
  if (error.find('\n') != std::string::npos) out += "\nError:\n" + error + "\n";

  // The searched values, then what hpctune added to them (trainers/internal_params.h): where the
  // trial started from, and how far its stage let it train.
  const report::ShownParams shown = report::shown_params(t.params, t.meta);
  auto rows_of = [](const nlohmann::json& object) {
    std::vector<std::vector<std::string>> rows;
    for (auto p = object.begin(); p != object.end(); ++p) {
      rows.push_back({p.key(), p->is_string() ? p->get<std::string>() : p->dump()});
    }
    return rows;
  };
  appendf(out, "\nParameters:\n%s", report::format_table({"parameter", "value"}, rows_of(shown.params)).c_str());
  auto lineage = rows_of(shown.lineage);
  for (const auto& l : d.parents) lineage.push_back({l.relation, "trial " + std::to_string(l.parent_trial_id)});
  if (!lineage.empty()) appendf(out, "\nLineage:\n%s", report::format_table({"lineage", "value"}, lineage).c_str());
  if (!shown.run_settings.empty()) {
    appendf(out, "\nRun settings:\n%s",
            report::format_table({"setting", "value"}, rows_of(shown.run_settings)).c_str());
  }

  // Metrics by step: one row per (attempt, step), one column per metric; long curves keep their
  // first and last rows.
  auto by_step = report::metrics_by_step_json(metrics);
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
    appendf(out, "\nMetrics by step:\n%s", report::format_table(header, rows).c_str());
  } else {
    out += "\nMetrics by step: none reported\n";
  }
  if (t.metrics.is_object() && !t.metrics.empty()) {
    std::vector<std::vector<std::string>> mrow;
    for (auto m = t.metrics.begin(); m != t.metrics.end(); ++m) {
      mrow.push_back({m.key(), m->is_number() ? report::format_number(m->get<double>()) : m->dump()});
    }
    appendf(out, "\nFinal metrics:\n%s", report::format_table({"metric", "value"}, mrow).c_str());
  }

  std::vector<std::vector<std::string>> arow;
  for (const auto& a : attempts) {
    const double s0 = a.value("started_at", 0.0), s1 = a.value("finished_at", 0.0);
    const std::string gpus = a.value("devices", std::string());
    arow.push_back({std::to_string(a.value("attempt", int64_t{0})), std::to_string(a.value("group_id", int64_t{-1})),
                    gpus.empty() ? "-" : gpus, a.value("state", std::string()), report::time_text(s0), s1 > 0 && s0 > 0 ? report::format_number(std::round((s1 - s0) * 10) / 10) : "-",
                    a.contains("error") && a["error"].is_string() ? report::first_line(a["error"].get<std::string>()) : ""});
  }
  appendf(out, "\nAttempts:\n%s", report::format_table({"attempt", "group", "GPUs", "state", "started", "seconds", "error"}, arow).c_str());

  std::vector<std::vector<std::string>> erow;
  for (const auto& e : events) {
    erow.push_back({report::time_text(e.t), e.kind, e.attempt > 0 ? std::to_string(e.attempt) : "",
                    e.detail.is_null() || e.detail.empty() ? "" : e.detail.dump()});
  }
  if (!erow.empty()) appendf(out, "\nEvents:\n%s", report::format_table({"time", "event", "attempt", "detail"}, erow).c_str());

  std::vector<std::vector<std::string>> frow;
  for (const auto& a : artifacts) {
    frow.push_back({std::to_string(a.attempt), a.kind, a.path, a.bytes >= 0 ? std::to_string(a.bytes) : "?"});
  }
  if (!frow.empty()) appendf(out, "\nArtifacts:\n%s", report::format_table({"attempt", "kind", "path", "bytes"}, frow).c_str());

  for (const auto& path : logs) {
    const std::string tail = report::tail_lines(db, path, log_lines);
    out += "\n--- " + path + " (last " + std::to_string(log_lines) + " lines) ---\n" + tail +
           (tail.empty() ? "(empty)\n" : "\n");
  }
  return write_stdout(report::terminal_safe(out));
}

namespace {

// validate's summary of every stage: each built as `run` builds it (workflow::make_stage), which
// says how many trials it runs (StageRuntime::max_trials: a search's budget, an ensemble's
// retrains, a transfer's targets and baselines, a pbt population). Errors are the config's.
struct StageBudget {
  std::string name, kind;
  std::vector<std::string> from;
  int64_t trials = 0;
};

Result<std::vector<StageBudget>> stage_budgets(const config::CampaignConfig& cfg) {
  std::vector<StageBudget> out;
  for (const scheduler::StagePlan& plan : scheduler::stage_plan(cfg)) {
    HPCTUNE_ASSIGN(auto stage, workflow::make_stage(plan, cfg, std::nullopt));
    out.push_back({plan.name, plan.kind, plan.from, stage->max_trials()});
  }
  return out;
}

std::string stage_budget_line(const StageBudget& b) {
  std::string from;
  for (const auto& f : b.from) from += (from.empty() ? " from " : ", ") + f;
  const std::string trials = b.trials > 0 ? "up to " + std::to_string(b.trials) + (b.trials == 1 ? " trial" : " trials")
                                          : std::string("no trials of its own");
  return "    stage '" + b.name + "' (" + b.kind + from + "): " + trials + "\n";
}

}  // namespace

Status cmd_validate(const std::string& path, bool print_json) {
  HPCTUNE_ASSIGN(auto cfg, config::load_config(path));
  warn_if_network_bind("validate", cfg.resources);
  // A budget that never reaches the model is valid, but almost certainly not what was meant.
  if (auto startup = config::model_startup(cfg); startup && !startup->model_used)
    std::fprintf(stderr, "hpctune validate: warning: %s\n", startup->text.c_str());
  for (const auto& text : config::idle_group_warnings(cfg, cfg.resources.groups))
    std::fprintf(stderr, "hpctune validate: warning: %s\n", text.c_str());
  for (const auto& text : config::objective_direction_warnings(cfg))
    std::fprintf(stderr, "hpctune validate: warning: %s\n", text.c_str());
  for (const auto& text : config::trainer_file_warnings(cfg))
    std::fprintf(stderr, "hpctune validate: warning: %s\n", text.c_str());
  if (print_json) {
    std::printf("%s\n", cfg.normalized.dump(2).c_str());
    return {};
  }
  // Fixed values are part of every trial but are not searched.
  size_t searched = 0, fixed = 0;
  for (const auto& spec : cfg.space.params()) ++(spec.type == search::ParamType::kFixed ? fixed : searched);
  // Every stage's trials, as `run` will run them: the campaign's budget is their sum.
  HPCTUNE_ASSIGN(const std::vector<StageBudget> budgets, stage_budgets(cfg));
  int64_t total = 0;
  for (const StageBudget& b : budgets) total += b.trials;
  std::printf("%s: ok\n", path.c_str());
  std::printf("  campaign '%s', %zu searched parameter(s)%s, algorithm %s, up to %lld trials%s, trainer %s, %lld group(s)\n",
              cfg.name.c_str(), searched, fixed ? (" and " + std::to_string(fixed) + " fixed").c_str() : "",
              cfg.algorithm.c_str(), static_cast<long long>(total), cfg.stages.empty() ? "" : " in all",
              cfg.trainer.value("kind", std::string("?")).c_str(), static_cast<long long>(cfg.resources.groups));
  if (!cfg.stages.empty()) {
    std::string lines = "  " + std::to_string(budgets.size()) + (budgets.size() == 1 ? " stage:\n" : " stages:\n");
    for (const StageBudget& b : budgets) lines += stage_budget_line(b);
    std::fputs(lines.c_str(), stdout);
  }
  return {};
}

namespace {

// A packed group's slots: slot i is group `group` + i with the i-th credential.
Status run_packed_worker(const std::string& master, const worker::WorkerOptions& base, int64_t slots,
                         const std::string& secret, const protocol::TransportOptions& transport_options) {
  std::vector<std::string> secrets;
  for (size_t from = 0;;) {
    const size_t comma = secret.find(',', from);
    secrets.push_back(secret.substr(from, comma == std::string::npos ? std::string::npos : comma - from));
    if (comma == std::string::npos) break;
    from = comma + 1;
  }
  // One per slot, else the master would ignore the slots without one (run_worker refuses them).
  for (size_t i = 0; i < static_cast<size_t>(slots); ++i) {
    if (i >= secrets.size() || secrets[i].empty()) {
      return err(Errc::kConfig, std::string("no launch credential for slot ") + std::to_string(i) + " (group " +
                                    std::to_string(base.group + static_cast<int64_t>(i)) + ") of --slots " +
                                    std::to_string(slots) + ": the environment variable " + protocol::kSecretEnv +
                                    " has one per slot, comma-separated, when the master's launcher starts the pack");
    }
  }
  secrets.resize(static_cast<size_t>(slots));
  trainers::PackEngine::instance().set_slots(slots);
  // The slots share the decoded datasets (the pack's members must read one data set), not a
  // command trainer's persistent program (one trial at a time uses one).
  const auto datasets = std::make_shared<trainers::DatasetCache>();
  std::vector<std::unique_ptr<protocol::ClientTransport>> owned;
  std::vector<protocol::ClientTransport*> transports;
  std::vector<worker::WorkerOptions> options;
  for (int64_t i = 0; i < slots; ++i) {
    protocol::TransportOptions to = transport_options;
    if (to.security == protocol::TransportOptions::Security::kPlain) to.plain_password = secrets[static_cast<size_t>(i)];
    HPCTUNE_ASSIGN(auto transport, protocol::connect_zmq(master, to));
    transports.push_back(transport.get());
    owned.push_back(std::move(transport));
    worker::WorkerOptions o = base;
    o.group = base.group + i;
    o.secret = secrets[static_cast<size_t>(i)];
    o.make = [services = trainers::TrainerServices{datasets, std::make_shared<trainers::CommandPrograms>()}](
                 const std::string& kind) { return trainers::make_trainer(kind, services); };
    o.log = [g = o.group, slots](const std::string& line) {
      std::fprintf(stderr, "%s  worker %lld (slot of a packed group of %lld): %s\n", timestamp().c_str(),
                   static_cast<long long>(g), static_cast<long long>(slots), report::terminal_safe(line).c_str());
    };
    options.push_back(std::move(o));
  }
  return worker::run_worker_slots(transports, std::move(options));
}

}  // namespace

Status cmd_worker(const std::string& master, int64_t group, int threads, const std::string& secret,
                  const protocol::TransportOptions& transport_options, const std::atomic<int>& terminate,
                  int64_t slots) {
  worker::WorkerOptions options;
  options.group = group;
  options.threads = threads;
  options.secret = secret;
  options.terminate = &terminate;
  options.make = trainers::trainer_factory();
  options.kinds = trainers::trainer_kinds();
  options.log = [group](const std::string& line) {
    std::fprintf(stderr, "%s  worker %lld: %s\n", timestamp().c_str(), static_cast<long long>(group),
                 report::terminal_safe(line).c_str());
  };
  if (slots > 1) return run_packed_worker(master, options, slots, secret, transport_options);
  HPCTUNE_ASSIGN(auto transport, protocol::connect_zmq(master, transport_options));
  return worker::run_worker(*transport, options);
}

}  // namespace hpctune::cli
