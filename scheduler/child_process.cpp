#include "scheduler/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <fstream>
#include <thread>

extern char** environ;

namespace hpctune {

std::string ExitStatus::describe() const {
  if (signaled) return "killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
  return "exit code " + std::to_string(code);
}

namespace {

ExitStatus from_wait_status(int status) {
  ExitStatus e;
  if (WIFSIGNALED(status)) {
    e.signaled = true;
    e.signal = WTERMSIG(status);
  } else if (WIFEXITED(status)) {
    e.code = WEXITSTATUS(status);
  }
  return e;
}

bool executable(const std::string& path) { return access(path.c_str(), X_OK) == 0; }

std::string resolve(const std::string& program) {
  if (program.find('/') != std::string::npos) return executable(program) ? program : "";
  const char* path = getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string candidate = dirs.substr(start, end - start) + "/" + program;
    if (executable(candidate)) return candidate;
    start = end + 1;
  }
  return "";
}

}  // namespace

Result<ChildProcess> ChildProcess::spawn(const SpawnOptions& options) {
  if (options.argv.empty()) return err(Errc::kInvalidArgument, "spawn: empty argv");
  const std::string program = resolve(options.argv[0]);
  if (program.empty()) return err(Errc::kNotFound, "cannot execute '" + options.argv[0] + "': not found or not executable");

  // Everything the child needs is prepared before fork: after it only async-signal-safe calls.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    std::string entry(*e);
    auto eq = entry.find('=');
    if (eq != std::string::npos && options.env.count(entry.substr(0, eq))) continue;
    env_strings.push_back(std::move(entry));
  }
  for (const auto& [k, v] : options.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = options.argv;
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);

  int out_fd = -1, err_fd = -1;
  if (!options.stdout_path.empty()) {
    out_fd = open(options.stdout_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (out_fd < 0) return err(Errc::kIo, "cannot open " + options.stdout_path + ": " + strerror(errno));
  }
  if (options.stderr_path == "=stdout") {
    err_fd = out_fd;
  } else if (!options.stderr_path.empty()) {
    err_fd = open(options.stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (err_fd < 0) {
      if (out_fd >= 0) close(out_fd);
      return err(Errc::kIo, "cannot open " + options.stderr_path + ": " + strerror(errno));
    }
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    if (out_fd >= 0) close(out_fd);
    if (err_fd >= 0 && err_fd != out_fd) close(err_fd);
    return err(Errc::kIo, std::string("fork failed: ") + strerror(errno));
  }
  if (pid == 0) {
    if (options.new_process_group) setpgid(0, 0);
    if (options.die_with_parent) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);  // the parent died before prctl took effect
    }
    // Signals the parent ignores or blocks must not leak into the child.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::signal(SIGPIPE, SIG_DFL);
    if (out_fd >= 0) dup2(out_fd, STDOUT_FILENO);
    if (err_fd >= 0) dup2(err_fd, STDERR_FILENO);
    if (options.stdout_fd >= 0) dup2(options.stdout_fd, STDOUT_FILENO);
    if (options.stderr_fd >= 0) dup2(options.stderr_fd, STDERR_FILENO);
    if (!options.workdir.empty() && chdir(options.workdir.c_str()) != 0) _exit(126);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    execve(program.c_str(), argv.data(), envp.data());
    _exit(127);
  }
  if (out_fd >= 0) close(out_fd);
  if (err_fd >= 0 && err_fd != out_fd) close(err_fd);
  if (options.new_process_group) setpgid(pid, pid);  // also from the parent: no race with kill()
  ChildProcess child;
  child.pid_ = pid;
  child.own_group_ = options.new_process_group;
  return child;
}

ChildProcess::~ChildProcess() { reset(); }

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(other.pid_), own_group_(other.own_group_), exit_(other.exit_) {
  other.pid_ = -1;
  other.exit_.reset();
}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    reset();
    pid_ = other.pid_;
    own_group_ = other.own_group_;
    exit_ = other.exit_;
    other.pid_ = -1;
    other.exit_.reset();
  }
  return *this;
}

void ChildProcess::reset() noexcept {
  if (pid_ > 0 && !exit_) {
    signal(SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  } else if (pid_ > 0 && own_group_) {
    ::kill(-pid_, SIGKILL);  // the leader is gone; its group may not be
  }
  pid_ = -1;
  exit_.reset();
}

std::optional<ExitStatus> ChildProcess::poll() {
  if (pid_ <= 0) return std::nullopt;
  if (exit_) return exit_;
  int status = 0;
  pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    exit_ = from_wait_status(status);
    if (own_group_) ::kill(-pid_, SIGKILL);  // whatever the leader left behind
  }
  return exit_;
}

std::optional<ExitStatus> ChildProcess::wait_for(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (auto e = poll()) return e;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void ChildProcess::signal(int sig) noexcept {
  if (pid_ <= 0 || exit_) return;
  if (own_group_) {
    ::kill(-pid_, sig);
  } else {
    ::kill(pid_, sig);
  }
}

ExitStatus ChildProcess::terminate(std::chrono::milliseconds grace) {
  if (auto e = poll()) return *e;
  signal(SIGTERM);
  signal(SIGCONT);  // a stopped process cannot act on SIGTERM
  if (auto e = wait_for(grace)) return *e;
  signal(SIGKILL);
  if (auto e = wait_for(std::chrono::milliseconds(5000))) return *e;
  return ExitStatus{0, SIGKILL, true};
}

std::string tail_file(const std::string& path, std::size_t max_lines) {
  std::ifstream in(path);
  if (!in) return "";
  std::deque<std::string> lines;
  std::string line;
  while (std::getline(in, line)) {
    lines.push_back(std::move(line));
    if (lines.size() > max_lines) lines.pop_front();
  }
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

}  // namespace hpctune
