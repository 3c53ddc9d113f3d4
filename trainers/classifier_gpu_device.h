// What the classifier's GPU backends share (internal to trainers/): this rank's GPU, the loop's
// optimizer and data on the device, and the choice of NCCL among a group's ranks. The data-parallel
// backend (classifier_gpu.h) and the pipeline stage (classifier_gpu_pipeline.h) use these.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "nn/optimizer.h"
#include "collectives/trainer_group.h"
#include "gpu/gpu_backend.h"
#include "gpu/gpu_context.h"
#include "gpu/gpu_network.h"
#include "gpu/nccl_communicator.h"
#include "trainers/idx_dataset.h"

namespace hpctune::trainers {

// The CUDA library and the first GPU this process sees (CUDA_VISIBLE_DEVICES); kUnavailable with
// the reason when there is none (no driver, no device, hpctune built without CUDA).
struct RankGpu {
  gpu::GpuLibrary library;
  gpu::GpuDevice device;
  int driver_version = 0;
};
Result<RankGpu> open_rank_gpu();
// "GPU <name> (<bus id>, driver <version>), <precision>[, deterministic]".
std::string describe_rank_gpu(const RankGpu& gpu, const std::string& precision, bool deterministic);

gpu::GpuOptimizerOptions gpu_optimizer_options(const nn::OptimizerOptions& o);
// An optimizer on the device for `num_params` parameters, from the loop's optimizer's state.
Result<gpu::GpuOptimizer> upload_optimizer(const gpu::GpuContext& ctx, const nn::Optimizer& optimizer, size_t num_params);
// A data set's images and labels (through label_map; rows whose class is left out are never gathered).
Result<gpu::GpuDataset> upload_dataset(const gpu::GpuContext& ctx, const Dataset& d, const std::vector<int32_t>& label_map,
                                       int64_t max_batch);

// One NCCL communicator over every rank of the group (rank() of size()) when every rank has its own
// GPU (their PCI bus ids, exchanged through the group's sum, all differ) and a library with NCCL;
// rank 0 makes the unique id and broadcasts it (TrainerGroup::broadcast_bytes), every rank joins by
// the group's deadline. Otherwise no communicator and why not. Collective: every rank makes the same
// group calls; a join that fails on any rank leaves every rank without one.
struct NcclJoin {
  std::optional<gpu::NcclCommunicator> comm;
  std::string why_not;
};
Result<NcclJoin> join_nccl(const gpu::GpuLibrary& library, const gpu::GpuContext& ctx, collectives::TrainerGroup& group,
                           const std::string& bus_id);

}  // namespace hpctune::trainers
