// The cost model of a simulated trial (`hpctune simulate`, issue 24): what one reported step of a
// trial costs on a trainer group of `data x model` ranks of a machine (config/machine_file.h),
// from the trial's work (config/trial_work.h). Pure: no sockets, files or SQLite.
//
// Per optimizer step (a minibatch of images_per_step images):
//   compute   images_per_step x (flops_per_image / rate + image_overhead_s) x share / data: the data
//             ranks share the minibatch, the model ranks the layers, and the pipeline goes at the
//             pace of its largest stage, `share` of the network's compute (the layers' costs split
//             into `model` contiguous stages as the trainers split them, largest_stage_share; 1 /
//             model when balanced) (rate: the machine's cnn rate for a network with convolutions,
//             else its mlp rate); plus the optimizer's update of that stage's parameters (parameters
//             x share x update_ns_per_param; each data replica updates its own copy at the same
//             time). A kind without a network: seconds_per_step / (data x model) per report, over
//             its steps_per_report optimizer steps.
//   bubble    GPipe's idle stages: a schedule of (micro_batches - 1) x the largest stage's time a
//             micro-batch + every stage's once, so compute x (1 - share) / (share x micro_batches)
//             ((model - 1) / micro_batches when balanced, a bubble of (model - 1) / (micro_batches
//             + model - 1) of compute + bubble); plus a stage hand-off
//             of each micro-batch to the next stage, (micro_batches + model - 1) x stage_handoff_s
//             (micro_batches 0: 2 x model, as the trainers do).
//   allreduce the gradients of a stage (parameter_bytes / model) summed across the data ranks by
//             the bandwidth-optimal bound of a ring, 2 (p - 1) / p x bytes / bandwidth + 2 (p - 1)
//             x latency; inside a node while the group's ranks fit ranks_per_node, else between
//             nodes.
// Per report (an epoch): steps_per_report optimizer steps, the evaluation of eval_images_per_report
// images (forward only: forward_flops_per_image, split across the ranks; counted in
// compute), and a checkpoint of checkpoint_bytes at the disk's bandwidth. Per launch of a group: startup_s, and for more than one rank
// parallel_seconds + per_rank_seconds x (ranks - 1), to its hello (the simulator adds the ranks' load
// and each trial's setup as work on their cores).
// The master's own decision time is not a parameter: the simulator measures it (simulator.h).
#pragma once

#include <cstdint>
#include <vector>

#include "common/result.h"
#include "config/machine_file.h"
#include "config/trial_work.h"

namespace hpctune::simulate {

// The seconds one reported step costs, by part.
struct StepCost {
  double compute_s = 0, bubble_s = 0, allreduce_s = 0, checkpoint_s = 0;
  double total() const { return compute_s + bubble_s + allreduce_s + checkpoint_s; }
};

// 2 (p - 1) / p x bytes / bandwidth + 2 (p - 1) x latency; 0 for p <= 1 or no bytes.
double ring_allreduce_seconds(double bytes, int64_t ranks, double bandwidth_bytes_per_s, double latency_s);

// The largest stage's share of the network's compute when `layer_costs` are split into `stages`
// contiguous non-empty stages minimising the largest (exact, by dynamic programming); 1 / stages
// when the layers are unknown or fewer than the stages, 1 for one stage.
double largest_stage_share(const std::vector<double>& layer_costs, int64_t stages);

// (model - 1) / (micro_batches + model - 1): the share of a GPipe step its stages sit idle.
double bubble_fraction(int64_t model, int64_t micro_batches);

// The cost of one reported step of `work` on data x model ranks. kInvalidArgument for ranks < 1
// or model beyond the network's layers.
Result<StepCost> step_cost(const config::MachineModel& machine, const config::TrialWork& work, int64_t data, int64_t model);

// From a group's launch to its hello.
double startup_seconds(const config::MachineModel& machine, int64_t ranks);

}  // namespace hpctune::simulate
