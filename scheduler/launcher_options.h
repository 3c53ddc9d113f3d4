// The launcher's options from a campaign's config: launch/ may not read config/ (tools/layers.txt),
// so resources.* is turned into launch::LocalLauncherOptions here, for every backend at once (the
// group's ranks, threads and GPUs; backend slurm's step options, its time-limit margin and
// requeue). What only the driver knows (the program, the master's endpoint, the log directory, the
// workers' environment) it adds itself (run_master).
#pragma once

#include <functional>
#include <string>

#include "common/result.h"
#include "config/config.h"
#include "launch/launcher.h"

namespace hpctune::scheduler {

// resources.gpus: auto is resolved here (nvidia-smi, with a deadline) for the local backend, which
// assigns the devices itself, and said through `log`. A group that could never get its GPUs is a
// kConfig error now, before any group waits for them.
Result<launch::LocalLauncherOptions> launcher_options(const config::CampaignConfig& cfg,
                                                      const std::function<void(const std::string&)>& log);

// resources.mps: the MPS control program (a path) to start before the groups (launch/mps_daemon.h),
// "" for none. `placed` is launcher_options()'s resources (the GPUs resolved). auto: when the local
// backend's groups share a GPU (trials_per_gpu > 1 and GPUs given to the groups), and the program is
// in PATH (else a warning through `log`, and none); on: always with the local backend, kUnavailable
// when the program is missing; off: never. Why it starts (or not) is said through `log`.
Result<std::string> mps_control(const config::Resources& r, const launch::GroupResources& placed,
                                const std::function<void(const std::string&)>& log);

// Whether any trial of the campaign (of any stage) can go on when a rank of its group dies
// (config::trainer_survives_rank_loss: sync downpour or ssp, fixed or searched): its MPI groups
// then run under mpirun --enable-recovery (GroupResources::rank_recovery).
bool campaign_survives_rank_loss(const config::CampaignConfig& cfg);

}  // namespace hpctune::scheduler
