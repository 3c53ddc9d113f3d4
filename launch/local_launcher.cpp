#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <thread>
#include <utility>

#include "common/device_list.h"
#include "common/safe_open.h"
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
  if (r.pack_slots > 1) {  // a packed group: slots for groups [group, group + slots)
    const int64_t slots = r.groups > 0 ? std::min(r.pack_slots, r.groups - group) : r.pack_slots;
    argv.insert(argv.end(), {"--slots", std::to_string(std::max<int64_t>(1, slots))});
  }
  if (r.ranks_data * r.ranks_model > 1) {
    argv.insert(argv.end(), {"--ranks-data", std::to_string(r.ranks_data), "--ranks-model", std::to_string(r.ranks_model)});
    if (r.trainer_starts_ranks) argv.push_back("--trainer-starts-ranks");
  }
  for (const auto& a : opt.extra_args) argv.push_back(a);
  return argv;
}

namespace {
// Groups are started in packs (launcher.h, GroupResources::pack_slots): a pack of one group
// without packing. Everything below is keyed by the pack's first group (its leader).
class LocalLauncher final : public Launcher {
 public:
  explicit LocalLauncher(LocalLauncherOptions options)
      : opt_(std::move(options)),
        gpus_(opt_.resources.gpus, slots() > 1 ? 1 : opt_.resources.trials_per_gpu,
              opt_.resources.gpus_per_rank * opt_.resources.ranks_data * opt_.resources.ranks_model) {
    if (opt_.program.empty()) {
      auto self = self_program();
      opt_.program = self.ok() ? *self : "hpctune";  // else found in PATH
    }
  }
  ~LocalLauncher() override { stop_all(std::chrono::milliseconds(2000)); }

  std::string name() const override { return "local"; }
  std::string requeue_job() const override { return batch_job_to_requeue(opt_.slurm); }

  // The pack starts once each of its groups was started and its devices are free (until then its
  // groups are pending, and poll_exits() starts it when an exit frees them); a group that could
  // never get them is an error.
  Status start(int64_t group, const std::string& credential) override {
    const int64_t lead = leader(group);
    credentials_[lead][group] = credential;
    if (children_.count(lead) > 0 || !complete(lead)) return {};
    if (gpus_.per_group() > 0) {
      if (Status can = gpus_.satisfiable(); !can.ok()) {
        credentials_.erase(lead);
        return can;
      }
    }
    auto devices = gpus_.acquire(lead);  // the empty list without GPUs
    if (!devices) return {};
    Status started = spawn_pack(lead, *devices);
    if (!started.ok()) {
      gpus_.release(lead);
      credentials_.erase(lead);
    }
    return started;
  }

  std::vector<int> devices(int64_t group) const override { return gpus_.held(leader(group)); }
  std::vector<int64_t> process_groups(int64_t group) const override {
    std::vector<int64_t> groups;
    for (int64_t g = leader(group); g < pack_end(leader(group)); ++g) groups.push_back(g);
    return groups;
  }

