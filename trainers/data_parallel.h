// How the data replicas of a classifier trial (classifier_training.h) combine their gradients:
// the `trainer.sync` family of settings, declared once in data_parallel_settings.cpp (the reader
// and the declarations side by side).
//
//   sync: allreduce   every step waits for every replica's gradient (today's path, deterministic
//                     for a fixed thread count); with gradient_compression: 1bit the gradients
//                     travel as 1-bit packets with error feedback (replica_exchange.h) instead.
//   sync: ssp         stale-synchronous parallel: a replica may start step c while the slowest
//                     replica has finished only step c - 1 - staleness; every replica applies the
//                     summed gradients of each step in step order, so replicas keep the same
//                     weights, computed gradients are at most `staleness` steps stale, and
//                     staleness 0 is the allreduce path bit for bit (replica_exchange.h). The
//                     leader (data rank 0) decides each step; a replica silent for the group's
//                     timeout is dropped and the trial goes on with the others.
//   min_replica_fraction < 1 (ssp, allreduce): backup replicas: a step completes when
//                     ceil(f x D) replicas (the leader among them) have reported; late gradients
//                     are dropped and counted (sync_late_packets); not deterministic.
//   sync: downpour    parameter-server shards (DistBelief) on the replicas' ranks or their own;
//                     replicas fetch and push asynchronously (downpour.h); a replica that dies
//                     leaves the others training.
//   sync: hogwild     resources.threads threads of ONE rank take minibatches from a shared
//                     counter and update shared weights without locks (hogwild.h); a group of
//                     more than one rank is refused. One thread is the plain loop bit for bit.
//
// debug_slowdown / debug_slowdown_rank: a benchmark aid (bench/async): the named data replica
// sleeps (factor - 1) x its compute time after every minibatch, a straggler on demand.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/settings.h"

namespace hpctune::trainers {

class SettingsReader;

enum class SyncMode { kAllreduce, kDownpour, kSsp, kHogwild };
enum class GradientCompression { kNone, kOneBit };
enum class ShardOptimizer { kSgd, kAdagrad };

const char* sync_mode_name(SyncMode mode) noexcept;

struct DataParallelSettings {
  SyncMode sync = SyncMode::kAllreduce;
  int64_t staleness = 2;                 // ssp: how many steps a replica may run ahead of the slowest
  int64_t ps_shards = 0;                 // downpour: parameter-server shards (0 = one per replica)
  bool ps_on_own_ranks = false;          // downpour: shards on their own ranks (else on the replicas')
  int64_t push_interval = 1;             // downpour: steps between gradient pushes
  int64_t fetch_interval = 1;            // downpour: steps between parameter fetches
  ShardOptimizer shard_optimizer = ShardOptimizer::kAdagrad;
  double min_replica_fraction = 1.0;     // backup replicas: a step completes at this fraction
  GradientCompression compression = GradientCompression::kNone;
  double debug_slowdown = 1.0;           // benchmark aid: this factor on debug_slowdown_rank
  int64_t debug_slowdown_rank = 1;

  // Whether gradients go through replica_exchange.h instead of the group's allreduce.
  bool exchanges() const noexcept {
    return sync == SyncMode::kSsp ||
           (sync == SyncMode::kAllreduce && (compression == GradientCompression::kOneBit || min_replica_fraction < 1.0));
  }
  // Whether the exchange's leader decides each step (replica_exchange.h, coordinated): ssp (a dead
  // replica is dropped) and backup replicas.
  bool coordinated() const noexcept { return sync == SyncMode::kSsp || (exchanges() && min_replica_fraction < 1.0); }
};

// The declarations of the settings above (appended to the classifier loop's).
std::vector<SettingDecl> data_parallel_setting_specs();

// Reads the settings above through `r` (declared in data_parallel_settings.cpp); kInvalidArgument
// naming the setting for a combination that makes no sense.
Status parse_data_parallel(const SettingsReader& r, DataParallelSettings& s);

}  // namespace hpctune::trainers
