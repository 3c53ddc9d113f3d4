#include "trainers/command_trainer.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <type_traits>

#include "common/safe_open.h"
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
  HPCTUNE_ASSIGN(const nlohmann::json command, r.value("command"));
  if (auto problem = command_capabilities().setting_rules.problem({{"command", command}}))
    return r.bad(problem->first.c_str(), r.raw(problem->first.c_str()), problem->second);
  if (command.is_array()) {
    // The list form: run as it is, without a shell; a value in an item is that item's text.
    for (const auto& item : command) s.argv.push_back(item.get<std::string>());
    s.command = command.dump();
  } else {
    s.command = command.get<std::string>();
    // Also checked by `hpctune validate`; here too, for a campaign whose config was never checked.
    if (auto unsafe = unsafe_placeholder(s.command))
      return err(Errc::kInvalidArgument, "command trainer: setting 'command': " + *unsafe);
  }
  HPCTUNE_ASSIGN(s.timeout, r.number("timeout"));
  HPCTUNE_ASSIGN(s.workdir, r.string("workdir"));
  HPCTUNE_ASSIGN(s.grace, r.number("grace"));
  HPCTUNE_ASSIGN(s.log_limit, r.integer("log_limit"));
  HPCTUNE_ASSIGN(s.persistent, r.boolean("persistent"));
  if (s.persistent) {
    std::vector<std::string> parts = s.argv;
    if (parts.empty()) parts.push_back(s.command);
    for (const auto& part : parts)
      if (auto per_trial = per_trial_placeholder(part))
        return err(Errc::kInvalidArgument, "command trainer: setting 'command': " + *per_trial);
  }
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

namespace {

Result<std::string> render_template(std::string_view tmpl, const nlohmann::json& values, bool quote) {
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
    out += quote ? shell_quote(template_text(*it)) : template_text(*it);
    i = end;
  }
  return out;
}

}  // namespace

Result<std::string> render_command(std::string_view tmpl, const nlohmann::json& values) {
  return render_template(tmpl, values, /*quote=*/true);
}

Result<std::string> render_argument(std::string_view tmpl, const nlohmann::json& values) {
  return render_template(tmpl, values, /*quote=*/false);
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

namespace {

// `text` with Python's NaN, Infinity and -Infinity outside strings quoted ("NaN"), so that it parses.
std::string quote_python_nonfinite(std::string_view text) {
  std::string out;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) out += text[++i];
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    bool quoted = false;
    for (std::string_view word : {"-Infinity", "Infinity", "NaN"}) {
      if (text.substr(i, word.size()) != word) continue;
      out += '"';
      out += word;
      out += '"';
      i += word.size() - 1;
      quoted = true;
      break;
    }
    if (!quoted) out += c;
  }
  return out;
}

}  // namespace

