// The classifier loop's GPU backend (`device: gpu`, classifier_training.h): the same network,
// optimizer, data order, learning-rate plan, checkpoints and predictions as on the CPU, with the
// forward and backward passes, the optimizer step and the data set on one GPU (gpu/gpu_network.h).
//
// The loop keeps its nn::Network and nn::Optimizer as the host's copy of the state: they are loaded
// from checkpoints as on the CPU, uploaded when the backend is made, and downloaded into before
// every checkpoint (download()), so a checkpoint written on the GPU is the CPU's format and a trial
// moves between backends at any epoch.
//
// The device is the first GPU this process sees (CUDA_VISIBLE_DEVICES: the launcher gives each rank
// its own, resources.gpus_per_rank). No usable GPU fails the trial (kUnavailable) with the reason
// (no driver, no device, hpctune built without CUDA); it never falls back to the CPU silently.
//
// Groups: data-parallel groups (data x 1) train each replica's shard on its GPU. join_group()
// chooses once how the replicas sum their gradients: with NCCL on the devices (gpu/
// nccl_communicator.h) when every rank has its own GPU (the ranks' PCI bus ids, exchanged through
// the group's collectives, all differ) and NCCL; rank 0 makes the unique id and broadcasts it
// (TrainerGroup::broadcast_bytes), every rank joins by the group's deadline. Otherwise (ranks that
// share a GPU, which NCCL refuses; a library without NCCL; a join that failed) host-staged through
// the group's collectives (TrainerGroup::sum_gradients: MPI or shared memory). description() says
// which and why. An NCCL allreduce that does not finish by the group's deadline (a peer lost) aborts
// the communicator, abandons the group and fails the step, so the attempt is queued again.
// A pipeline (model > 1) trains one stage per rank instead (classifier_gpu_pipeline.h); create()
// refuses a group with model ranks.
//
// Per step nothing is synchronised: the loss and the correct count accumulate on the device and
// take_stats() reads them (the loop does so every kStopPollBatches minibatches and at the epoch's
// end, where it checks for divergence).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"
#include "nn/network.h"
#include "nn/optimizer.h"
#include "collectives/trainer_group.h"
#include "gpu/gpu_network.h"
#include "trainers/idx_dataset.h"

namespace hpctune::trainers {

// The network's layers as the GPU network takes them: shapes from `net`, kernel, stride, padding,
// activation and rate from the specs it was built from (layer i < specs.size() is specs[i]; the last
// is the dense output layer). kInvalidArgument for a layer with no GPU kernel or a parameter count
// that differs from the CPU's.
Result<std::vector<gpu::GpuLayerDesc>> gpu_layers_of(const nn::Network& net, const std::vector<nn::LayerSpec>& specs);

struct ClassifierGpuOptions {
  std::string precision = "fp32";  // fp32 | tf32 | bf16
  bool deterministic = false;
  int64_t max_batch = 128;        // the largest global batch (the train batch or the eval batch)
  std::vector<nn::LayerSpec> specs;  // the hidden layers the network was built from
};

class ClassifierGpu {
 public:
  // Uploads the network's parameters, the optimizer's state and the two files' images (labels
  // through label_map; rows whose class is left out are never gathered). `group` may be null.
  static Result<std::unique_ptr<ClassifierGpu>> create(const nn::Network& net, const nn::Optimizer& optimizer,
                                                       const Dataset& train, const Dataset& test,
                                                       const std::vector<int32_t>& label_map,
                                                       collectives::TrainerGroup* group,
                                                       const ClassifierGpuOptions& options);
  ~ClassifierGpu();

  // One line for the trial's log: the device, the precision, how a group sums its gradients.
  const std::string& description() const noexcept;
  // In a data-parallel group: chooses NCCL or host-staged sums (above) and adds why to description().
  // Collective: every rank calls it once, after create() succeeded on every rank.
  Status join_group();
  // Whether the gradients are summed with NCCL.
  bool nccl() const noexcept;

  // One minibatch of the training file (rows, the global batch, every rank the same), then the
  // optimizer step over `blocks` at `lr`. Dropout masks from (dropout_seed, dropout_offset).
  Status train_batch(std::span<const int64_t> rows, const std::vector<nn::ParamBlock>& blocks, float lr,
                     uint64_t dropout_seed, uint64_t dropout_offset);
  // The training stats since the last call, summed over the group (a collective in a group).
  Result<nn::BatchStats> take_stats();
  // Inference on rows of the training file (`test` false) or the test file; probs [rows, classes]
  // on the host when not null. Summed over the group.
  Result<nn::BatchStats> evaluate(bool test, std::span<const int64_t> rows, float* probs);
  // The device's parameters into net.params(), its optimizer state into `optimizer`.
  Status download(nn::Network& net, nn::Optimizer& optimizer);

 private:
  struct Impl;
  explicit ClassifierGpu(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace hpctune::trainers
