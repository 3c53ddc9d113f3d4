#include "trainers/command_trainer.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <type_traits>

#include "common/shell_template.h"
#include "common/system.h"
#include "common/text.h"
#include "launch/child_process.h"
#include "trainers/rank_environment.h"

#ifndef HPCTUNE_MPIEXEC
#define HPCTUNE_MPIEXEC ""  // set by trainers/CMakeLists.txt: the mpirun found at configure time
#endif

namespace hpctune::trainers {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// --- settings ------------------------------------------------------------------------------------

Result<CommandSettings> parse_command_settings(const nlohmann::json& trainer) {
  SettingsReader r("command", trainer, command_setting_specs());
  HPCTUNE_TRY(r.check_known());
  CommandSettings s;
  if (!r.has("command")) return err(Errc::kInvalidArgument, "command trainer: setting 'command' is required");
  HPCTUNE_ASSIGN(s.command, r.string("command"));
  if (s.command.find_first_not_of(" \t\n") == std::string::npos)
    return r.bad("command", r.raw("command"), "a non-empty command line");
  // Also checked by `hpctune validate`; here too, for a campaign whose config was never checked.
  if (auto unsafe = unsafe_placeholder(s.command))
    return err(Errc::kInvalidArgument, "command trainer: setting 'command': " + *unsafe);
  HPCTUNE_ASSIGN(s.timeout, r.number("timeout"));
  HPCTUNE_ASSIGN(s.workdir, r.string("workdir"));
  HPCTUNE_ASSIGN(s.grace, r.number("grace"));
  HPCTUNE_ASSIGN(s.log_limit, r.integer("log_limit"));
  // The names were checked by r.value (check_setting: string_map_name_problem, as `validate` does).
  HPCTUNE_ASSIGN(const nlohmann::json env, r.value("env"));
  for (auto it = env.begin(); it != env.end(); ++it) {
    const std::string& name = it.key();
    if (it.value().is_string()) {
      s.env[name] = it.value().get<std::string>();
    } else if (it.value().is_number() || it.value().is_boolean()) {
      s.env[name] = it.value().dump();  // PORT: 8080 in YAML is a number
    } else {
      return r.bad("env", env, "a map of names to strings ('" + name + "' is not)");
    }
  }
  return s;
}

// --- the template --------------------------------------------------------------------------------

std::string shell_quote(std::string_view text) { return hpctune::shell_quote(text); }

std::string template_text(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  return value.dump();
}

namespace {

bool name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '.' || c == '-'; }

std::string known_names(const nlohmann::json& values) {
  std::string out;
  for (auto it = values.begin(); it != values.end(); ++it) out += (out.empty() ? "" : ", ") + it.key();
  return out.empty() ? "none" : out;
}

}  // namespace