std::optional<Result<ReportLine>> parse_report_line(std::string_view line) {
  // The report is the end of the line from its last prefix: what comes before is the program's
  // other output, such as a progress bar (tqdm) redrawn with '\r' and left without a line end.
  const auto at = line.rfind(kReportPrefix);
  if (at == std::string_view::npos) return std::nullopt;
  line.remove_prefix(at);
  std::string_view rest = line.substr(kReportPrefix.size());
  auto bad = [](const std::string& what) -> std::optional<Result<ReportLine>> {
    return Result<ReportLine>(err(Errc::kInvalidArgument, what));
  };
  if (rest.find_first_not_of(" \t") == std::string_view::npos) return bad("no JSON after the prefix");
  if (rest[0] != ' ' && rest[0] != '\t') return std::nullopt;  // "hpctune-reports": some other word
  nlohmann::json j = nlohmann::json::parse(rest, nullptr, /*allow_exceptions=*/false);
  // Python's json.dumps writes a diverged loss as NaN or Infinity, which JSON lacks: read as
  // quoted words, then as the numbers they stand for (early stopping judges NaN the worst).
  const bool python = j.is_discarded();
  if (python) j = nlohmann::json::parse(quote_python_nonfinite(rest), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return bad("not valid JSON");
  if (!j.is_object()) return bad("not a JSON object");
  ReportLine out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    auto& v = it.value();
    if (python && v.is_string()) {
      const std::string word = v.get<std::string>();
      if (word == "NaN") v = std::numeric_limits<double>::quiet_NaN();
      else if (word == "Infinity") v = std::numeric_limits<double>::infinity();
      else if (word == "-Infinity") v = -std::numeric_limits<double>::infinity();
    }
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
  // A link or a FIFO planted at `path` is refused (common/safe_open.h), naming it.
  Status open(const std::string& path, int64_t limit) {
    HPCTUNE_ASSIGN(UniqueFd fd, open_own_for_writing(path, /*truncate=*/false));
    fd_ = fd.release();
    limit_ = limit;
    return Status::Ok();
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

// --- persistent programs: the control channel ------------------------------------------------------

namespace {

// The per-trial variables: a persistent program gets them in each trial's message (and unsets the
// ones a trial does not give).
constexpr const char* kTrialVariables[] = {
    "HPCTUNE_PARAMS",         "HPCTUNE_TRIAL_ID",         "HPCTUNE_TRIAL_DIR",    "HPCTUNE_ATTEMPT",
    "HPCTUNE_ATTEMPT_DIR",    "HPCTUNE_SEED",             "HPCTUNE_CHECKPOINT_DIR", "HPCTUNE_RESUME_FROM",
    "HPCTUNE_MAX_STEP",       "HPCTUNE_DATA_SEED",        "HPCTUNE_SOURCE_CHECKPOINT", "HPCTUNE_SOURCE_TRIAL"};

// Equal texts, in a time that does not depend on where they differ (the token).
bool same_secret(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// The Unix socket a persistent program's ranks connect to, in a fresh directory of mode 0700 (no
// other user can reach the socket in it), and the token each connection must present first. A
// connection from another uid (SO_PEERCRED) is closed too. Every message is one JSON line.
class ControlChannel {
 public:
  ControlChannel() = default;
  ControlChannel(const ControlChannel&) = delete;
  ControlChannel& operator=(const ControlChannel&) = delete;
  ~ControlChannel() {
    for (auto& c : conns_) ::close(c.fd);
    if (listen_ >= 0) ::close(listen_);
    if (!dir_.empty()) {
      ::unlink(path_.c_str());
      ::rmdir(dir_.c_str());
    }
  }

  Status open() {
    sockaddr_un addr{};
    // As the master's socket (common/safe_open.h): where nobody else could swap the directory for theirs.
    HPCTUNE_ASSIGN(const std::string base, private_socket_base(32, "a persistent program's control socket"));
    remove_stale_socket_dirs(base.empty() ? "/" : base, "hpctune-control-", "/control");  // a killed worker's
    std::string tmpl = base + "/hpctune-control-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr)  // mode 0700
      return err(Errc::kIo, std::string("command trainer: cannot create a control directory: ") + strerror(errno));
    dir_ = tmpl;
    path_ = dir_ + "/control";
    addr.sun_family = AF_UNIX;
    if (path_.size() >= sizeof addr.sun_path)
      return err(Errc::kIo, "command trainer: the control socket's path is too long: " + path_);
    std::memcpy(addr.sun_path, path_.c_str(), path_.size() + 1);
    listen_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (listen_ < 0 || ::bind(listen_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(listen_, 64) != 0)
      return err(Errc::kIo, "command trainer: control socket " + path_ + ": " + strerror(errno));
    token_ = launch::AttemptFence::new_token();
    return Status::Ok();
  }
  const std::string& path() const { return path_; }
  const std::string& token() const { return token_; }
  bool connected() const {
    return std::any_of(conns_.begin(), conns_.end(), [](const Conn& c) { return c.authed; });
  }

  // The descriptors to poll: the listening socket, then each connection.
  void add_fds(std::vector<pollfd>& fds) const {
    fds.push_back({listen_, POLLIN, 0});
    for (const auto& c : conns_) fds.push_back({c.fd, POLLIN, 0});
  }
  // Acts on the poll's answer for the descriptors add_fds() added from `at` on.
  void service(const std::vector<pollfd>& fds, std::size_t at) {
    for (std::size_t i = 0; i < conns_.size() && at + 1 + i < fds.size(); ++i)
      if (fds[at + 1 + i].revents != 0) read_from(conns_[i]);
    std::erase_if(conns_, [](const Conn& c) { return c.fd < 0; });
    if (fds[at].revents != 0) accept_all();
  }

  // The trial now served: sent to every connection now, and to each one that authenticates later.
  void begin_trial(std::string line) {
    trial_ = std::move(line);
    stop_.clear();
    for (auto& c : conns_)
      if (c.authed) send(c, trial_);
  }
  void end_trial() {
    trial_.clear();
    stop_.clear();
  }
  // Tells every rank to stop the trial: the line, then SIGUSR1 (the helper's handler sets a flag,
  // so that a program busy in its epoch learns it at once).
  void stop(std::string line) {
    stop_ = std::move(line);
    for (auto& c : conns_)
      if (c.authed) {
        send(c, stop_);
        if (c.pid > 0) ::kill(c.pid, SIGUSR1);
      }
  }

 private:
  struct Conn {
    int fd = -1;
    pid_t pid = 0;
    bool authed = false;
    std::string in;
  };

  void accept_all() {
    for (;;) {
      const int fd = ::accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) return;
      ucred cred{};
      socklen_t len = sizeof cred;
      if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.uid != ::geteuid()) {
        ::close(fd);
        continue;
      }
      conns_.push_back({fd, cred.pid, false, {}});
    }
  }
  void read_from(Conn& c) {
    char buf[4096];
    const ssize_t n = ::read(c.fd, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n <= 0) return drop(c);
    if (c.authed) return;  // the helper sends nothing after its hello
    c.in.append(buf, static_cast<std::size_t>(n));
    const auto nl = c.in.find('\n');
    if (nl == std::string::npos) {
      if (c.in.size() > 4096) drop(c);
      return;
    }
    const nlohmann::json hello = nlohmann::json::parse(c.in.substr(0, nl), nullptr, false);
    if (!hello.is_object() || !hello.contains("token") || !hello["token"].is_string() ||
        !same_secret(hello["token"].get<std::string>(), token_))
      return drop(c);
    c.authed = true;
    c.in.clear();
    if (!trial_.empty()) send(c, trial_);
    if (!stop_.empty()) {
      send(c, stop_);
      if (c.pid > 0) ::kill(c.pid, SIGUSR1);
    }
  }
  void send(Conn& c, const std::string& line) {
    const std::string text = line + "\n";
    std::size_t done = 0;
    const auto deadline = Clock::now() + std::chrono::seconds(2);
    while (c.fd >= 0 && done < text.size()) {
      const ssize_t n = ::send(c.fd, text.data() + done, text.size() - done, MSG_NOSIGNAL);
      if (n > 0) {
        done += static_cast<std::size_t>(n);
      } else if (n < 0 && (errno == EINTR || errno == EAGAIN) && Clock::now() < deadline) {
        pollfd p{c.fd, POLLOUT, 0};
        (void)::poll(&p, 1, 10);
      } else {
        drop(c);  // a helper that reads nothing for 2 s is not one
      }
    }
  }
  void drop(Conn& c) {
    if (c.fd >= 0) ::close(c.fd);
    c.fd = -1;
    c.authed = false;
  }

  std::string dir_, path_, token_;
  int listen_ = -1;
  std::vector<Conn> conns_;
  std::string trial_, stop_;  // the current trial's line and its stop line ("" = none)
};

}  // namespace

// --- running -------------------------------------------------------------------------------------

// A running program: one trial's (without persistent) or the group's (persistent).
struct CommandPrograms::Program {
  std::string key;  // what it was started with; persistent: reused while a trial's is the same
  launch::ChildProcess child;
  Pipe out_pipe, err_pipe;
  LineSplitter out_lines, err_lines;
  std::map<int, std::string> rank_pieces;  // under mpirun: each rank's line read so far
  std::optional<launch::ExitStatus> status;
  Clock::time_point exited_at{};
  bool killed = false;                      // SIGKILL sent
  std::unique_ptr<ControlChannel> control;  // persistent only
  std::string fence_token;                  // persistent: its HPCTUNE_ATTEMPT_FENCE, for every trial's fence

  // Ended (reaped) and its output read to the end.
  bool drained() const { return out_pipe.read < 0 && err_pipe.read < 0; }
};

CommandPrograms::CommandPrograms() = default;
CommandPrograms::~CommandPrograms() = default;

int CommandPrograms::pid() {
  std::lock_guard lock(mu);
  return live && !live->status ? static_cast<int>(live->child.pid()) : 0;
}

namespace {

// One trial's plan: its directories and variables, the program's command and environment.
struct TrialPlan {
  CommandSettings s;
  int ranks = 1;
  std::unique_ptr<ScratchDir> scratch;  // the trial directory when the master gave none
  std::string trial_dir, attempt_dir, stdout_log, stderr_log;
  std::map<std::string, std::string> trial_env;  // the per-trial variables (kTrialVariables)
  launch::SpawnOptions spawn;                    // without the trial's variables
  std::string key;                               // what a persistent program must have been started with
};

Status make_trial_dirs(const TrialContext& ctx, TrialPlan& plan) {
  plan.trial_dir = ctx.trial_dir;
  if (plan.trial_dir.empty()) {
    std::string tmpl = (fs::temp_directory_path() / ("hpctune-trial-" + std::to_string(ctx.trial_id) + "-XXXXXX")).string();
    if (mkdtemp(tmpl.data()) == nullptr)
      return err(Errc::kIo, "command trainer: cannot create a trial directory: " + std::string(strerror(errno)));
    plan.scratch = std::make_unique<ScratchDir>();
    plan.trial_dir = plan.scratch->path = tmpl;
  } else {
    // With the mode of <db>.trials (storage_access). A link planted there (a campaign unpacked
    // from someone else's archive) would take the trial's files elsewhere: refused.
    if (Status made = make_directory_like_parent(plan.trial_dir); !made.ok())
      return std::move(made).error().with_context("command trainer: the trial directory");
  }
  plan.trial_dir = fs::absolute(plan.trial_dir).string();
  // Each attempt logs in a directory of its own: nothing of an earlier attempt (killed, but maybe
  // not yet gone) mixes into the retry's logs. The trial directory is shared on purpose: it holds
  // the checkpoints a retry resumes from.
  plan.attempt_dir = plan.trial_dir + "/attempt-" + std::to_string(ctx.attempt);
  if (Status made = make_directory_like_parent(plan.attempt_dir); !made.ok())
    return std::move(made).error().with_context("command trainer: the attempt's directory");
  plan.stdout_log = plan.attempt_dir + "/stdout.log";
  plan.stderr_log = plan.attempt_dir + "/stderr.log";
  return Status::Ok();
}

Result<TrialPlan> plan_trial(const TrialContext& ctx, const CommandSettings& s) {
  TrialPlan plan;
  plan.s = s;
  plan.ranks = std::max(1, ctx.ranks);
  HPCTUNE_TRY(make_trial_dirs(ctx, plan));
  nlohmann::json params = ctx.params.is_object() ? ctx.params : nlohmann::json::object();
  HPCTUNE_ASSIGN(const auto workflow_vars, workflow_env(ctx.trainer, params));
  // The template's values: the parameters, then the trial's own names where no parameter has them.
  nlohmann::json values = params;
  const nlohmann::json builtins = {{"trial_id", ctx.trial_id}, {"trial_dir", plan.trial_dir}, {"attempt", ctx.attempt},
                                   {"attempt_dir", plan.attempt_dir}, {"seed", ctx.seed}, {"ranks", plan.ranks}};
  for (auto it = builtins.begin(); it != builtins.end(); ++it)
    if (!values.contains(it.key())) values[it.key()] = it.value();
  auto& env = plan.trial_env;
  HPCTUNE_TRY(checkpoint_env(ctx, plan.trial_dir, params, values, env));
  // A persistent program's command holds only {ranks} (parse_command_settings checked it).
  if (s.persistent) values = nlohmann::json{{"ranks", plan.ranks}};
  // The string form runs under /bin/sh (a simple command exec'd); the list form as it is.
  std::vector<std::string> program;
  if (s.argv.empty()) {
    HPCTUNE_ASSIGN(std::string command, render_command(s.command, values));
    program = {"/bin/sh", "-c", exec_prefixed(command)};
  } else {
    for (const auto& item : s.argv) {
      HPCTUNE_ASSIGN(std::string arg, render_argument(item, values));
      program.push_back(std::move(arg));
    }
  }
  env["HPCTUNE_PARAMS"] = params.dump();
  env["HPCTUNE_TRIAL_ID"] = std::to_string(ctx.trial_id);
  env["HPCTUNE_TRIAL_DIR"] = plan.trial_dir;
  env["HPCTUNE_ATTEMPT"] = std::to_string(ctx.attempt);
  env["HPCTUNE_ATTEMPT_DIR"] = plan.attempt_dir;
  env["HPCTUNE_SEED"] = std::to_string(ctx.seed);
  for (const auto& [k, v] : workflow_vars) env[k] = v;

  launch::SpawnOptions& spawn = plan.spawn;
  if (plan.ranks > 1) {
    HPCTUNE_ASSIGN(spawn.argv, mpirun_prefix(plan.ranks));
  }
  HPCTUNE_TRY(add_rank_environment(plan.ranks, spawn));  // MASTER_ADDR, RANK, ... (rank_environment.h)
  spawn.argv.insert(spawn.argv.end(), program.begin(), program.end());
  // The group's thread budget, unless the user's environment already decides: a BLAS or PyTorch
  // program otherwise takes every core, and groups side by side oversubscribe the machine.
  const int threads = std::max(1, ctx.threads);
  spawn.env["HPCTUNE_THREADS"] = std::to_string(threads);
  for (const char* name : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"})
    if (getenv(name) == nullptr) spawn.env[name] = std::to_string(threads);
  // Python writes a pipe in blocks of 8 KB: a print() of a report without flush=True reaches the
  // worker only with the block, or at the program's end, after the step where a rung would have
  // stopped it. Unbuffered, unless the user's environment decides.
  if (getenv("PYTHONUNBUFFERED") == nullptr) spawn.env["PYTHONUNBUFFERED"] = "1";
  for (const auto& [k, v] : s.env) spawn.env[k] = v;
  spawn.workdir = s.workdir;
  spawn.supervised = true;  // the whole tree dies with the trial, and with this worker
  if (!s.workdir.empty() && !fs::is_directory(s.workdir))
    return err(Errc::kNotFound, "command trainer: workdir '" + s.workdir + "' is not a directory");
  plan.key = nlohmann::json{{"command", program}, {"workdir", s.workdir}, {"env", s.env}, {"ranks", plan.ranks},
                            {"threads", threads}}.dump();
  return plan;
}

// Starts the program for `plan`, with the trial's variables (a persistent program's first trial).
Result<std::unique_ptr<CommandPrograms::Program>> start_program(const TrialContext& ctx, const TrialPlan& plan) {
  auto p = std::make_unique<CommandPrograms::Program>();
  p->key = plan.key;
  launch::SpawnOptions spawn = plan.spawn;
  for (const auto& [k, v] : plan.trial_env) spawn.env.emplace(k, v);  // `env` settings win
  if (plan.s.persistent) {
    p->control = std::make_unique<ControlChannel>();
    HPCTUNE_TRY(p->control->open());
    spawn.env["HPCTUNE_CONTROL"] = p->control->path();
    spawn.env["HPCTUNE_CONTROL_TOKEN"] = p->control->token();
    // Its own fence token: each trial's fence file records it while that trial runs (run_trial).
    p->fence_token = launch::AttemptFence::new_token();
    spawn.env[launch::AttemptFence::kEnvironmentName] = p->fence_token;
  } else if (!ctx.trial_dir.empty()) {
    // Nothing of an earlier attempt of this trial runs beside this one, even when that attempt's
    // worker and supervisor died together (launch/attempt_fence.h).
    spawn.fence = plan.trial_dir + "/" + launch::kAttemptFenceFile;
  }
  HPCTUNE_TRY(p->out_pipe.open());
  HPCTUNE_TRY(p->err_pipe.open());
  spawn.stdout_fd = p->out_pipe.write;
  spawn.stderr_fd = p->err_pipe.write;
  HPCTUNE_ASSIGN(p->child, launch::ChildProcess::spawn(spawn));
  p->out_pipe.close_write();
  p->err_pipe.close_write();
  return p;
}

// One run of a trial's attempt on a program: what it reported and how it ended.
struct Session {
  LogFile out_log, err_log;
  TrialResult result;
  int64_t last_step = 0;
  bool stopping = false;  // asked to stop (SIGTERM, or the control channel)
  bool timed_out = false;
  bool ended = false;     // a persistent program's end line for this trial, from every rank
  std::set<int> ended_ranks;
  Clock::time_point start{}, kill_at{}, end_at{};
  std::deque<std::string> stderr_tail;
  std::size_t ignored_reports = 0;
  std::size_t stderr_reports = 0;  // report lines on standard error, which do not count
};

// A persistent program's end line for this trial (one of an earlier trial is ignored). The helper
// prints it after the trial's body, which may have left text without a line end (a progress bar):
// it counts wherever it starts in the line.
bool ends_trial(std::string_view line, const TrialContext& ctx) {
  const auto at = line.find(kTrialEndPrefix);
  if (at == std::string_view::npos) return false;
  const std::string_view rest = line.substr(at + kTrialEndPrefix.size());
  if (rest.empty() || (rest[0] != ' ' && rest[0] != '\t')) return false;
  const nlohmann::json j = nlohmann::json::parse(rest, nullptr, false);
  return j.is_object() && j.value("trial", int64_t{-1}) == ctx.trial_id &&
         j.value("attempt", ctx.attempt) == ctx.attempt;
}

// Reads what the program wrote on `fd` (stdout when out) into the session's logs and reports.
void read_output(const TrialContext& ctx, const TrialPlan& plan, CommandPrograms::Program& p, Session& t, bool out) {
  char buffer[65536];
  Pipe& pipe = out ? p.out_pipe : p.err_pipe;
  auto handle_line = [&](int rank, std::string_view text) {
    // Every rank ends the trial (the helper prints the line on each): the next trial is sent once
    // all have, so that a rank never misses one.
    if (plan.s.persistent && ends_trial(text, ctx)) {
      t.ended_ranks.insert(rank);
      if (static_cast<int>(t.ended_ranks.size()) >= plan.ranks) {
        t.ended = true;
        t.end_at = Clock::now();
      }
      return;
    }
    if (rank != 0) return;  // only rank 0's lines can be reports
    auto report = parse_report_line(text);
    if (!report) return;
    if (!report->ok()) {
      ++t.ignored_reports;
      t.out_log << "hpctune: warning: ignored the report line above: " << report->error().message() << "\n";
      return;
    }
    const int64_t step = report->value().step.value_or(t.last_step + 1);
    t.last_step = step;
    t.result.step = step;
    t.result.metrics = report->value().metrics;
    if (!t.stopping) ctx.report(step, t.result.metrics);
  };
  auto on_stdout = [&](std::string_view line, bool partial, bool ends_line) {
    t.out_log << line << (ends_line ? "\n" : "");
    if (partial) return;
    if (plan.ranks == 1) return handle_line(0, line);
    // mpirun tags each chunk a rank writes, not each line: a rank that writes a line in pieces
    // (Python's print() under PYTHONUNBUFFERED) is cut by other ranks' chunks, as in
    // "[1,1]<stdout>:text[1,0]<stdout>:whole line" followed later by "[1,1]<stdout>:". So the line
    // is split at every tag; a piece before the last is the start of its rank's line, and the last
    // piece ends its rank's line. Only rank 0's lines can be reports; untagged text is mpirun's own.
    std::vector<Tagged> pieces;
    for (std::size_t at = line.find('['); at != std::string_view::npos; at = line.find('[', at + 1)) {
      const Tagged tag = untag(line.substr(at));
      if (tag.rank < 0) continue;
      if (!pieces.empty()) {  // the previous piece ends where this tag starts
        const char* begin = pieces.back().text.data();
        pieces.back().text = std::string_view(begin, static_cast<std::size_t>(line.data() + at - begin));
      }
      pieces.push_back(tag);
    }
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      std::string& pending = p.rank_pieces[pieces[i].rank];
      pending.append(pieces[i].text);
      if (i + 1 < pieces.size()) continue;  // cut by another rank's chunk: the rest comes later
      const std::string whole = std::move(pending);
      pending.clear();
      handle_line(pieces[i].rank, whole);
    }
  };
  auto on_stderr = [&](std::string_view line, bool partial, bool ends_line) {
    t.err_log << line << (ends_line ? "\n" : "");
    if (partial) return;
    if (auto report = parse_report_line(line); report && report->ok()) {  // logging's default stream
      ++t.stderr_reports;
      t.err_log << "hpctune: warning: the report line above is on standard error, where reports do not count: "
                   "print it on standard output (Python's logging writes to standard error)\n";
    }
    t.stderr_tail.emplace_back(line);
    if (t.stderr_tail.size() > CommandTrainer::kStderrTailLines) t.stderr_tail.pop_front();
  };
  const ssize_t got = ::read(pipe.read, buffer, sizeof buffer);
  if (got > 0) {
    if (out) p.out_lines.feed(buffer, static_cast<std::size_t>(got), on_stdout);
    else p.err_lines.feed(buffer, static_cast<std::size_t>(got), on_stderr);
  } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
    if (out) p.out_lines.finish(on_stdout);
    else p.err_lines.finish(on_stderr);
    pipe.close_read();
  }
}

// What is already in the program's standard error (a persistent program that ended its trial:
// what it wrote before its end line belongs to the trial).
void drain_stderr(const TrialContext& ctx, const TrialPlan& plan, CommandPrograms::Program& p, Session& t) {
  for (int i = 0; i < 64 && p.err_pipe.read >= 0; ++i) {
    pollfd fd{p.err_pipe.read, POLLIN, 0};
    if (::poll(&fd, 1, 0) <= 0) return;
    read_output(ctx, plan, p, t, /*out=*/false);
  }
}

void kill_program(CommandPrograms::Program& p) {
  // mpirun puts each rank in its own process group: reach them through the process tree.
  for (pid_t d : descendants(p.child.pid())) ::kill(d, SIGKILL);
  p.child.signal(SIGKILL);
  p.killed = true;
}

// Asks the program to end the trial: through the control channel when it has connected (a
// persistent program's helper), else SIGTERM.
void begin_termination(const TrialContext& ctx, const TrialPlan& plan, CommandPrograms::Program& p, Session& t,
                       Clock::time_point now) {
  t.stopping = true;
  if (p.control && p.control->connected()) {
    p.control->stop(nlohmann::json{{"stop", ctx.trial_id}, {"attempt", ctx.attempt}}.dump());
  } else {
    p.child.signal(SIGTERM);
    p.child.signal(SIGCONT);  // a stopped program cannot act on SIGTERM
  }
  t.kill_at = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(plan.s.grace));
}

// The output loop: relays the program's lines until it ends the trial (its end line) or ends
// itself and its output is read; honours the stop, the timeout and the grace period.
Status pump(const TrialContext& ctx, const TrialPlan& plan, CommandPrograms::Program& p, Session& t) {
  const CommandSettings& s = plan.s;
  std::vector<pollfd> fds;
  for (;;) {
    // The program's end wakes the poll too (the supervisor's status pipe), and so does a stop
    // (ctx.stop_fd): no slice is waited out.
    fds.assign({{p.out_pipe.read, POLLIN, 0},
                {p.err_pipe.read, POLLIN, 0},
                {p.child.wait_fd(), POLLIN, 0},
                {t.stopping ? -1 : ctx.stop_fd, POLLIN, 0}});
    if (p.control) p.control->add_fds(fds);
    const int n = ::poll(fds.data(), fds.size(), CommandTrainer::kSliceMs);
    if (n < 0 && errno != EINTR) {
      kill_program(p);
      return err(Errc::kIo, std::string("command trainer: poll: ") + strerror(errno));
    }
    for (int i = 0; i < 2 && n > 0; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      read_output(ctx, plan, p, t, /*out=*/i == 0);
    }
    if (p.control && n > 0) p.control->service(fds, 4);
    const auto now = Clock::now();
    if (t.ended) {
      drain_stderr(ctx, plan, p, t);
      return Status::Ok();
    }
    if (!p.status) {
      p.status = p.child.poll();  // reaping also kills whatever the program left in its process group
      if (p.status) p.exited_at = now;
    }
    if (p.status) {
      // Done once the pipes are drained; a descendant outside the group that holds them open
      // gets 2 s before the rest of its output is given up.
      if (p.drained() || now - p.exited_at > std::chrono::seconds(2)) {
        t.end_at = p.exited_at;
        return Status::Ok();
      }
      continue;
    }
    if (!t.stopping) {
      if (ctx.stop_requested()) {
        begin_termination(ctx, plan, p, t, now);
      } else if (s.timeout > 0 && now - t.start >= std::chrono::duration<double>(s.timeout)) {
        t.timed_out = true;
        t.out_log << "hpctune: trial exceeded its timeout of " << seconds_text(s.timeout) << "; terminating\n";
        begin_termination(ctx, plan, p, t, now);
      }
    } else if (!p.killed && now >= t.kill_at) {
      t.out_log << "hpctune: still running " << seconds_text(s.grace) << " after "
                << (p.control && p.control->connected() ? "the stop" : "SIGTERM") << "; sending SIGKILL\n";
      kill_program(p);
    } else if (p.killed && now - t.kill_at > std::chrono::seconds(30)) {
      return err(Errc::kInternal, "command trainer: the program survived SIGKILL for 30 s (pid " +
                                      std::to_string(p.child.pid()) + ")");
    }
  }
}

// The trial's result from the session; `again` is set (and the result is to be dropped) when a
// persistent program died by a signal hpctune did not send, on the attempt's first run.
Result<TrialResult> finish(const TrialContext& ctx, const TrialPlan& plan, std::unique_ptr<CommandPrograms::Program>& slot,
                           Session& t, int run, bool& again) {
  const CommandSettings& s = plan.s;
  CommandPrograms::Program& p = *slot;
  const double seconds = std::chrono::duration<double>(t.end_at - t.start).count();
  const bool exited = !t.ended && p.status.has_value();
  if (t.ended) t.out_log << "hpctune: trial ended after " << seconds << " s; the program (pid " << p.child.pid()
                         << ") stays for the next trial";
  else t.out_log << "hpctune: " << p.status->describe() << " after " << seconds << " s";
  if (t.ignored_reports > 0) t.out_log << "; " << t.ignored_reports << " malformed report line(s) ignored";
  if (t.stderr_reports > 0) t.out_log << "; " << t.stderr_reports << " report line(s) on standard error not counted";
  t.out_log << "\n";
  const bool died = s.persistent && exited && p.status->signaled && !p.killed && !t.stopping;
  if (died && run == 1) {
    t.out_log << "hpctune: the program died during the trial; a fresh one runs the attempt again\n";
    again = true;
    slot.reset();
    return t.result;
  }
  t.out_log.close();  // the artifacts' sizes are read from the files
  t.err_log.close();
  const launch::ExitStatus status = exited ? *p.status : launch::ExitStatus{};
  if (p.control) p.control->end_trial();
  if (exited || p.killed) slot.reset();  // a persistent program that ended its trial stays (p is gone)

  std::string tail;
  for (const auto& line : t.stderr_tail) tail += line + "\n";
  auto with_tail = [&](std::string message) {
    if (!tail.empty()) message += "; last lines of standard error:\n" + tail;
    return message;
  };
  if (t.timed_out)
    return err(Errc::kTimeout, with_tail("command trainer: the trial exceeded its timeout of " +
                                         seconds_text(s.timeout) + " (trainer.timeout) and was killed"));
  TrialResult result = std::move(t.result);
  // A stopped trial that never reported keeps empty metrics: the master then keeps what it has.
  if (!result.metrics.empty() || !t.stopping) result.metrics["train_seconds"] = seconds;
  if (!ctx.trial_dir.empty()) {
    result.artifacts.push_back({"log", plan.stdout_log});
    result.artifacts.push_back({"log", plan.stderr_log});
  }
  if (t.stopping) {
    result.stopped = true;
    return result;
  }
  if (!status.success()) return err(Errc::kFailed, with_tail("command failed: " + status.describe()));
  return result;
}

// The trial's message to a persistent program: its variables, and the per-trial ones it lacks.
std::string trial_message(const TrialContext& ctx, const TrialPlan& plan) {
  nlohmann::json unset = nlohmann::json::array();
  for (const char* name : kTrialVariables)
    if (!plan.trial_env.count(name)) unset.push_back(name);
  return nlohmann::json{{"trial", ctx.trial_id}, {"attempt", ctx.attempt}, {"env", plan.trial_env}, {"unset", unset}}
      .dump();
}

// One run of the trial's attempt on the program in `slot` (started here when there is none, or
// when a persistent one was started otherwise or has ended).
Result<TrialResult> run_trial(const TrialContext& ctx, const CommandSettings& s,
                              std::unique_ptr<CommandPrograms::Program>& slot, int run, bool& again) {
  HPCTUNE_ASSIGN(TrialPlan plan, plan_trial(ctx, s));
  Session t;
  for (auto [log, path] : {std::pair{&t.out_log, &plan.stdout_log}, std::pair{&t.err_log, &plan.stderr_log}}) {
    if (Status opened = log->open(*path, s.log_limit); !opened.ok())
      return std::move(opened).error().with_context("command trainer: while opening the logs in " + plan.attempt_dir);
  }
  t.out_log << "hpctune: trial " << ctx.trial_id << " attempt " << ctx.attempt << ": "
            << (plan.s.argv.empty() ? plan.spawn.argv.back() : plan.s.command) << "\n";
  if (slot && !slot->status) {
    slot->status = slot->child.poll();  // it may have ended between trials
  }
  if (slot && (slot->status || slot->key != plan.key)) slot.reset();
  const std::string fence_path = ctx.trial_dir.empty() ? "" : plan.trial_dir + "/" + launch::kAttemptFenceFile;
  if (!slot && s.persistent && !fence_path.empty()) HPCTUNE_TRY(launch::fence_attempt(fence_path, std::chrono::seconds(10)));
  if (slot) {
    t.out_log << "hpctune: served by the running program (pid " << slot->child.pid() << ")\n";
  } else {
    HPCTUNE_ASSIGN(slot, start_program(ctx, plan));
  }
  // A persistent program's trial is fenced for as long as this trial runs, and no longer.
  launch::AttemptFence fence;
  if (s.persistent && !fence_path.empty()) {
    HPCTUNE_ASSIGN(fence, launch::AttemptFence::enter_shared(fence_path, std::chrono::seconds(10), slot->fence_token,
                                                             slot->child.pid()));
  }
  if (slot->control) slot->control->begin_trial(trial_message(ctx, plan));
  t.start = Clock::now();
  if (Status st = pump(ctx, plan, *slot, t); !st.ok()) {
    slot.reset();
    return st.error();
  }
  return finish(ctx, plan, slot, t, run, again);
}

}  // namespace

Result<TrialResult> CommandTrainer::run(const TrialContext& ctx) {
  HPCTUNE_ASSIGN(CommandSettings s, parse_command_settings(ctx.trainer));
  std::unique_ptr<CommandPrograms::Program> own;  // without persistent: this trial's program
  std::unique_lock<std::mutex> lock;
  std::unique_ptr<CommandPrograms::Program>* slot = &own;
  if (s.persistent) {
    if (!programs_) programs_ = std::make_shared<CommandPrograms>();
    lock = std::unique_lock(programs_->mu);
    slot = &programs_->live;
  }
  for (int run = 1;; ++run) {
    bool again = false;
    auto result = run_trial(ctx, s, *slot, run, again);
    if (!again) return result;
  }
}

}  // namespace hpctune::trainers
