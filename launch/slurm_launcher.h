// The SLURM backend (resources.backend: slurm): trainer groups as job steps of the allocation the
// master runs in (`hpctune slurm submit`'s batch job, or `hpctune run` inside salloc).
//
// Group g is one job step, started as a child process of the master on the batch host:
//     srun --jobid=J --job-name=hpctune-g<g> --nodes=k --ntasks=R --ntasks-per-node=P --exclusive
//          --kill-on-bad-exit=1 [--mpi=..] [--gres=..] [--gpus-per-task=G --gpu-bind=..] [--cpus-per-task=..]
//          [--exclude=<failed nodes>] bash -c '<marker; setup lines; exec "$@">' hpctune-step <program>
// with R = ranks data x model, P = resources.slurm.ranks_per_node and k = ceil(R / P). srun's exit
// is the step's end; its output (the ranks' output, forwarded by SLURM) goes to the group's log.
//  - launch srun: srun starts the R worker ranks (MPI through srun's --mpi plugin).
//  - launch mpirun (sites whose srun cannot start their MPI: Debian's Open MPI): the step has the
//    same R tasks, so SLURM reserves the same cores, but only task 0 runs a program: the rank launch
//    command the local backend shares (child_process.h mpirun_command) over the step's nodes. Open
//    MPI reads the allocation from SLURM_NODELIST / SLURM_TASKS_PER_NODE, which task 0 points at the
//    step's own nodes, and starts its daemons with a nested `srun --overlap` (they share the step's
//    cores); the other tasks exit at once, the step keeps their nodes until task 0 ends.
// Task 0 first prints a marker line, "hpctune: step J.S on NODELIST": until the launcher reads it in
// the group's log the group is kPending (the step waits for nodes: the start-up deadline has not
// begun); then kStarting. The marker names the step (for kill: scancel J.S) and its nodes.
//
// Node failures: when a step ends without success, a node is failed when srun said so in the
// step's output ("srun: error: Node failure on n2") or when `scontrol -o show node` gives it as
// DOWN, DRAINED/DRAINING, FAILED or NOT_RESPONDING at that moment (a node that failed may be back
// by then: ReturnToService); it is excluded from every later step (--exclude) and named in the
// exit. (A batch job of `hpctune slurm submit` should have --no-kill, so that SLURM drops a failed
// node from the allocation instead of ending the job.) A step cancelled with scancel
// leaves its nodes allocated and usable: they are not excluded. (The master queues the lost
// group's trial again and restarts the group: a new step.)
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/result.h"
#include "launch/launcher.h"

namespace hpctune::launch {

// The srun command line of group `group`'s step, nodes in `exclude` left out. kConfig for a bad
// layout; kUnavailable when launch mpirun finds no mpirun. The environment the step needs beside
// the master's (its OMPI_ and thread variables) comes from slurm_step_environment().
Result<std::vector<std::string>> slurm_step_command(const LocalLauncherOptions& options, int64_t group,
                                                    const std::set<std::string>& exclude);
std::map<std::string, std::string> slurm_step_environment(const LocalLauncherOptions& options);

// The GPUs of each rank (resources.gpus_per_rank, else resources.slurm.gpus_per_task; 0 = none).
int64_t slurm_gpus_per_rank(const SlurmStepOptions& options);
// The step's GPU options, empty without GPUs: --gpus-per-task=G and --gpu-bind. Where every task
// runs a rank (launch srun), per_task:G: task i of a node gets that node's GPUs i*G .. i*G+G-1 of
// the step in CUDA_VISIBLE_DEVICES, whatever the site's CPU binding (closest and single:N follow
// the tasks' socket affinity, which needs task/affinity and gres.conf Cores; per_task is exact,
// and is also what --gpus-per-task implies since SLURM 21.08, said here so that a site default
// cannot change it). Where one task starts the ranks (launch mpirun, a trainer that runs its own
// ranks), none: that task sees every GPU of the step on its node, and its ranks choose theirs by
// their local rank.
std::vector<std::string> slurm_gpu_options(const LocalLauncherOptions& options);

// The allocation the launcher runs in: options.slurm.job_id, else $SLURM_JOB_ID; kConfig naming
// `hpctune slurm submit` and salloc when there is none.
Result<std::string> slurm_allocation(const SlurmStepOptions& options);

// The default bind address of a master on the batch host: tcp://ADDRESS:* where ADDRESS is the
// first non-loopback IPv4 address this host's name resolves to (the compute nodes reach the batch
// host by its name), else the first one (a one-machine cluster: 127.0.0.1).
std::string slurm_default_bind();

// `scontrol requeue JOB`: the job goes back to the queue (SLURM ends this batch job, the master
// included: call it last, with everything recorded and the store closed).
Status slurm_requeue(const std::string& job_id, const std::string& scontrol = "scontrol");

// Seconds left to the job (`squeue -h -j JOB -o %L`): nullopt when unlimited or unknown.
std::optional<double> slurm_time_left(const std::string& job_id, const std::string& squeue = "squeue");
// squeue's %L text ([days-][hours:]minutes:seconds, UNLIMITED, NOT_SET ...) in seconds.
std::optional<double> parse_slurm_duration(const std::string& text);

// Nodes of `scontrol -o show node` output that are down, drained or draining, failed or not
// responding.
std::set<std::string> failed_nodes(const std::string& scontrol_output);

Result<std::unique_ptr<Launcher>> make_slurm_launcher(LocalLauncherOptions options);

}  // namespace hpctune::launch
