#include "launch/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include <cerrno>
#include <cstring>
#include <deque>
#include <fstream>
#include <thread>

#include "common/system.h"

extern char** environ;

namespace hpctune::launch {

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

// Blocks every signal of the calling thread for its lifetime. Around fork(): a signal that arrives
// between fork and exec would otherwise run a handler of the parent's (a test framework's crash
// report, the CLI's Ctrl-C flag) inside the child's copy of the parent.
class BlockSignals {
 public:
  BlockSignals() {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old_);
  }
  ~BlockSignals() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  BlockSignals(const BlockSignals&) = delete;
  BlockSignals& operator=(const BlockSignals&) = delete;

 private:
  sigset_t old_;
};

// In a child after fork (async-signal-safe): every signal back to its default action.
void reset_signal_handlers() {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) sigaction(sig, &dfl, nullptr);
  }
}

}  // namespace

Result<ChildProcess> ChildProcess::spawn(const SpawnOptions& options) {
  if (options.argv.empty()) return err(Errc::kInvalidArgument, "spawn: empty argv");
  const std::string program = find_in_path(options.argv[0]);
  if (program.empty()) return err(Errc::kNotFound, "cannot execute '" + options.argv[0] + "': not found or not executable");

  // The earlier attempt of this trial is gone before this one starts (attempt_fence.h).
  AttemptFence fence;
  if (options.supervised && !options.fence.empty()) {
    HPCTUNE_ASSIGN(fence, AttemptFence::enter(options.fence, std::chrono::seconds(10)));
  }
  std::map<std::string, std::string> env = options.env;
  if (!fence.token().empty()) env[AttemptFence::kEnvironmentName] = fence.token();
  // Everything the child needs is prepared before fork: after it only async-signal-safe calls.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    std::string entry(*e);
    auto eq = entry.find('=');
    if (eq != std::string::npos && env.count(entry.substr(0, eq))) continue;
    env_strings.push_back(std::move(entry));
  }
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
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
  // The program's side of a fork (async-signal-safe calls only): its process group, death with its
  // parent, default signals, descriptors, directory, exec.
  auto exec_program = [&](pid_t parent, bool own_group) {
    if (own_group) setpgid(0, 0);
    if (options.die_with_parent) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);  // the parent died before prctl took effect
    }
    // Signals the parent handles, ignores or blocks must not leak into the child. Every signal is
    // blocked across fork (BlockSignals), so none can run a handler of the parent's in this copy of
    // it: the handlers are reset first, then the mask is cleared.
    reset_signal_handlers();
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (out_fd >= 0) dup2(out_fd, STDOUT_FILENO);
    if (err_fd >= 0) dup2(err_fd, STDERR_FILENO);
    if (options.stdout_fd >= 0) dup2(options.stdout_fd, STDOUT_FILENO);
    if (options.stderr_fd >= 0) dup2(options.stderr_fd, STDERR_FILENO);
    if (!options.workdir.empty() && chdir(options.workdir.c_str()) != 0) _exit(126);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    execve(program.c_str(), argv.data(), envp.data());
    _exit(127);
  };
  auto close_outputs = [&] {
    if (out_fd >= 0) close(out_fd);
    if (err_fd >= 0 && err_fd != out_fd) close(err_fd);
  };
  if (options.supervised) {
    // The supervisor keeps none of the program's output descriptors: its readers see EOF when the
    // program's tree is gone, not when the supervisor is.
    const std::vector<int> not_for_supervisor = {out_fd, err_fd, options.stdout_fd, options.stderr_fd};
    auto child = spawn_supervised(exec_program, not_for_supervisor, options.argv[0]);
    close_outputs();
    if (child.ok() && !fence.token().empty()) {
      // The program's group, for a program that clears its environment; the token was recorded
      // before the fork, so a failure here still leaves the attempt fenced by its token.
      (void)fence.started(child->pid_);
      child->fence_ = std::move(fence);
    }
    return child;
  }

  const pid_t parent = getpid();
  BlockSignals blocked;
  const pid_t pid = fork();
  if (pid < 0) {
    close_outputs();
    return err(Errc::kIo, std::string("fork failed: ") + strerror(errno));
  }
  if (pid == 0) exec_program(parent, options.new_process_group);
  close_outputs();
  if (options.new_process_group) setpgid(pid, pid);  // also from the parent: no race with kill()
  ChildProcess child;
  child.pid_ = pid;
  child.own_group_ = options.new_process_group;
  return child;
}