Result<std::string> render_command(std::string_view tmpl, const nlohmann::json& values) {
  std::string out;
  for (std::size_t i = 0; i < tmpl.size(); ++i) {
    const char c = tmpl[i];
    if (c == '}') {
      if (i + 1 < tmpl.size() && tmpl[i + 1] == '}') ++i;  // "}}" is one literal brace; a lone one is too
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < tmpl.size() && tmpl[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    std::size_t end = i + 1;
    while (end < tmpl.size() && name_char(tmpl[end])) ++end;
    if (end == i + 1 || end >= tmpl.size() || tmpl[end] != '}') {
      return err(Errc::kInvalidArgument, "command trainer: malformed placeholder at character " + std::to_string(i + 1) +
                                             " of the command (write {name} for a parameter, {{ and }} for literal braces)");
    }
    const std::string name(tmpl.substr(i + 1, end - i - 1));
    auto it = values.is_object() ? values.find(name) : values.end();
    if (!values.is_object() || it == values.end()) {
      return err(Errc::kInvalidArgument, "command trainer: the command refers to '{" + name +
                                             "}', which is not a parameter of this trial (known: " + known_names(values) +
                                             ")");
    }
    out += shell_quote(template_text(*it));
    i = end;
  }
  return out;
}

std::string exec_prefixed(const std::string& command) {
  // Anything the shell treats specially beyond words and quotes makes it a compound command.
  if (command.find_first_of(";&|<>()`$\n\\*?[#~") != std::string::npos) return command;
  const auto start = command.find_first_not_of(" \t");
  if (start == std::string::npos) return command;
  const auto stop = command.find_first_of(" \t", start);
  const std::string first = command.substr(start, stop == std::string::npos ? std::string::npos : stop - start);
  static const std::set<std::string> kKeywords = {"if", "for", "while", "until", "case", "{", "!", "exec",
                                                  "cd", "export", "set", "unset", "eval", ".", "source", "ulimit", "umask"};
  if (first.find('=') != std::string::npos || kKeywords.count(first)) return command;
  return "exec " + command;
}

// --- report lines --------------------------------------------------------------------------------

std::optional<Result<ReportLine>> parse_report_line(std::string_view line) {
  if (line.substr(0, kReportPrefix.size()) != kReportPrefix) return std::nullopt;
  std::string_view rest = line.substr(kReportPrefix.size());
  auto bad = [](const std::string& what) -> std::optional<Result<ReportLine>> {
    return Result<ReportLine>(err(Errc::kInvalidArgument, what));
  };
  if (rest.find_first_not_of(" \t") == std::string_view::npos) return bad("no JSON after the prefix");
  if (rest[0] != ' ' && rest[0] != '\t') return std::nullopt;  // "hpctune-reports": some other word
  const nlohmann::json j = nlohmann::json::parse(rest, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return bad("not valid JSON");
  if (!j.is_object()) return bad("not a JSON object");
  ReportLine out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const auto& v = it.value();
    if (it.key() == "step") {
      // Below 2^53, as the protocol requires of a step (larger ones would not reach the master).
      const bool integral = (v.is_number_integer() && std::fabs(v.get<double>()) < 9.0e15) ||
                            (v.is_number_float() && std::isfinite(v.get<double>()) &&
                             std::floor(v.get<double>()) == v.get<double>() && std::fabs(v.get<double>()) < 9.0e15);
      if (!integral || v.get<double>() < 0) return bad("\"step\" must be an integer >= 0, got " + v.dump());
      out.step = v.is_number_integer() ? v.get<int64_t>() : static_cast<int64_t>(v.get<double>());
      continue;
    }
    if (!v.is_number()) return bad("metric \"" + it.key() + "\" is not a number: " + v.dump());
    out.metrics[it.key()] = v.get<double>();
  }
  if (out.metrics.empty()) return bad("no metrics");
  return Result<ReportLine>(std::move(out));
}

// --- mpirun --------------------------------------------------------------------------------------

Result<std::vector<std::string>> mpirun_prefix(int ranks) {
  const std::string built_with = HPCTUNE_MPIEXEC;
  if (built_with.empty())
    return err(Errc::kUnavailable, "command trainer: " + std::to_string(ranks) +
                                       " ranks need MPI, and this hpctune was built without it (use 1 rank)");
  std::string mpirun = access(built_with.c_str(), X_OK) == 0 ? built_with : find_in_path("mpirun");
  if (mpirun.empty())
    return err(Errc::kUnavailable, "command trainer: " + std::to_string(ranks) + " ranks need mpirun, and neither " +
                                       built_with + " nor an mpirun in PATH exists here (use 1 rank)");
  return launch::mpirun_command(mpirun, ranks, {.oversubscribe = true, .tag_output = true});
}

// --- running -------------------------------------------------------------------------------------

namespace {

// A pipe whose read end stays here; both ends close on exec.
struct Pipe {
  int read = -1, write = -1;
  Pipe() = default;
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
  ~Pipe() {
    close_read();
    close_write();
  }
  Status open() {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return err(Errc::kIo, std::string("command trainer: pipe: ") + strerror(errno));
    read = fds[0];
    write = fds[1];
    return Status::Ok();
  }
  void close_read() noexcept {
    if (read >= 0) ::close(read);
    read = -1;
  }
  void close_write() noexcept {
    if (write >= 0) ::close(write);
    write = -1;
  }
};

// An append-only log, written a line at a time straight to its descriptor. Not std::ofstream: its
// descriptor would be inherited by the program (and by anything else forked meanwhile).
// With a limit (trainer.log_limit) it keeps the first half of the limit in the file as it comes and
// the last half in memory, written behind a marker line saying how many bytes were cut when the
// log is closed: a program printing a gigabyte leaves its start and its end, not a full disk.
class LogFile {
 public:
  LogFile() = default;
  LogFile(const LogFile&) = delete;
  LogFile& operator=(const LogFile&) = delete;
  ~LogFile() { close(); }
  bool open(const std::string& path, int64_t limit) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    limit_ = limit;
    return fd_ >= 0;
  }
  LogFile& operator<<(std::string_view text) {
    pending_ += text;
    if (!pending_.empty() && (pending_.back() == '\n' || pending_.size() > 65536)) flush();
    return *this;
  }
  template <typename T>
    requires std::is_arithmetic_v<T>
  LogFile& operator<<(T value) {
    std::ostringstream text;
    text << value;
    return *this << text.str();
  }
  void flush() noexcept {
    std::string_view text = pending_;
    if (limit_ > 0 && !head_full_) {
      const auto head_room = static_cast<std::size_t>(std::max<int64_t>(limit_ / 2 - written_, 0));
      std::size_t take = text.size();
      if (take > head_room) {
        // The head ends at the end of the last line that fits (a first line longer than the whole
        // head is cut).
        const auto nl = text.substr(0, head_room).rfind('\n');
        take = nl != std::string_view::npos ? nl + 1 : written_ == 0 ? head_room : 0;
      }
      write_all(text.substr(0, take));
      text.remove_prefix(take);
      if (!text.empty()) head_full_ = true;
    }
    if (limit_ > 0 && head_full_) {
      tail_.append(text);
      const auto keep = static_cast<std::size_t>(limit_ - limit_ / 2);
      if (tail_.size() > 2 * keep + 65536) {  // drop the front now and then, not at every line
        cut_ += tail_.size() - keep;
        tail_.erase(0, tail_.size() - keep);
      }
    } else {
      write_all(text);
    }
    pending_.clear();
  }
  // Writes the tail (behind the marker when something was cut) and closes.
  void close() noexcept {
    flush();
    if (fd_ < 0) return;
    if (!tail_.empty()) {
      const auto keep = static_cast<std::size_t>(limit_ - limit_ / 2);
      std::string_view tail = tail_;
      if (tail.size() > keep) {
        std::size_t drop = tail.size() - keep;
        const auto nl = tail.find('\n', drop);  // the tail starts at a line's start where one does
        if (nl != std::string_view::npos && nl + 1 < tail.size()) drop = nl + 1;
        cut_ += drop;
        tail.remove_prefix(drop);
      }
      if (cut_ > 0)
        write_all("hpctune: ... " + std::to_string(cut_) + " bytes cut here (trainer.log_limit = " +
                  std::to_string(limit_) + " bytes keeps the first and the last half) ...\n");
      write_all(tail);
      tail_.clear();
    }
    ::close(fd_);
    fd_ = -1;
  }

 private:
  void write_all(std::string_view text) noexcept {
    std::size_t done = 0;
    while (fd_ >= 0 && done < text.size()) {
      const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;  // a full disk loses log lines, never the trial
      done += static_cast<std::size_t>(n);
    }
    written_ += static_cast<int64_t>(done);
  }

  int fd_ = -1;
  int64_t limit_ = 0;    // 0: none
  int64_t written_ = 0;  // bytes in the file
  bool head_full_ = false;
  std::string pending_;
  std::string tail_;     // since the head filled up, at most the last 2 halves (and a bit)
  int64_t cut_ = 0;      // bytes dropped from the front of tail_
};

// A temporary trial directory, removed with everything in it.
struct ScratchDir {
  std::string path;
  ScratchDir() = default;
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ~ScratchDir() {
    if (path.empty()) return;
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// Every live descendant of `root` (children first found by scanning /proc for their parent).
std::vector<pid_t> descendants(pid_t root) {
  std::map<pid_t, std::vector<pid_t>> children;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return {};
  while (dirent* e = readdir(proc)) {
    const pid_t pid = static_cast<pid_t>(atoi(e->d_name));
    if (pid <= 0) continue;
    std::ifstream st("/proc/" + std::string(e->d_name) + "/stat");
    std::string stat((std::istreambuf_iterator<char>(st)), {});
    const auto close = stat.rfind(')');
    if (close == std::string::npos || close + 4 >= stat.size()) continue;
    const pid_t ppid = static_cast<pid_t>(atoi(stat.c_str() + stat.find(' ', close + 2) + 1));
    children[ppid].push_back(pid);
  }
  closedir(proc);
  std::vector<pid_t> out;
  std::vector<pid_t> todo = {root};
  while (!todo.empty()) {
    const pid_t p = todo.back();
    todo.pop_back();
    for (pid_t c : children[p]) {
      out.push_back(c);
      todo.push_back(c);
    }
  }
  return out;
}

// Splits a stream into lines and hands each to a sink(text, partial, ends_line); an overlong line
// is passed on in pieces marked `partial` so that it is logged but never parsed, and only its last
// piece (up to its newline) ends a line in the log.
class LineSplitter {
 public:
  template <typename Sink>
  void feed(const char* data, std::size_t n, Sink&& sink) {
    buffer_.append(data, n);
    std::size_t start = 0;
    for (;;) {
      const auto nl = buffer_.find('\n', start);
      if (nl == std::string::npos) break;
      std::string_view line(buffer_.data() + start, nl - start);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      sink(line, overlong_, true);
      overlong_ = false;
      start = nl + 1;
    }
    buffer_.erase(0, start);
    if (buffer_.size() > CommandTrainer::kMaxLineBytes) {
      sink(std::string_view(buffer_), true, false);
      buffer_.clear();
      overlong_ = true;
    }
  }
  template <typename Sink>
  void finish(Sink&& sink) {
    if (!buffer_.empty()) sink(std::string_view(buffer_), overlong_, true);
    buffer_.clear();
    overlong_ = false;
  }

 private:
  std::string buffer_;
  bool overlong_ = false;
};

// Output under mpirun --tag-output: "[job,rank]<stdout>:text". Untagged lines come from mpirun.
struct Tagged {
  int rank = -1;  // -1: no tag
  std::string_view text;
};
Tagged untag(std::string_view line) {
  Tagged t{-1, line};
  if (line.empty() || line[0] != '[') return t;
  const auto close = line.find(']');
  const auto comma = line.find(',');
  if (close == std::string_view::npos || comma == std::string_view::npos || comma > close) return t;
  const auto colon = line.find(">:", close);
  if (colon == std::string_view::npos || line.substr(close + 1, 1) != "<") return t;
  int rank = 0;
  for (std::size_t i = comma + 1; i < close; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(line[i]))) return t;
    rank = rank * 10 + (line[i] - '0');
  }
  t.rank = rank;
  t.text = line.substr(colon + 2);
  return t;
}

std::string seconds_text(double s) {
  nlohmann::json j = s;
  if (std::floor(s) == s && std::fabs(s) < 1e15) j = static_cast<int64_t>(s);
  return j.dump() + " s";
}

// The checkpoint side of the program's contract (README, "Bring your own training script"):
//   HPCTUNE_CHECKPOINT_DIR  <trial_dir>/checkpoint (the catalog's checkpoints.directory), made 0700
//                           when absent and shared by the trial's attempts; opaque to hpctune.
//   HPCTUNE_RESUME_FROM     the trial's own checkpoint directory when an earlier attempt left
//                           something in it (this attempt runs again after its group was lost: the
//                           trial's own last checkpoint wins, as the built-in trainers' crash-resume
//                           does, see make_snapshot in workflow/pbt_stage.cpp); else ctx.resume_from
//                           (a snapshot a pbt stage chose); else unset. It may thus equal
//                           HPCTUNE_CHECKPOINT_DIR: the program loads before it saves, and saves
//                           atomically (a temporary name, then os.replace).
//   HPCTUNE_MAX_STEP        the setting max_step (the kind's step setting, that a pbt stage sets per
//                           interval) when > 0; {max_step} in the command (0 = no limit).
// The step setting is the stage's, not a hyperparameter: it is left out of HPCTUNE_PARAMS.
Status checkpoint_env(const TrialContext& ctx, const std::string& trial_dir, nlohmann::json& params,
                      nlohmann::json& values, std::map<std::string, std::string>& env) {
  const TrainerCapabilities can = command_capabilities();
  const std::string dir = trial_dir + "/" + can.checkpoints.directory;
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return err(Errc::kIo, "command trainer: cannot create " + dir + ": " + strerror(errno));
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid())
    return err(Errc::kIo, "command trainer: " + dir + " is not a directory of this user's (a link is not followed)");
  bool left = false;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
        left = true;
        break;
      }
    }
    ::closedir(d);
  } else {
    return err(Errc::kIo, "command trainer: cannot list " + dir + ": " + strerror(errno));
  }
  env["HPCTUNE_CHECKPOINT_DIR"] = dir;
  if (left) env["HPCTUNE_RESUME_FROM"] = dir;
  else if (!ctx.resume_from.empty()) env["HPCTUNE_RESUME_FROM"] = ctx.resume_from;

  const nlohmann::json settings = ctx.settings();
  HPCTUNE_ASSIGN(const int64_t max_step,
                 SettingsReader("command", settings, command_setting_specs()).integer(can.step_setting));
  if (max_step > 0) env["HPCTUNE_MAX_STEP"] = std::to_string(max_step);
  values[can.step_setting] = max_step;
  if (!values.contains("checkpoint_dir")) values["checkpoint_dir"] = dir;
  if (params.is_object()) params.erase(can.step_setting);
  return Status::Ok();
}

