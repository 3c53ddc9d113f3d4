// The attempt fence: nothing of a trial's earlier attempt runs when its next attempt starts.
//
// A supervised program (child_process.h) dies with its supervisor, and the supervisor kills the
// program's whole tree when the worker dies. But when the worker and its supervisor die together
// (SIGKILL of both, the OOM killer, or the master, worker and supervisor at once), nobody is left
// to kill the program's children: they are reparented to PID 1 and go on running, beside the next
// attempt of the same trial in the same trial directory.
//
// Chosen: a fence, kept by the attempt itself, that the next attempt (and the master, when it
// declares the attempt lost) enforces. Rejected: a PID namespace (needs CAP_SYS_ADMIN or an
// unprivileged user namespace, which many login nodes and containers disable) and a cgroup per
// attempt (needs a delegated cgroup v2 subtree, rarely given to batch users; SLURM owns the job's
// cgroup). A fence works for any unprivileged user on any Linux.
//
// How: before the program starts, the file `path` (in the trial directory, mode 0600) names a
// random token, this machine (its boot id and PID namespace) and, once started, the program's
// process group and its start time. The program and everything it starts inherit the token in
// their environment (kEnvironmentName). fence() reads the file and SIGKILLs every process of this
// user whose environment holds the token, and every process of the recorded process group (the
// group id is checked against the recorded start time of its leader, so a reused PID is never
// hit), and waits until none is left. A process that both clears its environment and leaves the
// process group escapes; so does one on another machine (a file from another boot id or PID
// namespace is left alone: that attempt's own node fences it).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>

#include "common/result.h"

namespace hpctune::launch {

// The fence's file in a trial's directory (shared by its attempts).
inline constexpr const char* kAttemptFenceFile = "attempt.fence";

class AttemptFence {
 public:
  static constexpr const char* kEnvironmentName = "HPCTUNE_ATTEMPT_FENCE";

  AttemptFence() = default;
  // Removes the file if it is still this attempt's (the attempt ended and its tree was killed).
  ~AttemptFence();
  AttemptFence(AttemptFence&& other) noexcept;
  AttemptFence& operator=(AttemptFence&& other) noexcept;
  AttemptFence(const AttemptFence&) = delete;
  AttemptFence& operator=(const AttemptFence&) = delete;

  // Fences the attempt recorded in `path` (fence() below, waiting up to `limit`), then records a
  // new one there with a fresh token. kBusy when a process of the old attempt outlived `limit`
  // (the new attempt must not start); kIo when the file cannot be written.
  static Result<AttemptFence> enter(const std::string& path, std::chrono::milliseconds limit);

  // For a program that serves several attempts, of several trials (the command trainer's persistent
  // programs), started once with its own token (new_token()) in its environment: fences what `path`
  // records unless it is this program (the same token), then records `token` and the group `pgid`.
  // release() (the attempt ended, the program lives on to serve another trial) removes the file, so
  // that a finished trial's fence never reaches the program later; a worker that dies mid-attempt
  // leaves it for the next attempt (or the master) to fence the program with.
  static Result<AttemptFence> enter_shared(const std::string& path, std::chrono::milliseconds limit,
                                           const std::string& token, pid_t pgid);
  // A fresh random token.
  static std::string new_token();

  // The token the program's environment must carry (kEnvironmentName=token()).
  const std::string& token() const noexcept { return token_; }
  // Records the program's process group (its leader `pgid`, with the leader's start time).
  Status started(pid_t pgid);
  // The attempt is over and its tree gone: the file is removed (if still this attempt's).
  void release() noexcept;
  // The attempt's supervisor died before it killed the program's tree: what is left is SIGKILLed
  // now (not waited for), and the file stays for the next attempt to fence.
  void abandon() noexcept;

 private:
  std::string path_;
  std::string token_;
};

// SIGKILLs every process of the attempt recorded in `path` (see the top of this file) and, with a
// non-zero `limit`, waits up to `limit` until none is left: kBusy naming the survivors otherwise.
// Ok when there is no file, or it is from another machine. Never blocks past `limit`.
Status fence_attempt(const std::string& path, std::chrono::milliseconds limit);

}  // namespace hpctune::launch