namespace {

// Writes all of `n` bytes (async-signal-safe).
bool write_all(int fd, const void* data, std::size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

// The supervisor's end (async-signal-safe calls only): SIGKILLs P's group and then every process
// reparented to the supervisor, reaping them, until it has no child left. Returns P's wait status
// when P was reaped here, -1 otherwise.
int kill_tree(pid_t program, bool& program_reaped) {
  int program_status = -1;
  ::kill(-program, SIGKILL);
  for (int round = 0; round < 1000; ++round) {
    int status = 0;
    pid_t r;
    while ((r = waitpid(-1, &status, WNOHANG)) > 0) {
      if (r == program) program_reaped = true, program_status = status;
    }
    if (r < 0 && errno == ECHILD) break;  // nobody left
    // Whoever is left is a child: P, or a descendant whose parent died (we are its subreaper).
    const int fd = open("/proc/thread-self/children", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      char buf[4096];
      const ssize_t n = ::read(fd, buf, sizeof buf - 1);
      close(fd);
      pid_t pid = 0;
      for (ssize_t i = 0; i < std::max<ssize_t>(n, 0) + 1; ++i) {
        if (i < n && buf[i] >= '0' && buf[i] <= '9') {
          pid = pid * 10 + (buf[i] - '0');
        } else if (pid > 0) {
          ::kill(pid, SIGKILL);
          ::kill(-pid, SIGKILL);  // its group, if it leads one (mpirun's ranks, setsid)
          pid = 0;
        }
      }
    } else if (program_reaped) {
      break;  // no way to find the rest; P's group had its SIGKILL
    }
    // A killed child dies promptly: look again in a moment (bounded by the rounds).
    const timespec pause{0, 1000000};
    nanosleep(&pause, nullptr);
  }
  return program_status;
}

}  // namespace

Result<ChildProcess> ChildProcess::spawn_supervised(const std::function<void(pid_t, bool)>& exec_program,
                                                   const std::vector<int>& not_for_supervisor, const std::string& what) {
  int alive[2], status[2];
  if (pipe2(alive, O_CLOEXEC) != 0) return err(Errc::kIo, std::string("pipe failed: ") + strerror(errno));
  if (pipe2(status, O_CLOEXEC) != 0) {
    close(alive[0]);
    close(alive[1]);
    return err(Errc::kIo, std::string("pipe failed: ") + strerror(errno));
  }
  BlockSignals blocked;  // see exec_program: no handler of this process may run in the copy
  const pid_t s = fork();
  if (s < 0) {
    for (int fd : {alive[0], alive[1], status[0], status[1]}) close(fd);
    return err(Errc::kIo, std::string("fork failed: ") + strerror(errno));
  }
  if (s == 0) {
    // The supervisor. Its own group, so that signals meant for the worker's group or the program's
    // do not reach it; it ends only through the pipes.
    close(alive[1]);
    close(status[0]);
    setpgid(0, 0);
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    prctl(PR_SET_NAME, "hpctune-superv");  // in ps, apart from the worker whose command line it shares
    reset_signal_handlers();
    for (int sig : {SIGINT, SIGTERM, SIGPIPE, SIGHUP, SIGQUIT}) ::signal(sig, SIG_IGN);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    const pid_t self = getpid();
    const pid_t program = fork();
    if (program == 0) exec_program(self, true);  // execs or _exits
    if (program < 0) _exit(127);
    for (int fd : not_for_supervisor)
      if (fd >= 0) close(fd);
    // Nor any other descriptor of this process: another supervisor's pipe end held here would hide
    // that process's death from it. Only the two pipe ends stay (close_range: Linux 5.9).
    const unsigned keep_lo = static_cast<unsigned>(std::min(alive[0], status[1]));
    const unsigned keep_hi = static_cast<unsigned>(std::max(alive[0], status[1]));
    if (keep_lo > 3) syscall(SYS_close_range, 3u, keep_lo - 1, 0u);
    if (keep_hi > keep_lo + 1) syscall(SYS_close_range, keep_lo + 1, keep_hi - 1, 0u);
    syscall(SYS_close_range, keep_hi + 1, ~0u, 0u);
    setpgid(program, program);  // also from here: no race with kill(-program)
    int32_t word = program;
    if (!write_all(status[1], &word, sizeof word)) {
      bool reaped = false;
      kill_tree(program, reaped);
      _exit(1);
    }
    const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, program, 0));
    for (;;) {
      pollfd fds[2] = {{alive[0], POLLIN, 0}, {pidfd, POLLIN, 0}};
      // Without a pidfd (old kernels): look at the program every 10 ms.
      const int n = ::poll(fds, pidfd >= 0 ? 2 : 1, pidfd >= 0 ? -1 : 10);
      if (n < 0 && errno != EINTR) break;
      int wstatus = 0;
      const pid_t r = waitpid(program, &wstatus, WNOHANG);
      if (r == program) {
        word = wstatus;
        (void)write_all(status[1], &word, sizeof word);
        bool reaped = true;
        kill_tree(program, reaped);
        _exit(0);
      }
      if (n > 0 && fds[0].revents != 0) break;  // the worker is gone (or gave up the program)
    }
    bool reaped = false;
    const int st = kill_tree(program, reaped);
    if (reaped) {
      word = st;
      (void)write_all(status[1], &word, sizeof word);
    }
    _exit(0);
  }
  close(alive[0]);
  close(status[1]);
  setpgid(s, s);
  ChildProcess child;
  child.supervisor_ = s;
  child.alive_fd_ = alive[1];
  child.status_fd_ = status[0];
  child.own_group_ = true;
  // The program's pid comes first; EOF means the supervisor could not start it.
  int32_t word = 0;
  std::size_t got = 0;
  while (got < sizeof word) {
    const ssize_t n = ::read(child.status_fd_, reinterpret_cast<char*>(&word) + got, sizeof word - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  if (got < sizeof word) {
    child.reap_supervisor(std::chrono::milliseconds(5000));
    child.close_fds();
    return err(Errc::kIo, "the supervisor could not start '" + what + "'");
  }
  child.pid_ = word;
  fcntl(child.status_fd_, F_SETFL, fcntl(child.status_fd_, F_GETFL) | O_NONBLOCK);
  return child;
}

ChildProcess::~ChildProcess() { reset(); }

ChildProcess::ChildProcess(ChildProcess&& other) noexcept { *this = std::move(other); }

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    reset();
    pid_ = other.pid_;
    own_group_ = other.own_group_;
    exit_ = other.exit_;
    supervisor_ = other.supervisor_;
    status_fd_ = other.status_fd_;
    alive_fd_ = other.alive_fd_;
    fence_ = std::move(other.fence_);
    other.pid_ = -1;
    other.exit_.reset();
    other.supervisor_ = -1;
    other.status_fd_ = other.alive_fd_ = -1;
  }
  return *this;
}

