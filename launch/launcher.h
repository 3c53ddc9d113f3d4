// Launcher: starts and stops trainer groups for a campaign. One implementation per backend.
//
//  - LocalLauncher (the embedded default): each group is a child process of the master,
//    `hpctune worker --master ENDPOINT --group G`, in its own process group, dying with the master.
//    A group of R = data x model > 1 ranks is `mpirun -np R [--oversubscribe when R > cores]
//    --bind-to none --mca btl self,vader [--allow-run-as-root as root] hpctune worker ...
//    --ranks-data D --ranks-model M` (shared memory only, Open MPI's CMA single copy off: the
//    container-safe flags of tests/mpirun-test). mpirun is in the group's process group, and so are
//    its ranks; each rank also dies with mpirun (PR_SET_PDEATHSIG, cli/main.cpp), so a SIGKILLed
//    master leaves no rank behind. A trainer that starts its own ranks (`command`) gets one worker
//    process that passes R on to it (ctx.ranks).
//  - SlurmLauncher (launch/slurm_launcher.h): each group is a job step of the allocation the master
//    runs in. Backends register in the registry (registry.cpp, names in backends.h) under the name
//    `resources.backend` selects. The master knows groups only
//    through it: start, state, exits, kill, stop; it writes the backend's name() to the groups table.
//
// Group states (GroupState): a group the master asked for is kPending until the backend has started
// it (a SLURM job step waits for its allocation; a local process starts at once, unless it waits
// for free GPUs: resources.gpus_per_rank, launch/device_allocator.h), then kStarting;
// the master (not the launcher) calls it kRunning once the group said hello, and kExited once
// poll_exits() reported its end. Each group's start-up deadline (resources.startup_timeout) counts
// from the moment it leaves kPending.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"

