#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <thread>
#include <utility>

#include "common/device_list.h"
#include "common/system.h"
#include "launch/child_process.h"
#include "launch/device_allocator.h"
#include "launch/launcher.h"
#include "protocol/messages.h"

namespace hpctune::launch {
namespace {

int machine_cores() {
  const unsigned n = std::thread::hardware_concurrency();
  return n > 0 ? static_cast<int>(n) : 1;
}

}  // namespace

Result<std::vector<std::string>> local_group_command(const LocalLauncherOptions& opt, int64_t group) {
  const GroupResources& r = opt.resources;
  if (r.ranks_data < 1 || r.ranks_model < 1) {
    return err(Errc::kConfig, "resources.ranks: data and model must be >= 1 (got " + std::to_string(r.ranks_data) +
                                  " x " + std::to_string(r.ranks_model) + ")");
  }
  const int64_t ranks = r.ranks_data * r.ranks_model;
  const int cores = opt.cores > 0 ? opt.cores : machine_cores();
  int64_t threads = r.threads;
  if (threads <= 0 && ranks > 1 && !r.trainer_starts_ranks) threads = std::max<int64_t>(1, cores / ranks);

  std::vector<std::string> argv;
  const bool mpi = ranks > 1 && !r.trainer_starts_ranks;
  if (mpi) {
    const std::string mpirun = mpirun_name(opt.mpirun);
    const std::string found = find_in_path(mpirun);
    if (found.empty()) {
      return err(Errc::kUnavailable, "resources.ranks asks for " + std::to_string(ranks) + " ranks per group, but '" +
                                         mpirun + "' was not found (multi-rank groups need Open MPI)");
    }
    argv = mpirun_command(found, ranks, {.shared_memory_btl = true, .oversubscribe = ranks > cores,
                                         .enable_recovery = r.rank_recovery});
  }
  for (auto& a : worker_command(opt, group, threads)) argv.push_back(std::move(a));
  return argv;
}

std::vector<std::string> worker_command(const LocalLauncherOptions& opt, int64_t group, int64_t threads) {
  const GroupResources& r = opt.resources;
  std::vector<std::string> argv = {opt.program, "worker", "--master", opt.master_endpoint, "--group", std::to_string(group)};
  if (threads > 0) {
    argv.push_back("--threads");
    argv.push_back(std::to_string(threads));
  }
  if (r.ranks_data * r.ranks_model > 1) {
    argv.insert(argv.end(), {"--ranks-data", std::to_string(r.ranks_data), "--ranks-model", std::to_string(r.ranks_model)});
    if (r.trainer_starts_ranks) argv.push_back("--trainer-starts-ranks");
  }
  for (const auto& a : opt.extra_args) argv.push_back(a);
  return argv;
}

namespace {
class LocalLauncher final : public Launcher {
 public:
  explicit LocalLauncher(LocalLauncherOptions options)
      : opt_(std::move(options)),
        gpus_(opt_.resources.gpus, opt_.resources.trials_per_gpu,
              opt_.resources.gpus_per_rank * opt_.resources.ranks_data * opt_.resources.ranks_model) {
    if (opt_.program.empty()) {
      auto self = self_program();
      opt_.program = self.ok() ? *self : "hpctune";  // else found in PATH
    }
  }
  ~LocalLauncher() override { stop_all(std::chrono::milliseconds(2000)); }

  std::string name() const override { return "local"; }
  std::string requeue_job() const override { return batch_job_to_requeue(opt_.slurm); }

  // With GPUs: the group starts once its devices are free (until then it is pending, and
  // poll_exits() starts it when an exit frees them); a group that could never get them is an error.
  Status start(int64_t group, const std::string& credential) override {
    if (gpus_.per_group() == 0) return spawn_group(group, credential, {});
    HPCTUNE_TRY(gpus_.satisfiable());
    waiting_.erase(group);
    auto devices = gpus_.acquire(group);
    if (!devices) {
      waiting_[group] = credential;
      return {};
    }
    Status started = spawn_group(group, credential, *devices);
    if (!started.ok()) gpus_.release(group);
    return started;
  }

  std::vector<int> devices(int64_t group) const override { return gpus_.held(group); }

  std::vector<GroupExit> poll_exits() override {
    std::vector<GroupExit> exits = std::exchange(killed_waiting_, {});
    for (auto it = children_.begin(); it != children_.end();) {
      if (auto status = it->second.poll()) {
        GroupExit e;
        e.group = it->first;
        e.how = status->describe();
        e.success = status->success();
        if (!opt_.log_dir.empty()) e.log_tail = tail_file(log_path(it->first), 20);
        exits.push_back(std::move(e));
        gpus_.release(it->first);
        it = children_.erase(it);
      } else {
        ++it;
      }
    }
    start_waiting(exits);
    return exits;
  }

