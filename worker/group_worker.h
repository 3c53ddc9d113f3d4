// The ranks of a multi-rank trainer group inside `hpctune worker` (started by mpirun, one process
// per rank; MPI initialised by the caller).
//
//   Rank 0, the leader, runs the ordinary worker loop (run_worker, worker.h) against the master.
//     Its trainers are wrapped: before a trial runs, the wrapper broadcasts the TrialContext (trial
//     id, attempt, seed, params, trainer settings, trial_dir, threads) to the other ranks, builds
//     the trial's MpiTrainerGroup (with the trial's `allreduce` setting, default hierarchical) and runs the
//     trainer with ctx.group set. When the loop ends it broadcasts a shutdown message.
//   Every other rank (a follower) waits for that broadcast (polled; it gives up after
//     follower_idle_limit or when `terminate` is set), builds the same group and runs the same
//     trainer, with report() a no-op. On every rank ctx.stop_requested() is a collective returning
//     the leader's flag (TrainerGroup::broadcast_flag).
//
// Teardown (collectives.h, "Deadlines and hung peers"): a rank whose group call fails, or whose
// group call has been running for longer than collective_limit (a watchdog thread on every rank
// checks collective_started()), logs the reason and _exits with kGroupBrokenExitCode. mpirun then
// kills every rank, the launcher reports the group's exit, and the master requeues the trial.
// A broken group never reports a trial as failed: the failure is the group's, not the trial's.
//
// Under mpirun --enable-recovery (HPCTUNE_GROUP_RECOVERY=1, launch/launcher.h rank_recovery: the
// campaign can run downpour or ssp trials, which survive a rank's death) mpirun ends nothing by
// itself, so a rank that ends the group SIGTERMs mpirun, its parent, which ends the others. A
// trial that finished without one of its ranks (TrialResult::group_degraded) is sent to the
// master (done.group_ends: it assigns the group nothing more); then the leader ends the group the
// same way, and the launcher starts it again.
//
// Trainers that start their own ranks (`command`): run_single_process_worker() runs one process
// whose trials see ctx.ranks = ranks_data * ranks_model and no group.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "common/result.h"
#include "protocol/transport.h"
#include "worker/worker.h"

namespace hpctune::worker {

inline constexpr int kGroupBrokenExitCode = 3;

struct GroupWorkerOptions {
  int ranks_data = 1;
  int ranks_model = 1;
  // The base worker options (group, threads, terminate, log, make): the leader's loop uses them
  // with `make` wrapped; followers use threads, terminate, log and make.
  WorkerOptions worker;
  // Per group call (polled deadline) and the watchdog's limit on one call (a little longer, for
  // the calls that cannot poll: MPI_Allreduce with `allreduce: mpi`, communicator creation).
  std::chrono::milliseconds collective_limit = std::chrono::minutes(5);
  std::chrono::milliseconds follower_idle_limit = std::chrono::hours(24);
  // Connects the leader to the master (the worker's transport).
  std::function<Result<std::unique_ptr<protocol::ClientTransport>>()> connect;
};

#ifdef HPCTUNE_HAVE_MPI
// Runs this rank of the group until the leader's loop ends (leader: its status; followers: Ok on
// the shutdown message). kInvalidArgument when the MPI job's size is not ranks_data * ranks_model.
Status run_group_rank(const GroupWorkerOptions& options);
#endif

// One worker process for a trainer that starts its own ranks: trials get ctx.ranks = data * model.
Status run_single_process_worker(const GroupWorkerOptions& options);

}  // namespace hpctune::worker