void ChildProcess::close_fds() noexcept {
  if (status_fd_ >= 0) ::close(status_fd_);
  if (alive_fd_ >= 0) ::close(alive_fd_);
  status_fd_ = alive_fd_ = -1;
}

// Waits up to `limit` for the supervisor to end (then SIGKILLs it) and reaps it.
bool ChildProcess::reap_supervisor(std::chrono::milliseconds limit) noexcept {
  if (supervisor_ <= 0) return true;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  bool by_itself = true;
  for (;;) {
    const pid_t r = waitpid(supervisor_, &status, WNOHANG);
    if (r == supervisor_ || (r < 0 && errno != EINTR)) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(supervisor_, SIGKILL);
      while (waitpid(supervisor_, &status, 0) < 0 && errno == EINTR) {
      }
      by_itself = false;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  supervisor_ = -1;
  // A supervisor that exits by itself has killed the program's tree; one killed by a signal has not.
  return by_itself && !(WIFSIGNALED(status));
}

void ChildProcess::reset() noexcept {
  if (supervisor_ > 0) {
    // Closing the pipe is what the supervisor waits for: it kills the program's tree and exits.
    if (!exit_ && pid_ > 0) ::kill(-pid_, SIGKILL);
    if (alive_fd_ >= 0) ::close(alive_fd_);
    alive_fd_ = -1;
    const bool tree_gone = reap_supervisor(std::chrono::milliseconds(5000));
    close_fds();
    if (tree_gone) {
      fence_.release();
    } else {
      fence_.abandon();
    }
    pid_ = -1;
    exit_.reset();
    return;
  }
  fence_.release();
  close_fds();
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
  if (supervisor_ > 0) {
    int32_t word = 0;
    const ssize_t n = ::read(status_fd_, &word, sizeof word);  // 4 bytes: written whole
    if (n == static_cast<ssize_t>(sizeof word)) {
      exit_ = from_wait_status(word);
    } else if (n == 0) {
      // The supervisor ended without a status: it was killed, and the program with it (PDEATHSIG);
      // what the program started is killed here (its group, and by the fence's token).
      int status = 0;
      while (waitpid(supervisor_, &status, 0) < 0 && errno == EINTR) {
      }
      supervisor_ = -1;
      ::kill(-pid_, SIGKILL);
      fence_.abandon();
      exit_ = from_wait_status(status);
    }
    return exit_;
  }
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
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return std::nullopt;
    if (wait_fd() >= 0) {
      pollfd fd{wait_fd(), POLLIN, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
      ::poll(&fd, 1, static_cast<int>(std::min<long long>(left + 1, 1000)));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
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

Result<std::string> self_program() {
  std::error_code ec;
  auto path = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return err(Errc::kIo, "cannot find this program's path (/proc/self/exe): " + ec.message());
  return path.string();
}

std::string mpirun_name(const std::string& configured) {
  if (!configured.empty()) return configured;
  const char* env = std::getenv("HPCTUNE_MPIRUN");
  return env && *env ? env : "mpirun";
}

std::vector<std::string> mpirun_command(const std::string& mpirun, int64_t ranks, const MpirunFlags& flags) {
  std::vector<std::string> argv = {mpirun, "-np", std::to_string(ranks), "--bind-to", "none"};
  if (flags.shared_memory_btl) argv.insert(argv.end(), {"--mca", "btl", "self,vader"});
  if (flags.oversubscribe) argv.emplace_back("--oversubscribe");
  if (flags.tag_output) argv.emplace_back("--tag-output");
  if (flags.enable_recovery) argv.emplace_back("--enable-recovery");
  if (geteuid() == 0) argv.emplace_back("--allow-run-as-root");
  return argv;
}

}  // namespace hpctune::launch
