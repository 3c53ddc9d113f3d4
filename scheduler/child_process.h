// ChildProcess: an RAII handle on a process hpctune started (a trainer group, a training script).
//
// The child runs in its own process group, so kill() reaches everything it started (mpirun and
// its ranks, a shell and its pipeline). It is started with PR_SET_PDEATHSIG = SIGKILL, so it dies
// with the thread that started it even when that process is SIGKILLed: no orphan survives the
// master. The destructor kills the group and reaps the child; it never throws.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"

namespace hpctune {

struct SpawnOptions {
  std::vector<std::string> argv;               // argv[0] is the program (a path, or a name looked up in PATH)
  std::map<std::string, std::string> env;      // added to (or replacing in) the parent's environment
  std::string workdir;                         // "" = the parent's
  std::string stdout_path;                     // "" = inherit; output is appended
  std::string stderr_path;                     // "" = inherit; "=stdout" = same file as stdout
  // A descriptor (a pipe's write end) that becomes the child's stdout / stderr, in place of the
  // paths above; -1 = unused. The caller keeps it and closes its copy after spawn().
  int stdout_fd = -1;
  int stderr_fd = -1;
  bool new_process_group = true;
  bool die_with_parent = true;                 // PR_SET_PDEATHSIG(SIGKILL)
};

// How a process ended.
struct ExitStatus {
  int code = 0;    // exit code when !signaled
  int signal = 0;  // the terminating signal when signaled
  bool signaled = false;
  bool success() const { return !signaled && code == 0; }
  std::string describe() const;  // "exit code 3", "killed by signal 9 (Killed)"
};

class ChildProcess {
 public:
  ChildProcess() = default;
  ~ChildProcess();
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // kNotFound when the program does not exist or is not executable, kIo when fork fails.
  static Result<ChildProcess> spawn(const SpawnOptions& options);

  pid_t pid() const noexcept { return pid_; }
  bool running() const noexcept { return pid_ > 0 && !exit_; }

  // Non-blocking: the exit status once the child has ended (reaped), nullopt while it runs.
  std::optional<ExitStatus> poll();
  // Waits at most `timeout`; nullopt if still running.
  std::optional<ExitStatus> wait_for(std::chrono::milliseconds timeout);
  // Sends `sig` to the child's process group (or the child alone without one).
  void signal(int sig) noexcept;
  // SIGTERM, wait up to `grace`, then SIGKILL and reap. Returns how it ended.
  ExitStatus terminate(std::chrono::milliseconds grace);

 private:
  void reset() noexcept;
  pid_t pid_ = -1;
  bool own_group_ = false;
  std::optional<ExitStatus> exit_;
};

// The last `max_lines` lines of a text file ("" when it cannot be read).
std::string tail_file(const std::string& path, std::size_t max_lines);

}  // namespace hpctune