// What a workflow gives the program beside its parameters: the campaign's data seed
// (HPCTUNE_DATA_SEED, from trainer.data_seed: every trial draws the same validation split) and, for
// a transfer stage's target, its source's checkpoint directory and trial id (HPCTUNE_SOURCE_CHECKPOINT,
// HPCTUNE_SOURCE_TRIAL). Those two come as the parameters the kind's capabilities name
// (command_settings.cpp) and are taken out of `params`: the program sees them only as variables.
Result<std::map<std::string, std::string>> workflow_env(const nlohmann::json& trainer, nlohmann::json& params) {
  std::map<std::string, std::string> env;
  SettingsReader r("command", trainer, command_setting_specs());
  HPCTUNE_ASSIGN(const nlohmann::json data_seed, r.value("data_seed"));
  env["HPCTUNE_DATA_SEED"] = data_seed.dump();
  const TrainerCapabilities can = command_capabilities();
  for (const auto& [key, name] : {std::pair{can.init_setting, "HPCTUNE_SOURCE_CHECKPOINT"},
                                  std::pair{can.source_trial_setting, "HPCTUNE_SOURCE_TRIAL"}}) {
    if (key == nullptr || !params.contains(key)) continue;
    env[name] = template_text(params[key]);
    params.erase(key);
  }
  return env;
}

}  // namespace

