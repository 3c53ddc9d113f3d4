// The `trainer.sync` settings of the classifier kinds (data_parallel.h): declarations and reader.
#include "trainers/data_parallel.h"

#include "trainers/trainer_settings.h"

namespace hpctune::trainers {

const char* sync_mode_name(SyncMode mode) noexcept {
  switch (mode) {
    case SyncMode::kAllreduce: return "allreduce";
    case SyncMode::kDownpour: return "downpour";
    case SyncMode::kSsp: return "ssp";
    case SyncMode::kHogwild: return "hogwild";
  }
  return "allreduce";
}

std::vector<SettingDecl> data_parallel_setting_specs() {
  using T = SettingType;
  return {
      {.key = "sync", .type = T::kString, .default_value = "allreduce",
       .choices = {"allreduce", "downpour", "ssp", "hogwild"},
       .help = "How data replicas combine gradients: allreduce (every step waits for every replica; deterministic), "
               "ssp (stale-synchronous: a replica runs at most `staleness` steps ahead of the slowest; not "
               "deterministic), downpour (parameter-server shards; replicas fetch and push "
               "asynchronously; not deterministic) or hogwild (resources.threads threads "
               "of one rank updating shared weights without locks; not deterministic above 1 thread).",
       .aliases = {"sync_mode", "synchronization", "parallel_mode"}},
      {.key = "staleness", .type = T::kInt, .default_value = 2, .min = 0, .max = 64,
       .help = "sync: ssp: how many steps a replica may run ahead of the slowest (0 = allreduce, bit for bit). "
               "Stale gradients act as momentum of their own: with sgd's momentum 0.9 and staleness >= 1 "
               "training degrades or stalls; lower `momentum` (0-0.5) or search it with the mode (README).",
       .aliases = {"staleness_bound", "max_staleness", "ssp_staleness"}},
      {.key = "ps_shards", .type = T::kInt, .default_value = 0, .min = 0, .max = 1024,
       .help = "sync: downpour: parameter-server shards (0 = one per data rank with ps_placement: replicas, 1 with "
               "own_ranks)."},
      {.key = "ps_placement", .type = T::kString, .default_value = "replicas", .choices = {"replicas", "own_ranks"},
       .help = "sync: downpour: the shards on the replicas' ranks or on ranks of their own."},
      {.key = "push_interval", .type = T::kInt, .default_value = 1, .min = 1, .max = 10000,
       .help = "sync: downpour: steps between a replica's gradient pushes.", .aliases = {"n_push"}},
      {.key = "fetch_interval", .type = T::kInt, .default_value = 1, .min = 1, .max = 10000,
       .help = "sync: downpour: steps between a replica's parameter fetches.", .aliases = {"n_fetch"}},
      {.key = "shard_optimizer", .type = T::kString, .default_value = "adagrad", .choices = {"sgd", "adagrad"},
       .help = "sync: downpour: the update each parameter-server shard applies to pushed gradients."},
      {.key = "min_replica_fraction", .type = T::kFloat, .default_value = 1.0, .min = 0, .max = 1,
       .help = "Backup replicas (sync: allreduce or ssp): a step completes when ceil(fraction x replicas) of the "
               "replicas, data rank 0 among them, have reported; later gradients of that step are dropped and "
               "counted (sync_late_packets), so stragglers do not set the pace. 1 = all (deterministic); below 1 "
               "not deterministic.", .min_exclusive = true, .aliases = {"backup_fraction"}},
      {.key = "gradient_compression", .type = T::kString, .default_value = "none", .choices = {"none", "1bit"},
       .help = "none, or 1bit: gradients travel as one sign bit per value plus two means per 2048 values, with "
               "the quantization error carried to the next step (error feedback; CNTK's 1-bit SGD); about 1/31 "
               "of the bytes. For allreduce and ssp gradients and downpour pushes.", .aliases = {"compression", "grad_compression"}},
      {.key = "debug_slowdown", .type = T::kFloat, .default_value = 1.0, .min = 1, .max = 100,
       .help = "Benchmark aid: data replica debug_slowdown_rank sleeps (factor - 1) x its compute time after "
               "every minibatch, a straggler on demand (1 = off)."},
      {.key = "debug_slowdown_rank", .type = T::kInt, .default_value = 1, .min = 0, .max = 65535,
       .help = "Benchmark aid: the data replica that debug_slowdown slows."},
  };
}

Status parse_data_parallel(const SettingsReader& r, DataParallelSettings& s) {
  HPCTUNE_ASSIGN(const std::string sync, r.string("sync"));
  s.sync = sync == "ssp" ? SyncMode::kSsp : sync == "downpour" ? SyncMode::kDownpour
         : sync == "hogwild" ? SyncMode::kHogwild : SyncMode::kAllreduce;
  HPCTUNE_ASSIGN(s.staleness, r.integer("staleness"));
  HPCTUNE_ASSIGN(s.ps_shards, r.integer("ps_shards"));
  HPCTUNE_ASSIGN(const std::string placement, r.string("ps_placement"));
  s.ps_on_own_ranks = placement == "own_ranks";
  HPCTUNE_ASSIGN(s.push_interval, r.integer("push_interval"));
  HPCTUNE_ASSIGN(s.fetch_interval, r.integer("fetch_interval"));
  HPCTUNE_ASSIGN(const std::string shard_optimizer, r.string("shard_optimizer"));
  s.shard_optimizer = shard_optimizer == "sgd" ? ShardOptimizer::kSgd : ShardOptimizer::kAdagrad;
  HPCTUNE_ASSIGN(s.min_replica_fraction, r.number("min_replica_fraction"));
  HPCTUNE_ASSIGN(const std::string compression, r.string("gradient_compression"));
  s.compression = compression == "1bit" ? GradientCompression::kOneBit : GradientCompression::kNone;
  HPCTUNE_ASSIGN(s.debug_slowdown, r.number("debug_slowdown"));
  HPCTUNE_ASSIGN(s.debug_slowdown_rank, r.integer("debug_slowdown_rank"));

  if (s.compression == GradientCompression::kOneBit && s.sync == SyncMode::kHogwild) {
    return r.bad("gradient_compression", r.raw("gradient_compression"),
                 "none with sync: hogwild (its threads share memory; nothing travels)");
  }
  // min_replica_fraction below 1 means nothing to downpour (its replicas never wait for each other)
  // nor hogwild (one rank): ignored there, as below.
  if (s.sync == SyncMode::kDownpour || s.sync == SyncMode::kHogwild) s.min_replica_fraction = 1.0;
  // The other modes' settings are ignored rather than refused, so that a search over `sync` can
  // fix them for the trials of the mode that reads them.
  return Status::Ok();
}

}  // namespace hpctune::trainers