  std::vector<GroupExit> poll_exits() override {
    std::vector<GroupExit> exits = std::exchange(killed_waiting_, {});
    for (auto it = children_.begin(); it != children_.end();) {
      if (auto status = it->second.poll()) {
        const std::string tail = opt_.log_dir.empty() ? "" : tail_file(log_path(it->first), 20);
        for (int64_t g = it->first; g < pack_end(it->first); ++g) {
          GroupExit e;
          e.group = g;
          e.how = status->describe();
          e.success = status->success();
          e.log_tail = tail;
          exits.push_back(std::move(e));
        }
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
    const int64_t lead = leader(group);
    if (auto it = children_.find(lead); it != children_.end()) {
      it->second.signal(SIGKILL);
      return;
    }
    // A pack still waiting for GPUs (or for its other groups) never started: its groups end here,
    // and their exits come with the next poll.
    auto waiting = credentials_.find(lead);
    if (waiting == credentials_.end()) return;
    for (const auto& [g, credential] : waiting->second) {
      GroupExit e;
      e.group = g;
      e.how = "killed while waiting for GPUs";
      killed_waiting_.push_back(std::move(e));
    }
    credentials_.erase(waiting);
  }

  void stop_all(std::chrono::milliseconds grace) override {
    credentials_.clear();
    for (const auto& [lead, child] : children_) gpus_.release(lead);
    for (auto& [lead, child] : children_) child.signal(SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + grace;
    for (auto& [lead, child] : children_) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (!child.wait_for(std::max(left, std::chrono::milliseconds(0)))) child.terminate(std::chrono::milliseconds(0));
    }
    children_.clear();
  }

  // A local process starts at once: pending only while it waits for GPUs (or its pack's other groups).
  GroupState state(int64_t group) const override {
    const int64_t lead = leader(group);
    auto waiting = credentials_.find(lead);
    if (waiting != credentials_.end() && waiting->second.count(group) > 0) return GroupState::kPending;
    return children_.count(lead) > 0 ? GroupState::kStarting : GroupState::kExited;
  }

 private:
  int64_t slots() const { return std::max<int64_t>(1, opt_.resources.pack_slots); }
  int64_t leader(int64_t group) const { return group - group % slots(); }
  int64_t pack_end(int64_t lead) const {
    if (slots() == 1) return lead + 1;
    return opt_.resources.groups > 0 ? std::min(lead + slots(), opt_.resources.groups) : lead + slots();
  }
  bool complete(int64_t lead) const {
    auto it = credentials_.find(lead);
    return it != credentials_.end() && static_cast<int64_t>(it->second.size()) >= pack_end(lead) - lead;
  }

  // Starts the pack of `lead` with the credentials its groups were started with.
  Status spawn_pack(int64_t lead, const std::vector<int>& devices) {
    SpawnOptions spawn;
    HPCTUNE_ASSIGN(spawn.argv, local_group_command(opt_, lead));
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
    // In the environment, never on the command line, which every local user can read; a pack's
    // in the order of its groups (its slots), a comma between them.
    std::string credentials;
    bool any = false;
    for (const auto& [g, credential] : credentials_[lead]) {
      credentials += (g == lead ? "" : ",") + credential;
      any = any || !credential.empty();
    }
    if (any) spawn.env[protocol::kSecretEnv] = credentials;
    if (!opt_.log_dir.empty()) {
      spawn.stdout_path = log_path(lead);
      spawn.stderr_path = "=stdout";
      // A link or a FIFO planted at the log's name (a campaign unpacked from someone else's
      // archive) is refused: before, the link's target was appended to, and a FIFO hung the master.
      if (auto log = open_own_for_writing(spawn.stdout_path, /*truncate=*/false); !log.ok())
        return std::move(log).error().with_context("the log of group " + std::to_string(lead));
    }
    HPCTUNE_ASSIGN(ChildProcess child, ChildProcess::spawn(spawn));
    children_[lead] = std::move(child);
    credentials_.erase(lead);
    return {};
  }

  // Starts the waiting packs whose devices are free now, in group order; one that cannot be
  // started is reported as its groups' exit (the master restarts them or gives up, as for any exit).
  void start_waiting(std::vector<GroupExit>& exits) {
    std::vector<int64_t> ready;
    for (const auto& [lead, credentials] : credentials_)
      if (children_.count(lead) == 0 && complete(lead)) ready.push_back(lead);
    for (int64_t lead : ready) {
      auto devices = gpus_.acquire(lead);
      if (!devices) continue;
      std::vector<int64_t> groups;
      for (const auto& [g, credential] : credentials_[lead]) groups.push_back(g);
      if (Status s = spawn_pack(lead, *devices); !s.ok()) {
        gpus_.release(lead);
        credentials_.erase(lead);
        for (int64_t g : groups) {
          GroupExit e;
          e.group = g;
          e.how = "could not be started: " + s.error().message();
          exits.push_back(std::move(e));
        }
      }
    }
  }

  std::string log_path(int64_t lead) const { return opt_.log_dir + "/group-" + std::to_string(lead) + ".log"; }

  LocalLauncherOptions opt_;
  std::map<int64_t, ChildProcess> children_;  // pack leader -> its process
  DeviceAllocator gpus_;                      // held by pack leaders
  // Pack leader -> (group -> the credential it was started with), until the pack's process starts.
  std::map<int64_t, std::map<int64_t, std::string>> credentials_;
  std::vector<GroupExit> killed_waiting_;  // reported by the next poll_exits()
};

}  // namespace

std::unique_ptr<Launcher> make_local_launcher(LocalLauncherOptions options) {
  return std::make_unique<LocalLauncher>(std::move(options));
}

}  // namespace hpctune::launch
