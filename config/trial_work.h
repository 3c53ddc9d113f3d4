// The work of one trial, as the simulator's cost model (simulate/cost_model.h) needs
// it, read from a trial's trainer settings through what its kind declares
// (trainers/trainer_settings.h), never by the kind's name:
//   - a kind that declares `seconds_per_step` (the function trainer) costs that many seconds of one
//     rank per reported step; its optional `parameters` are the bytes its allreduce moves (4 each)
//     `layers` the most pipeline stages it splits into and `batches_per_step` the optimizer steps
//     (allreduces, pipeline flushes) of a report;
//   - a kind that declares `hidden` (a dense stack) or a list `layers` (conv/maxpool/dense) is a
//     network on 28 x 28 x 1 images with 10 classes (MNIST, Fashion-MNIST): its training FLOPs per
//     image (3 x the forward pass's multiply-adds x 2), parameters, layers with weights (+1 for the
//     output), batch_size, the images of an epoch ((max_train_samples or 60,000) x (1 -
//     val_fraction)), one report per epoch, a checkpoint per epoch when `checkpoint` is on, and per
//     epoch the evaluation of the validation images plus an epoch's share of the final test
//     evaluation ((max_test_samples or 10,000) / epochs), a forward pass each (a third of training).
#pragma once

#include <vector>

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace hpctune::config {

struct TrialWork {
  bool has_network = false;        // false: seconds_per_step says the compute
  bool convolutional = false;      // costed at the machine's cnn rate, else its mlp rate
  double seconds_per_step = 0;     // !has_network: one rank's seconds per reported step
  double flops_per_image = 0;      // training: forward + backward (no input gradient for the first layer)
  double forward_flops_per_image = 0;  // evaluation: forward only
  double images_per_step = 1;      // per optimizer step (the global minibatch, batch_size)
  double steps_per_report = 1;     // optimizer steps per reported step (an epoch's batches)
  double eval_images_per_report = 0;  // images evaluated (forward only) per reported step
  double parameter_bytes = 0;      // what a data-parallel allreduce sums per optimizer step
  double checkpoint_bytes = 0;     // written after each report (0: no checkpoint)
  int64_t layers = 1;              // the most pipeline stages the network splits into
  // Per layer with weights, in order: its forward multiply-adds plus its output elements per image,
  // the measure the trainers balance pipeline stages by (trainers/pipeline_partition.h); empty
  // for a kind without a network.
  std::vector<double> layer_costs;
  int64_t micro_batches = 0;       // pipeline micro-batches per minibatch (0: 2 x the stages)
  int64_t batch_size = 1;          // batch_size (1 for a kind without one)
};

// The work of a trial whose trainer settings are `trainer` ({"kind": ..., settings}, a trial's
// params laid over). kInvalidArgument for an unknown kind or a bad setting.
Result<TrialWork> trial_work(const nlohmann::json& trainer);

}  // namespace hpctune::config