  void kill(int64_t group) override {
    if (auto it = children_.find(group); it != children_.end()) it->second.signal(SIGKILL);
    // A group still waiting for GPUs never started: it ends here, and its exit comes with the next poll.
    if (waiting_.erase(group) > 0) {
      GroupExit e;
      e.group = group;
      e.how = "killed while waiting for GPUs";
      killed_waiting_.push_back(std::move(e));
    }
  }

  void stop_all(std::chrono::milliseconds grace) override {
    waiting_.clear();
    for (const auto& [group, child] : children_) gpus_.release(group);
    for (auto& [group, child] : children_) child.signal(SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + grace;
    for (auto& [group, child] : children_) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (!child.wait_for(std::max(left, std::chrono::milliseconds(0)))) child.terminate(std::chrono::milliseconds(0));
    }
    children_.clear();
  }

  // A local process starts at once: pending only while it waits for GPUs.
  GroupState state(int64_t group) const override {
    if (children_.count(group)) return GroupState::kStarting;
    return waiting_.count(group) ? GroupState::kPending : GroupState::kExited;
  }

 private:
  Status spawn_group(int64_t group, const std::string& credential, const std::vector<int>& devices) {
    SpawnOptions spawn;
    HPCTUNE_ASSIGN(spawn.argv, local_group_command(opt_, group));
    spawn.env = opt_.environment;
    // Open MPI's single-copy mechanism (CMA) needs ptrace rights that containers often deny.
    if (opt_.resources.ranks_data * opt_.resources.ranks_model > 1 && !opt_.resources.trainer_starts_ranks) {
      spawn.env["OMPI_MCA_btl_vader_single_copy_mechanism"] = "none";
      if (opt_.resources.rank_recovery) spawn.env[kGroupRecoveryEnv] = "1";
      // Library thread pools (OpenMP for oneDNN, OpenBLAS) sized for the whole machine in every rank
      // would oversubscribe the cores before the trainer sets its own thread count.
      const auto& argv = spawn.argv;
      for (size_t i = 0; i + 1 < argv.size(); ++i) {
        if (argv[i] == "--threads") spawn.env["OMP_NUM_THREADS"] = spawn.env["OPENBLAS_NUM_THREADS"] = argv[i + 1];
      }
    }
    // The group's GPUs: all of them for one rank (or a trainer that starts its ranks, whose rank
    // script gives each rank its slice), each worker rank narrows them to its own at start.
    if (!devices.empty()) {
      spawn.env[kGpusEnv] = spawn.env["CUDA_VISIBLE_DEVICES"] = format_device_list(devices);
      spawn.env[kGpusPerRankEnv] = std::to_string(opt_.resources.gpus_per_rank);
    }
    // In the environment, never on the command line, which every local user can read.
    if (!credential.empty()) spawn.env[protocol::kSecretEnv] = credential;
    if (!opt_.log_dir.empty()) {
      spawn.stdout_path = log_path(group);
      spawn.stderr_path = "=stdout";
    }
    HPCTUNE_ASSIGN(ChildProcess child, ChildProcess::spawn(spawn));
    children_[group] = std::move(child);
    return {};
  }

  // Starts the waiting groups whose devices are free now, in group order; one that cannot be
  // started is reported as an exit (the master restarts it or gives up, as for any exit).
  void start_waiting(std::vector<GroupExit>& exits) {
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      auto devices = gpus_.acquire(it->first);
      if (!devices) {
        ++it;
        continue;
      }
      if (Status s = spawn_group(it->first, it->second, *devices); !s.ok()) {
        gpus_.release(it->first);
        GroupExit e;
        e.group = it->first;
        e.how = "could not be started: " + s.error().message();
        exits.push_back(std::move(e));
      }
      it = waiting_.erase(it);
    }
  }

  std::string log_path(int64_t group) const { return opt_.log_dir + "/group-" + std::to_string(group) + ".log"; }

  LocalLauncherOptions opt_;
  std::map<int64_t, ChildProcess> children_;
  DeviceAllocator gpus_;
  std::map<int64_t, std::string> waiting_;  // groups waiting for GPUs -> their launch credential
  std::vector<GroupExit> killed_waiting_;   // reported by the next poll_exits()
};

}  // namespace

std::unique_ptr<Launcher> make_local_launcher(LocalLauncherOptions options) {
  return std::make_unique<LocalLauncher>(std::move(options));
}

}  // namespace hpctune::launch
