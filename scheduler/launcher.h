// Launcher: starts and stops trainer groups for a campaign. One implementation per backend.
//
//  - LocalLauncher (the embedded default): each group is a child process of the master,
//    `hpctune worker --master ENDPOINT --group G`, in its own process group, dying with the master.
//  - Later backends (mpirun across hosts, SLURM job steps) implement the same interface, so the
//    master loop does not change: it starts groups, polls for exits, restarts within a bound, and
//    stops them all on every exit path.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"

namespace hpctune::scheduler {

struct GroupExit {
  int64_t group = -1;
  std::string how;       // "exit code 3", "killed by signal 9 (Killed)"
  bool success = false;  // exit code 0
  std::string log_tail;  // the last lines of the group's log
};

struct GroupResources {
  int64_t ranks_data = 1;
  int64_t ranks_model = 1;
  int64_t threads = 0;  // per rank; 0 = leave it to the worker
};

class Launcher {
 public:
  virtual ~Launcher() = default;
  virtual std::string name() const = 0;
  // Starts group `group` (again, after an exit). Errors: the program cannot be started.
  virtual Status start(int64_t group) = 0;
  // Groups whose process ended since the last call. Never blocks.
  virtual std::vector<GroupExit> poll_exits() = 0;
  // Stops every group: SIGTERM, up to `grace` to exit, then SIGKILL; reaps them all.
  virtual void stop_all(std::chrono::milliseconds grace) = 0;
  // Process ids of the running groups (for tests and `status`).
  virtual std::vector<int64_t> pids() const = 0;
};

struct LocalLauncherOptions {
  std::string program;            // the hpctune binary (default: /proc/self/exe)
  std::string master_endpoint;    // what workers connect to
  std::string log_dir;            // one log file per group: group-<g>.log
  GroupResources resources;
  std::vector<std::string> extra_args;  // appended to the worker's command line
};

std::unique_ptr<Launcher> make_local_launcher(LocalLauncherOptions options);

}  // namespace hpctune::scheduler