Result<TrialResult> CommandTrainer::run(const TrialContext& ctx) {
  HPCTUNE_ASSIGN(CommandSettings s, parse_command_settings(ctx.trainer));
  const int ranks = std::max(1, ctx.ranks);

  // The trial directory: the master's, or a scratch one that goes away with the trial.
  ScratchDir scratch;
  std::string trial_dir = ctx.trial_dir;
  if (trial_dir.empty()) {
    std::string tmpl = (fs::temp_directory_path() / ("hpctune-trial-" + std::to_string(ctx.trial_id) + "-XXXXXX")).string();
    if (mkdtemp(tmpl.data()) == nullptr)
      return err(Errc::kIo, "command trainer: cannot create a trial directory: " + std::string(strerror(errno)));
    trial_dir = scratch.path = tmpl;
  } else {
    std::error_code ec;
    fs::create_directories(trial_dir, ec);
    if (ec) return err(Errc::kIo, "command trainer: cannot create trial directory " + trial_dir + ": " + ec.message());
  }
  trial_dir = fs::absolute(trial_dir).string();
  // Each attempt logs in a directory of its own: nothing of an earlier attempt (killed, but maybe
  // not yet gone) mixes into the retry's logs. The trial directory is shared on purpose: it holds
  // the checkpoints a retry resumes from.
  const std::string attempt_dir = trial_dir + "/attempt-" + std::to_string(ctx.attempt);
  {
    std::error_code ec;
    fs::create_directories(attempt_dir, ec);
    if (ec) return err(Errc::kIo, "command trainer: cannot create " + attempt_dir + ": " + ec.message());
  }
  const std::string stdout_log = attempt_dir + "/stdout.log";
  const std::string stderr_log = attempt_dir + "/stderr.log";

  nlohmann::json params = ctx.params.is_object() ? ctx.params : nlohmann::json::object();
  HPCTUNE_ASSIGN(const auto workflow_vars, workflow_env(ctx.trainer, params));
  // The template's values: the parameters, then the trial's own names where no parameter has them.
  nlohmann::json values = params;
  const nlohmann::json builtins = {{"trial_id", ctx.trial_id}, {"trial_dir", trial_dir}, {"attempt", ctx.attempt},
                                   {"attempt_dir", attempt_dir}, {"seed", ctx.seed},  {"ranks", ranks}};
  for (auto it = builtins.begin(); it != builtins.end(); ++it)
    if (!values.contains(it.key())) values[it.key()] = it.value();
  launch::SpawnOptions spawn;
  HPCTUNE_TRY(checkpoint_env(ctx, trial_dir, params, values, spawn.env));
  HPCTUNE_ASSIGN(std::string command, render_command(s.command, values));

  if (ranks > 1) {
    HPCTUNE_ASSIGN(spawn.argv, mpirun_prefix(ranks));
  }
  HPCTUNE_TRY(add_rank_environment(ranks, spawn));  // MASTER_ADDR, RANK, ... (rank_environment.h)
  spawn.argv.insert(spawn.argv.end(), {"/bin/sh", "-c", exec_prefixed(command)});
  spawn.env["HPCTUNE_PARAMS"] = params.dump();
  spawn.env["HPCTUNE_TRIAL_ID"] = std::to_string(ctx.trial_id);
  spawn.env["HPCTUNE_TRIAL_DIR"] = trial_dir;
  spawn.env["HPCTUNE_ATTEMPT"] = std::to_string(ctx.attempt);
  spawn.env["HPCTUNE_ATTEMPT_DIR"] = attempt_dir;
  spawn.env["HPCTUNE_SEED"] = std::to_string(ctx.seed);
  // The group's thread budget, unless the user's environment already decides: a BLAS or PyTorch
  // program otherwise takes every core, and groups side by side oversubscribe the machine.
  const int threads = std::max(1, ctx.threads);
  spawn.env["HPCTUNE_THREADS"] = std::to_string(threads);
  for (const char* name : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"})
    if (getenv(name) == nullptr) spawn.env[name] = std::to_string(threads);
  for (const auto& [k, v] : workflow_vars) spawn.env[k] = v;
  for (const auto& [k, v] : s.env) spawn.env[k] = v;
  spawn.workdir = s.workdir;
  spawn.supervised = true;  // the whole tree dies with the trial, and with this worker
  // Nothing of an earlier attempt of this trial runs beside this one, even when that attempt's
  // worker and supervisor died together (launch/attempt_fence.h).
  if (!ctx.trial_dir.empty()) spawn.fence = trial_dir + "/" + launch::kAttemptFenceFile;
  if (!s.workdir.empty() && !fs::is_directory(s.workdir))
    return err(Errc::kNotFound, "command trainer: workdir '" + s.workdir + "' is not a directory");

  LogFile out_log, err_log;
  if (!out_log.open(stdout_log, s.log_limit) || !err_log.open(stderr_log, s.log_limit))
    return err(Errc::kIo, "command trainer: cannot write the logs in " + trial_dir + ": " + strerror(errno));
  out_log << "hpctune: trial " << ctx.trial_id << " attempt " << ctx.attempt << ": " << spawn.argv.back() << "\n";

  Pipe out_pipe, err_pipe;
  HPCTUNE_TRY(out_pipe.open());
  HPCTUNE_TRY(err_pipe.open());
  spawn.stdout_fd = out_pipe.write;
  spawn.stderr_fd = err_pipe.write;
  const auto start = Clock::now();
  HPCTUNE_ASSIGN(launch::ChildProcess child, launch::ChildProcess::spawn(spawn));
  out_pipe.close_write();
  err_pipe.close_write();

  TrialResult result;
  int64_t last_step = 0;
  bool stopping = false;   // SIGTERM sent
  bool timed_out = false;
  bool killed = false;     // SIGKILL sent
  Clock::time_point kill_at{}, exited_at{};
  std::deque<std::string> stderr_tail;
  std::size_t ignored_reports = 0;

  std::map<int, std::string> rank_pieces;  // under mpirun: each rank's line read so far
  auto handle_line = [&](std::string_view text) {
    auto report = parse_report_line(text);
    if (!report) return;
    if (!report->ok()) {
      ++ignored_reports;
      out_log << "hpctune: warning: ignored the report line above: " << report->error().message() << "\n";
      return;
    }
    const int64_t step = report->value().step.value_or(last_step + 1);
    last_step = step;
    result.step = step;
    result.metrics = report->value().metrics;
    if (!stopping) ctx.report(step, result.metrics);
  };
  auto on_stdout = [&](std::string_view line, bool partial, bool ends_line) {
    out_log << line << (ends_line ? "\n" : "");
    if (partial) return;
    if (ranks == 1) return handle_line(line);
    // mpirun tags each chunk a rank writes, not each line: a rank that writes a line in pieces
    // (Python's print() under PYTHONUNBUFFERED) is cut by other ranks' chunks, as in
    // "[1,1]<stdout>:text[1,0]<stdout>:whole line" followed later by "[1,1]<stdout>:". So the line
    // is split at every tag; a piece before the last is the start of its rank's line, and the last
    // piece ends its rank's line. Only rank 0's lines can be reports; untagged text is mpirun's own.
    std::vector<Tagged> pieces;
    for (std::size_t at = line.find('['); at != std::string_view::npos; at = line.find('[', at + 1)) {
      const Tagged t = untag(line.substr(at));
      if (t.rank < 0) continue;
      if (!pieces.empty()) {  // the previous piece ends where this tag starts
        const char* begin = pieces.back().text.data();
        pieces.back().text = std::string_view(begin, static_cast<std::size_t>(line.data() + at - begin));
      }
      pieces.push_back(t);
    }
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      std::string& pending = rank_pieces[pieces[i].rank];
      pending.append(pieces[i].text);
      if (i + 1 < pieces.size()) continue;  // cut by another rank's chunk: the rest comes later
      const std::string whole = std::move(pending);
      pending.clear();
      if (pieces[i].rank == 0) handle_line(whole);
    }
  };
  auto on_stderr = [&](std::string_view line, bool partial, bool ends_line) {
    err_log << line << (ends_line ? "\n" : "");
    if (partial) return;
    stderr_tail.emplace_back(line);
    if (stderr_tail.size() > kStderrTailLines) stderr_tail.pop_front();
  };

  LineSplitter out_lines, err_lines;
  std::optional<launch::ExitStatus> status;
  char buffer[65536];
  auto begin_termination = [&](Clock::time_point now) {
    stopping = true;
    child.signal(SIGTERM);
    child.signal(SIGCONT);  // a stopped program cannot act on SIGTERM
    kill_at = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s.grace));
  };
  auto kill_everything = [&] {
    // mpirun puts each rank in its own process group: reach them through the process tree.
    for (pid_t p : descendants(child.pid())) ::kill(p, SIGKILL);
    child.signal(SIGKILL);
    killed = true;
  };

  for (;;) {
    // The program's end wakes the poll too (the supervisor's status pipe): no slice is waited out.
    pollfd fds[3] = {{out_pipe.read, POLLIN, 0}, {err_pipe.read, POLLIN, 0}, {child.wait_fd(), POLLIN, 0}};
    const int n = ::poll(fds, 3, kSliceMs);
    if (n < 0 && errno != EINTR) {
      kill_everything();
      return err(Errc::kIo, std::string("command trainer: poll: ") + strerror(errno));
    }
    for (int i = 0; i < 2 && n > 0; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t got = ::read(fds[i].fd, buffer, sizeof buffer);
      if (got > 0) {
        if (i == 0) out_lines.feed(buffer, static_cast<std::size_t>(got), on_stdout);
        else err_lines.feed(buffer, static_cast<std::size_t>(got), on_stderr);
      } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
        if (i == 0) {
          out_lines.finish(on_stdout);
          out_pipe.close_read();
        } else {
          err_lines.finish(on_stderr);
          err_pipe.close_read();
        }
      }
    }
    const auto now = Clock::now();
    if (!status) {
      status = child.poll();  // reaping also kills whatever the program left in its process group
      if (status) exited_at = now;
    }
    if (status) {
      // Done once the pipes are drained; a descendant outside the group that holds them open
      // gets 2 s before the rest of its output is given up.
      if ((out_pipe.read < 0 && err_pipe.read < 0) || now - exited_at > std::chrono::seconds(2)) break;
      continue;
    }
    if (!stopping) {
      if (ctx.stop_requested()) {
        begin_termination(now);
      } else if (s.timeout > 0 && now - start >= std::chrono::duration<double>(s.timeout)) {
        timed_out = true;
        out_log << "hpctune: trial exceeded its timeout of " << seconds_text(s.timeout) << "; terminating\n";
        begin_termination(now);
      }
    } else if (!killed && now >= kill_at) {
      out_log << "hpctune: still running " << seconds_text(s.grace) << " after SIGTERM; sending SIGKILL\n";
      kill_everything();
    } else if (killed && now - kill_at > std::chrono::seconds(30)) {
      return err(Errc::kInternal, "command trainer: the program survived SIGKILL for 30 s (pid " +
                                      std::to_string(child.pid()) + ")");
    }
  }
  const double seconds = std::chrono::duration<double>(exited_at - start).count();
  out_log << "hpctune: " << status->describe() << " after " << seconds << " s";
  if (ignored_reports > 0) out_log << "; " << ignored_reports << " malformed report line(s) ignored";
  out_log << "\n";
  out_log.close();  // the artifacts' sizes are read from the files
  err_log.close();

  std::string tail;
  for (const auto& line : stderr_tail) tail += line + "\n";
  auto with_tail = [&](std::string message) {
    if (!tail.empty()) message += "; last lines of standard error:\n" + tail;
    return message;
  };
  if (timed_out)
    return err(Errc::kTimeout, with_tail("command trainer: the trial exceeded its timeout of " +
                                         seconds_text(s.timeout) + " (trainer.timeout) and was killed"));
  // A stopped trial that never reported keeps empty metrics: the master then keeps what it has.
  if (!result.metrics.empty() || !stopping) result.metrics["train_seconds"] = seconds;
  if (!ctx.trial_dir.empty()) {
    result.artifacts.push_back({"log", stdout_log});
    result.artifacts.push_back({"log", stderr_log});
  }
  if (stopping) {
    result.stopped = true;
    return result;
  }
  if (!status->success()) return err(Errc::kFailed, with_tail("command failed: " + status->describe()));
  return result;
}

}  // namespace hpctune::trainers
