// A pipeline stage of the classifier loop on this rank's GPU (`device: gpu` with
// resources.ranks.model > 1): the layers [first, last) that the group's engine gives this model
// rank (pipeline_partition.h), their parameters and optimizer state, and the data set on the device.
//
// GPipe, as the CPU engine (gradient_engine.h): each replica's rows of the global minibatch are cut
// into micro-batches (training.micro_batches, default 2 x the stages); every micro-batch goes forward
// through the stages, then every one backward in reverse order; each stage keeps its micro-batches'
// activations in its own buffers (gpu::GpuNetwork::stage_forward), only the last stage sees labels,
// and a stage updates only its own parameters. With data > 1 (pipelines replicated), each stage's
// gradients are summed over the replicas of that stage host-staged (TrainerGroup::sum_gradients).
//
// Between neighbouring stages, activations forward and input gradients back travel with NCCL
// send/receive on the devices when every rank has its own GPU and NCCL (one communicator over the
// group's ranks, joined as the data-parallel backend joins its own: classifier_gpu_device.h), else
// host-staged through the group's point-to-point messages (MPI). description() says which and why.
// A transfer that fails or does not finish by the group's deadline (a peer lost) aborts the
// communicator, abandons the group and fails the step, so the attempt is queued again.
//
// Dropout masks come from (seed, offset + micro-batch), so they differ from a one-rank GPU run's;
// without dropout, a pipeline's gradients equal the whole network's to fp32 tolerance.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"
#include "nn/network.h"
#include "nn/optimizer.h"
#include "collectives/trainer_group.h"
#include "trainers/classifier_gpu.h"
#include "trainers/idx_dataset.h"

namespace hpctune::trainers {

class ClassifierGpuPipeline {
 public:
  // The stage of layers [layers.first, layers.second) of `net`, starting from stage_params (that
  // range's parameters) and the loop's optimizer (over them). micro_batches > 0.
  static Result<std::unique_ptr<ClassifierGpuPipeline>> create(const nn::Network& net, std::pair<size_t, size_t> layers,
                                                               std::span<const float> stage_params,
                                                               const nn::Optimizer& optimizer, const Dataset& train,
                                                               const Dataset& test, const std::vector<int32_t>& label_map,
                                                               collectives::TrainerGroup& group,
                                                               const ClassifierGpuOptions& options, int64_t micro_batches);
  ~ClassifierGpuPipeline();

  // As ClassifierGpu's (classifier_gpu.h), for this stage: join_group() chooses NCCL or host-staged
  // transfers between the stages; train_batch() steps over `blocks` relative to the stage's
  // parameters; take_stats() and evaluate() are collectives over the group (the last stages' stats,
  // probs on every rank that passes it).
  const std::string& description() const noexcept;
  Status join_group();
  bool nccl() const noexcept;
  Status train_batch(std::span<const int64_t> rows, const std::vector<nn::ParamBlock>& blocks, float lr,
                     uint64_t dropout_seed, uint64_t dropout_offset);
  Result<nn::BatchStats> take_stats();
  Result<nn::BatchStats> evaluate(bool test, std::span<const int64_t> rows, float* probs);
  // The device's parameters into stage_params, its optimizer state into `optimizer`.
  Status download(std::span<float> stage_params, nn::Optimizer& optimizer);

 private:
  struct Impl;
  explicit ClassifierGpuPipeline(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace hpctune::trainers