namespace hpctune::launch {

struct GroupExit {
  int64_t group = -1;
  std::string how;       // "exit code 3", "killed by signal 9 (Killed)"
  bool success = false;  // exit code 0
  std::string log_tail;  // the last lines of the group's log
};

struct GroupResources {
  int64_t ranks_data = 1;
  int64_t ranks_model = 1;
  // Compute threads per rank. 0: for a multi-rank group max(1, cores / ranks), so that threads x
  // ranks stays within the cores; for one rank, left to the worker.
  int64_t threads = 0;
  // The trainer starts its own ranks (the `command` trainer runs its program under mpirun): one
  // worker process, no mpirun around it.
  bool trainer_starts_ranks = false;
  // mpirun --enable-recovery for a multi-rank group (and kGroupRecoveryEnv for its ranks): a rank
  // that dies leaves the others running, so that a trial whose data replicas survive the loss of
  // one (trainer.sync: downpour, ssp) finishes on the rest. Set by the master when the campaign can
  // run such a trial (config::trainer_survives_rank_loss); otherwise a dead rank ends the job.
  bool rank_recovery = false;
  // GPUs (launch/device_allocator.h). Each rank gets gpus_per_rank of the node's `gpus` (resolved:
  // resources.gpus: auto is detect_gpus()'s list), a device at most trials_per_gpu groups at once;
  // 0: no GPUs, as before.
  int64_t gpus_per_rank = 0;
  std::vector<int> gpus;
  int64_t trials_per_gpu = 1;
  // Packed groups (resources.pack, trainers/packed_engine.h; the local backend): pack_slots > 1
  // starts groups [p k, p k + k) (k = pack_slots, the last pack cut at `groups`) as ONE worker
  // process with a slot per group (`--slots`, the groups' credentials in protocol::kSecretEnv, a
  // comma between them). Each slot is its group to the master; the pack's process starts once every
  // group of it has been started (they always exit together: one process), holds its GPUs alone,
  // and its exit, or a kill of any of its groups, is every one of its groups' exit.
  int64_t pack_slots = 0;
  int64_t groups = 0;
};

enum class GroupState { kPending, kStarting, kRunning, kExited };
const char* to_string(GroupState state) noexcept;

class Launcher {
 public:
  virtual ~Launcher() = default;
  virtual std::string name() const = 0;
  // Starts group `group` (again, after an exit), handing it `credential` (protocol::kSecretEnv) in
  // its environment only. Errors: the program cannot be started; kConfig when its GPUs could never
  // be had (more than the node has). A group waiting for its GPUs is kPending, not an error.
  virtual Status start(int64_t group, const std::string& credential) = 0;
  // The backend's view of `group`: kPending (asked for, not started yet), kStarting (started, alive)
  // or kExited (ended, or never started). Never kRunning: only the master knows a group said hello.
  virtual GroupState state(int64_t group) const = 0;
  // Groups whose process ended since the last call. Never blocks.
  virtual std::vector<GroupExit> poll_exits() = 0;
  // SIGKILLs group `group` at once: the master declared it lost (silent past the heartbeat
  // timeout), and a stopped or hung group must not run on beside the retry of its trial. Its exit
  // then comes from poll_exits() (and a restart from the master). Unknown groups: nothing.
  virtual void kill(int64_t group) = 0;
  // Stops every group: SIGTERM, up to `grace` to exit, then SIGKILL; reaps them all.
  virtual void stop_all(std::chrono::milliseconds grace) = 0;
  // The GPUs `group` was given (the ids its CUDA_VISIBLE_DEVICES names, all ranks), for the store;
  // empty when none, or when the backend does not assign them itself.
  virtual std::vector<int> devices(int64_t /*group*/) const { return {}; }
  // The groups that run in one process with `group`, itself included, ascending: they exit
  // together (a pack's slots, GroupResources::pack_slots). {group} where each group is its own.
  virtual std::vector<int64_t> process_groups(int64_t group) const { return {group}; }
  // The allocation the groups run in, for backends that have one (slurm: the job's time limit).
  // Why the master must stop dispatching now, its allocation ending soon (slurm: its time limit is
  // less than resources.slurm.signal_before away; SLURM is asked at most once a minute, since a
  // limit may be changed), as on the warning signal, in case that signal never comes; "" while
  // there is time, or when the backend has no limit. The driver asks every turn; never blocks long.
  virtual std::string allocation_ending() { return ""; }
  // The job to requeue once a pre-empted campaign has stopped: with resources.slurm.requeue, the
  // SLURM batch job the master runs in ($SLURM_JOB_ID; a local-backend campaign of `hpctune slurm
  // submit` too); "" = none (the default: a backend outside SLURM, a simulated one).
  virtual std::string requeue_job() const { return ""; }
};


// backend slurm: how a group's job step is shaped (config's resources.slurm, copied here because
// launch/ may not include config/; launch/slurm_launcher.h uses it).
struct SlurmStepOptions {
  std::string job_id;               // the allocation; "" = $SLURM_JOB_ID
  int64_t ranks_per_node = 1;       // nodes per step = ceil(ranks / ranks_per_node)
  std::string launch = "srun";      // srun: srun starts the ranks; mpirun: one process runs mpirun in the step
  std::string mpi;                  // srun --mpi= ("" the site's default)
  std::string gres;                 // srun --gres=
  int64_t gpus_per_task = 0;        // srun --gpus-per-task= (0 = none): resources.slurm.gpus_per_task
  int64_t gpus_per_rank = 0;        // resources.gpus_per_rank (0 = none); both given, they are equal (validate)
  int64_t cpus_per_task = 0;        // srun --cpus-per-task= (0 = SLURM's default)
  std::vector<std::string> setup;   // shell lines run before each step's program
  double signal_before_s = 120;     // the master stops this long before the job's time limit (allocation_ending)
  bool requeue = true;              // a pre-empted campaign's job is requeued (requeue_job)
  // The groups' component of a heterogeneous job (`hpctune slurm submit` with a master node of
  // another type: component 0 is the master's node, 1 the groups'): srun --het-group=. -1: none
  // given, then 1 inside a heterogeneous job (SLURM_HET_SIZE set), else none.
  int64_t het_group = -1;
  std::string srun = "srun";        // the programs (tests put fakes here); found in PATH
  std::string scontrol = "scontrol";
  std::string scancel = "scancel";
  std::string squeue = "squeue";
};

// requeue_job() of every backend: `options.requeue` and the master inside a SLURM job.
std::string batch_job_to_requeue(const SlurmStepOptions& options);

struct LocalLauncherOptions {
  std::string program;            // the hpctune binary (default: /proc/self/exe)
  std::string master_endpoint;    // what workers connect to
  std::string log_dir;            // one log file per group: group-<g>.log
  GroupResources resources;
  std::vector<std::string> extra_args;  // appended to the worker's command line
  // Added to every group's environment, never its command line (which every local user can read):
  // what the workers need to reach a CURVE master (protocol/curve_keys.h's key variables). The launch
  // credential travels on its own, per launch (start()).
  std::map<std::string, std::string> environment;
  std::string mpirun;             // multi-rank groups; "" = $HPCTUNE_MPIRUN, else `mpirun` in PATH
  int cores = 0;                  // for the defaults above; 0 = this machine's
  SlurmStepOptions slurm;         // backend slurm only
};

std::unique_ptr<Launcher> make_local_launcher(LocalLauncherOptions options);

// The registry: the launcher of `backend` (resources.backend; the names are backends.h's list),
// built with `options` (what every backend needs: the program, the master's endpoint, logs, the
// group's resources). kConfig naming the known backends for any other name.
Result<std::unique_ptr<Launcher>> make_launcher(const std::string& backend, LocalLauncherOptions options);
std::vector<std::string> launcher_names();
// What `backend` needs before a campaign creates anything: slurm an allocation to run in
// (slurm_allocation's kConfig naming `hpctune slurm submit` and salloc); local nothing.
Status check_backend(const std::string& backend);
// The master's address for `backend` when the config keeps the default `bind` (a private socket):
// slurm the batch host's own (slurm_default_bind), the compute nodes must reach it; else `bind`.
std::string backend_default_bind(const std::string& backend, const std::string& bind);

// The command line the local launcher runs for group `group` (argv[0] is the program). For tests
// and `ps`. kConfig for a bad layout (ranks < 1); kUnavailable when a multi-rank group needs
// mpirun and none is found.
Result<std::vector<std::string>> local_group_command(const LocalLauncherOptions& options, int64_t group);
// The worker's own part of it (what follows mpirun, or the whole command for one rank): every
// backend runs this, with `threads` compute threads per rank (0 = left to the worker).
std::vector<std::string> worker_command(const LocalLauncherOptions& options, int64_t group, int64_t threads);

}  // namespace hpctune::launch
