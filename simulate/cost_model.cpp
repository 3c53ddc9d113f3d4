#include "simulate/cost_model.h"

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

namespace hpctune::simulate {

double ring_allreduce_seconds(double bytes, int64_t ranks, double bandwidth_bytes_per_s, double latency_s) {
  if (ranks <= 1 || bytes <= 0) return 0;
  const double p = static_cast<double>(ranks);
  return 2 * (p - 1) / p * bytes / bandwidth_bytes_per_s + 2 * (p - 1) * latency_s;
}

double bubble_fraction(int64_t model, int64_t micro_batches) {
  if (model <= 1) return 0;
  const int64_t m = micro_batches > 0 ? micro_batches : 2 * model;
  return static_cast<double>(model - 1) / static_cast<double>(m + model - 1);
}

double largest_stage_share(const std::vector<double>& layer_costs, int64_t stages) {
  const auto n = static_cast<int64_t>(layer_costs.size());
  if (stages <= 1) return 1;
  if (n < stages) return 1.0 / static_cast<double>(stages);  // unknown layers: balanced
  std::vector<double> prefix(static_cast<std::size_t>(n + 1), 0);
  for (int64_t i = 0; i < n; ++i) prefix[static_cast<std::size_t>(i + 1)] = prefix[static_cast<std::size_t>(i)] + std::max(0.0, layer_costs[static_cast<std::size_t>(i)]);
  const double total = prefix.back();
  if (!(total > 0)) return 1.0 / static_cast<double>(stages);
  // best[k][i]: the smallest largest stage of the first i layers in k stages.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(static_cast<std::size_t>(stages + 1), std::vector<double>(static_cast<std::size_t>(n + 1), inf));
  best[0][0] = 0;
  for (int64_t k = 1; k <= stages; ++k) {
    for (int64_t i = k; i <= n; ++i) {
      double b = inf;
      for (int64_t j = k - 1; j < i; ++j) {
        const double stage = prefix[static_cast<std::size_t>(i)] - prefix[static_cast<std::size_t>(j)];
        b = std::min(b, std::max(best[static_cast<std::size_t>(k - 1)][static_cast<std::size_t>(j)], stage));
      }
      best[static_cast<std::size_t>(k)][static_cast<std::size_t>(i)] = b;
    }
  }
  return best[static_cast<std::size_t>(stages)][static_cast<std::size_t>(n)] / total;
}

Result<StepCost> step_cost(const config::MachineModel& machine, const config::TrialWork& work, int64_t data, int64_t model) {
  if (data < 1 || model < 1) return err(Errc::kInvalidArgument, "cost model: data and model ranks must be >= 1");
  if (model > work.layers) {
    return err(Errc::kInvalidArgument, "cost model: " + std::to_string(model) + " model-parallel stages for a network of " +
                                           std::to_string(work.layers) + " layers");
  }
  const double ranks = static_cast<double>(data * model);
  // The pipeline runs at the pace of its largest stage (the trainers balance stages as well as
  // contiguous layers allow): a stage's share of the compute, 1 / model when balanced.
  const double share = largest_stage_share(work.layer_costs, model);
  const double per_rank = share / static_cast<double>(data);  // of one step's compute
  const int64_t micro = work.micro_batches > 0 ? work.micro_batches : 2 * model;
  const bool inside = data * model <= machine.ranks_per_node;
  const double bw = inside ? machine.intra_bandwidth_bytes_per_s : machine.inter_bandwidth_bytes_per_s;
  const double lat = inside ? machine.intra_latency_s : machine.inter_latency_s;
  StepCost c;
  double steps = 1;
  if (work.has_network) {
    const double rate = work.convolutional ? machine.cnn_flops_per_s : machine.mlp_flops_per_s;
    c.compute_s = work.images_per_step * (work.flops_per_image / rate + machine.image_overhead_s) * per_rank;
    // The optimizer's update: every data replica updates its stage's parameters, in parallel.
    c.compute_s += work.parameter_bytes / 4 * share * machine.update_s_per_param;
    steps = work.steps_per_report;
  } else {
    steps = std::max(1.0, work.steps_per_report);
    c.compute_s = work.seconds_per_step / ranks / steps;  // per optimizer step
  }
  if (model > 1) {
    // GPipe over stages of t_s seconds a micro-batch: (micro - 1) x max t_s + sum t_s, that is the
    // largest stage's compute plus the others' for one micro-batch: (1 - share) / share of it / micro
    // ((model - 1) / micro when balanced).
    c.bubble_s = c.compute_s * (1 - share) / (share * static_cast<double>(micro)) +
                 static_cast<double>(micro + model - 1) * machine.stage_handoff_s;
  }
  c.allreduce_s = ring_allreduce_seconds(work.parameter_bytes / static_cast<double>(model), data, bw, lat);
  c.compute_s *= steps;
  if (work.has_network && work.eval_images_per_report > 0) {
    // Evaluation, forward only, split across the ranks as training.
    const double rate = work.convolutional ? machine.cnn_flops_per_s : machine.mlp_flops_per_s;
    c.compute_s += work.eval_images_per_report * (work.forward_flops_per_image / rate + machine.image_overhead_s) * per_rank;
  }
  c.bubble_s *= steps;
  c.allreduce_s *= steps;
  c.checkpoint_s = work.checkpoint_bytes > 0 ? work.checkpoint_bytes / machine.disk_bytes_per_s : 0;
  return c;
}

double startup_seconds(const config::MachineModel& machine, int64_t ranks) {
  if (ranks <= 1) return machine.startup_s;
  return machine.startup_s + machine.startup_parallel_s + machine.startup_per_rank_s * static_cast<double>(ranks - 1);
}

}  // namespace hpctune::simulate
