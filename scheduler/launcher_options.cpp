#include "scheduler/launcher_options.h"

#include "common/device_list.h"
#include "common/system.h"
#include "config/trainer_kinds.h"
#include "launch/device_allocator.h"
#include "launch/mps_daemon.h"

namespace hpctune::scheduler {
namespace {

// resources.gpus_per_rank, gpus, trials_per_gpu into the launcher's options.
Status place_gpus(const config::Resources& r, launch::GroupResources& out,
                  const std::function<void(const std::string&)>& log) {
  out.gpus_per_rank = r.gpus_per_rank;
  out.trials_per_gpu = r.trials_per_gpu;
  if (r.gpus_per_rank == 0 || r.backend != "local") return {};
  std::string found = "resources.gpus lists " + std::to_string(r.gpus ? r.gpus->size() : 0);
  if (r.gpus) {
    out.gpus = *r.gpus;
  } else {
    std::string why;
    out.gpus = launch::detect_gpus(std::chrono::seconds(10), &why);
    found = "resources.gpus: auto found " + (out.gpus.empty() ? "none (" + why + ")"
                                                               : std::to_string(out.gpus.size()) + " GPU(s): " +
                                                                     format_device_list(out.gpus));
    log(found);
  }
  const int64_t per_group = r.gpus_per_rank * r.ranks_data * r.ranks_model;
  launch::DeviceAllocator devices(out.gpus, r.trials_per_gpu, per_group);
  if (!devices.satisfiable().ok()) {
    return err(Errc::kConfig, "resources.gpus_per_rank: " + std::to_string(r.gpus_per_rank) + " GPU(s) per rank x " +
                                  std::to_string(r.ranks_data * r.ranks_model) + " rank(s) = " + std::to_string(per_group) +
                                  " GPUs per group, more than this node has (" + found + ")");
  }
  if (out.pack_slots > 1) return {};  // a pack (k groups) holds its GPUs alone: the packs wait for them in turn
  // How many groups hold their GPUs at once: the others wait until one of them ends.
  int64_t at_once = 0;
  while (at_once < r.groups && devices.acquire(at_once)) ++at_once;
  if (at_once < r.groups) {
    log("resources.groups: " + std::to_string(r.groups) + " groups, of which " + std::to_string(at_once) +
        " hold GPUs at once (" + std::to_string(out.gpus.size()) + " GPUs x trials_per_gpu " +
        std::to_string(r.trials_per_gpu) + ", " + std::to_string(per_group) + " per group); the others wait for one to end");
  }
  return {};
}

// resources.pack: auto: packed groups of trials_per_gpu slots (launch/launcher.h, pack_slots) when
// the campaign's trainer can pack and trains on one GPU per one-rank group on the local backend;
// 0 (a process per group) otherwise, saying why when trials_per_gpu asked for sharing.
int64_t pack_slots_of(const config::CampaignConfig& cfg, const std::function<void(const std::string&)>& log) {
  const config::Resources& r = cfg.resources;
  if (r.pack == "off" || r.trials_per_gpu < 2) return 0;
  // The kind says whether its trials can pack (TrainerCapabilities::packs); a trial whose own
  // settings do not fit the packed model trains alone in its slot, its log saying why.
  std::string why = config::trainer_packs(cfg.trainer.value("kind", std::string()), cfg.trainer);
  if (why.empty() && r.gpus_per_rank == 0) why = "resources.gpus_per_rank is 0";
  if (why.empty() && r.ranks_data * r.ranks_model > 1) why = "a group has several ranks";
  if (why.empty() && r.backend != "local") why = "backend " + r.backend + " (packed groups are the local backend's)";
  if (!why.empty()) {
    log("resources.pack: auto: groups are not packed (" + why + "); trials_per_gpu " + std::to_string(r.trials_per_gpu) +
        " groups share a GPU as separate processes");
    return 0;
  }
  log("resources.pack: auto: groups run " + std::to_string(r.trials_per_gpu) +
      " to a worker process holding its GPU; their trials train each epoch as one fused model where they fit it "
      "(each trial's log says whether, or why not)");
  return r.trials_per_gpu;
}

launch::SlurmStepOptions slurm_step_options(const config::SlurmOptions& so) {
  launch::SlurmStepOptions out;
  out.ranks_per_node = so.ranks_per_node;
  out.launch = so.launch;
  out.mpi = so.mpi;
  out.gres = so.gres;
  out.gpus_per_task = so.gpus_per_task;
  out.gpus_per_rank = so.gpus_per_rank;
  out.cpus_per_task = so.cpus_per_task;
  out.setup = so.setup;
  out.signal_before_s = so.signal_before_s;
  out.requeue = so.requeue;
  return out;
}

}  // namespace

bool campaign_survives_rank_loss(const config::CampaignConfig& cfg) {
  auto one = [](const config::CampaignConfig& c) {
    return config::trainer_survives_rank_loss(c.trainer.value("kind", std::string()), c.trainer, c.space);
  };
  if (one(cfg)) return true;
  for (const auto& stage : cfg.stages)
    if (stage.own && one(*stage.own)) return true;
  return false;
}

Result<std::string> mps_control(const config::Resources& r, const launch::GroupResources& placed,
                                const std::function<void(const std::string&)>& log) {
  if (r.mps == "off" || r.backend != "local") return std::string();
  const bool shared = placed.gpus_per_rank > 0 && !placed.gpus.empty() && placed.trials_per_gpu > 1;
  if (r.mps == "auto" && !shared) return std::string();
  if (r.mps == "auto" && placed.pack_slots > 1) {  // one process per GPU: nothing for MPS to share
    log("resources.mps: auto: no MPS daemon: packed groups (resources.pack) run one process per GPU");
    return std::string();
  }
  const std::string found = find_in_path(launch::kMpsControlProgram);
  if (found.empty()) {
    if (r.mps == "on") {
      return err(Errc::kUnavailable, std::string("resources.mps: on, but ") + launch::kMpsControlProgram +
                                         " was not found in PATH (it comes with the NVIDIA driver); set "
                                         "resources.mps: off to run without MPS");
    }
    log(std::string("warning: resources.mps: auto: ") + launch::kMpsControlProgram + " was not found in PATH: the " +
        std::to_string(placed.trials_per_gpu) + " groups per GPU (trials_per_gpu) time-slice it without MPS");
    return std::string();
  }
  log("resources.mps: " + r.mps + ": starting a private MPS control daemon (" + found + " -d)" +
      (shared ? " for the " + std::to_string(placed.trials_per_gpu) + " groups per GPU (trials_per_gpu)" : ""));
  return found;
}

Result<launch::LocalLauncherOptions> launcher_options(const config::CampaignConfig& cfg,
                                                      const std::function<void(const std::string&)>& log) {
  launch::LocalLauncherOptions lopt;
  lopt.resources.ranks_data = cfg.resources.ranks_data;
  lopt.resources.ranks_model = cfg.resources.ranks_model;
  lopt.resources.threads = cfg.resources.threads;
  lopt.resources.trainer_starts_ranks = config::trainer_starts_ranks(cfg.trainer.value("kind", std::string()));
  lopt.resources.rank_recovery = campaign_survives_rank_loss(cfg);
  lopt.resources.groups = cfg.resources.groups;
  lopt.resources.pack_slots = pack_slots_of(cfg, log);
  HPCTUNE_TRY(place_gpus(cfg.resources, lopt.resources, log));
  lopt.slurm = slurm_step_options(cfg.resources.slurm);
  return lopt;
}

}  // namespace hpctune::scheduler
