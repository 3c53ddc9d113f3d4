// ChildProcess: an RAII handle on a process hpctune started (a trainer group, a training script).
//
// The child runs in its own process group, so kill() reaches everything it started (mpirun and
// its ranks, a shell and its pipeline). It is started with PR_SET_PDEATHSIG = SIGKILL, so it dies
// with the thread that started it even when that process is SIGKILLed: no orphan survives the
// master. The destructor kills the group and reaps the child; it never throws.
//
// Supervised (SpawnOptions::supervised, the command trainer's programs): a compound command's
// grandchildren do not die with the parent (PDEATHSIG reaches the direct child only), and a
// program may leave its process group (setsid, mpirun's ranks). So the process forked here is a
// supervisor S, in a process group of its own and immune to the signals meant for the program,
// a child subreaper (every descendant whose parent dies is reparented to it) that forks and execs
// the program P in P's own process group. S waits on a pidfd of P and on a pipe whose write end
// only this process holds. When P ends, S sends P's wait status through a second pipe (wait_fd(),
// which therefore wakes a poll() the moment P ends), then SIGKILLs P's group and every process
// reparented to it until none is left, and exits. When the pipe says this process is gone (even
// SIGKILLed), S does the same first. pid() is P; signal() reaches P's group.
// (The tree is found through /proc/thread-self/children; where the kernel lacks that file, only
// P's process group is killed.)
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "launch/attempt_fence.h"

namespace hpctune::launch {

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
  // Runs the program under a supervisor process (see the top of this file): the program's whole
  // tree dies with it, with this process even when it is SIGKILLed, and wait_fd() tells at once
  // when it ends. Implies new_process_group.
  bool supervised = false;
  // Supervised only: the attempt fence file (attempt_fence.h), "" = none. Before the program starts,
  // every process of the attempt recorded there is killed (and gone, or spawn fails with kBusy);
  // then this attempt is recorded in it, its token in the program's environment. The file is
  // removed when the supervisor has killed the program's tree (not when the supervisor itself had
  // to be killed: then the next attempt fences what is left).
  std::string fence;
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
  // Supervised: a descriptor that becomes readable when the program ends (then call poll()); -1
  // otherwise, and once poll() has returned the status.
  int wait_fd() const noexcept { return exit_ ? -1 : status_fd_; }
  // Waits at most `timeout`; nullopt if still running.
  std::optional<ExitStatus> wait_for(std::chrono::milliseconds timeout);
  // Sends `sig` to the child's process group (or the child alone without one).
  void signal(int sig) noexcept;
  // SIGTERM, wait up to `grace`, then SIGKILL and reap. Returns how it ended.
  ExitStatus terminate(std::chrono::milliseconds grace);

 private:
  void reset() noexcept;
  static Result<ChildProcess> spawn_supervised(const std::function<void(pid_t, bool)>& exec_program,
                                              const std::vector<int>& not_for_supervisor, const std::string& what);
  void close_fds() noexcept;
  // True when the supervisor ended by itself (it killed the program's tree), false when it had to
  // be SIGKILLed after `limit`.
  bool reap_supervisor(std::chrono::milliseconds limit) noexcept;
  AttemptFence fence_;     // supervised with SpawnOptions::fence
  pid_t pid_ = -1;
  bool own_group_ = false;
  std::optional<ExitStatus> exit_;
  pid_t supervisor_ = -1;  // supervised: S, until reaped
  int status_fd_ = -1;     // supervised: read end of S's status pipe
  int alive_fd_ = -1;      // supervised: write end of the pipe that tells S this process lives
};

// The last `max_lines` lines of a text file ("" when it cannot be read).
std::string tail_file(const std::string& path, std::size_t max_lines);

// The rank launch command: the Open MPI command line that runs `ranks` copies of the program
// appended after it. Written once for its two users, which need different flags: the local
// launcher (a group's worker ranks) and the command trainer (a user program's ranks).
struct MpirunFlags {
  bool shared_memory_btl = false;  // --mca btl self,vader: one host, no network transports
  bool oversubscribe = false;      // allow more ranks than cores
  bool tag_output = false;         // "[job,rank]<stdout>:" before each chunk (to tell rank 0's reports)
  bool enable_recovery = false;    // --enable-recovery: a rank that dies does not end the others
};
// The environment variable set (to "1") for the ranks of a group that mpirun runs with
// --enable-recovery: the group worker then ends the whole job itself (worker/group_worker.h).
inline constexpr const char* kGroupRecoveryEnv = "HPCTUNE_GROUP_RECOVERY";
// `mpirun` is the program found (a path); --bind-to none always (the groups share the cores and
// size their own threads), --allow-run-as-root when this process is root (containers).
std::vector<std::string> mpirun_command(const std::string& mpirun, int64_t ranks, const MpirunFlags& flags);
// This program's path (/proc/self/exe): what the launchers start as workers and what a batch
// script runs. kIo when the system will not say.
Result<std::string> self_program();
// The mpirun a group runs: `configured` when given, else $HPCTUNE_MPIRUN, else `mpirun`.
std::string mpirun_name(const std::string& configured);

}  // namespace hpctune::launch
