// The GPU backends' shared parts (classifier_gpu_device.h).
#include "trainers/classifier_gpu_device.h"

#include <algorithm>
#include <utility>

namespace hpctune::trainers {
namespace {

// Every rank's PCI bus id on every rank, through the group's sum (each rank fills its own slots;
// 6 bytes a double, exact), and whether each rank's library has NCCL. Collective.
struct RankDevices {
  std::vector<std::string> bus_ids;
  std::vector<bool> nccl;
};
constexpr size_t kBusIdBytes = 36, kBytesPerDouble = 6, kSlots = kBusIdBytes / kBytesPerDouble + 1;
Result<RankDevices> gather_rank_devices(collectives::TrainerGroup& group, const std::string& bus_id, bool nccl) {
  const size_t n = static_cast<size_t>(group.size()), me = static_cast<size_t>(group.rank());
  std::vector<double> v(n * kSlots, 0.0);
  for (size_t i = 0; i < std::min(bus_id.size(), kBusIdBytes); ++i) {
    const uint64_t byte = static_cast<unsigned char>(bus_id[i]);
    v[me * kSlots + i / kBytesPerDouble] += static_cast<double>(byte << (8 * (i % kBytesPerDouble)));
  }
  v[me * kSlots + kSlots - 1] = nccl ? 1.0 : 0.0;
  HPCTUNE_TRY(group.sum(v));
  RankDevices out;
  for (size_t r = 0; r < n; ++r) {
    std::string id;
    for (size_t i = 0; i < kBusIdBytes; ++i) {
      const auto word = static_cast<uint64_t>(v[r * kSlots + i / kBytesPerDouble]);
      const auto c = static_cast<char>((word >> (8 * (i % kBytesPerDouble))) & 0xff);
      if (c == '\0') break;
      id.push_back(c);
    }
    out.bus_ids.push_back(std::move(id));
    out.nccl.push_back(v[r * kSlots + kSlots - 1] != 0.0);
  }
  return out;
}

}  // namespace

Result<RankGpu> open_rank_gpu() {
  auto library = gpu::GpuLibrary::open_default();
  if (!library.ok()) return std::move(library).error().with_context("device: gpu");
  const gpu::GpuInventory inventory = library->inventory();
  if (inventory.devices.empty()) return err(Errc::kUnavailable, "device: gpu, but no GPU is usable here: " + inventory.no_device_reason);
  return RankGpu{std::move(library).value(), inventory.devices.front(), inventory.driver_version};
}

std::string describe_rank_gpu(const RankGpu& gpu, const std::string& precision, bool deterministic) {
  return "GPU " + gpu.device.name + " (" + gpu.device.pci_bus_id + ", driver " + gpu::cuda_version_string(gpu.driver_version) +
         "), " + precision + (deterministic ? ", deterministic" : "");
}

gpu::GpuOptimizerOptions gpu_optimizer_options(const nn::OptimizerOptions& o) {
  gpu::GpuOptimizerOptions go;
  go.kind = o.kind == nn::OptimizerKind::kSgd    ? gpu::GpuOptimizerOptions::Kind::kSgd
            : o.kind == nn::OptimizerKind::kAdam ? gpu::GpuOptimizerOptions::Kind::kAdam
                                                 : gpu::GpuOptimizerOptions::Kind::kAdamW;
  go.momentum = o.momentum, go.nesterov = o.nesterov, go.beta1 = o.beta1, go.beta2 = o.beta2, go.eps = o.eps;
  go.weight_decay = o.weight_decay;
  return go;
}

Result<gpu::GpuOptimizer> upload_optimizer(const gpu::GpuContext& ctx, const nn::Optimizer& optimizer, size_t num_params) {
  HPCTUNE_ASSIGN(gpu::GpuOptimizer gopt, gpu::GpuOptimizer::create(ctx, num_params, gpu_optimizer_options(optimizer.options())));
  const nn::OptimizerState state = optimizer.state();
  HPCTUNE_TRY(gopt.set_state(state.steps, state.buffers));
  return gopt;
}

Result<gpu::GpuDataset> upload_dataset(const gpu::GpuContext& ctx, const Dataset& d, const std::vector<int32_t>& label_map,
                                       int64_t max_batch) {
  std::vector<int32_t> labels(d.labels.size());
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = std::max(label_map[static_cast<size_t>(d.labels[i])], 0);
  return gpu::GpuDataset::create(ctx, d.images, labels, d.features(), max_batch);
}

Result<NcclJoin> join_nccl(const gpu::GpuLibrary& library, const gpu::GpuContext& ctx, collectives::TrainerGroup& group,
                           const std::string& bus_id) {
  const int n = group.size();
  auto without = [](std::string why) { return NcclJoin{std::nullopt, std::move(why)}; };
  int32_t version = 0;
  const bool nccl_here = library.api().nccl_version(&version) == 0;
  const std::string no_nccl_why = nccl_here ? "" : library.last_error();
  HPCTUNE_ASSIGN(RankDevices devices, gather_rank_devices(group, bus_id, nccl_here));
  for (int r = 0; r < n; ++r)
    if (!devices.nccl[static_cast<size_t>(r)])
      return without("rank " + std::to_string(r) + "'s CUDA library has no NCCL" +
                     (no_nccl_why.empty() ? "" : " (here: " + no_nccl_why + ")"));
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b)
      if (devices.bus_ids[static_cast<size_t>(a)] == devices.bus_ids[static_cast<size_t>(b)])
        return without("ranks " + std::to_string(a) + " and " + std::to_string(b) + " share a GPU (PCI bus id " +
                       devices.bus_ids[static_cast<size_t>(a)] +
                       "), which NCCL refuses; resources.gpus_per_rank gives each rank its own");
  // Rank 0 makes the unique id and sends it over the group's control path.
  std::vector<uint8_t> id_bytes;
  std::string id_why;
  if (group.leader()) {
    auto id = gpu::NcclUniqueId::create(library);
    if (id.ok()) id_bytes.assign(id->bytes.begin(), id->bytes.end());
    else id_why = id.error().message();
  }
  HPCTUNE_TRY(group.broadcast_bytes(id_bytes));
  if (id_bytes.size() != HPCTUNE_NCCL_UNIQUE_ID_BYTES)
    return without("rank 0 could not make an NCCL unique id" + (id_why.empty() ? "" : " (" + id_why + ")"));
  gpu::NcclUniqueId id;
  std::copy(id_bytes.begin(), id_bytes.end(), id.bytes.begin());
  // The join is non-blocking: a rank whose join failed at once says so over the control path before
  // anyone waits, so the others abort theirs now instead of waiting for it until the deadline.
  auto comm = gpu::NcclCommunicator::start(ctx, n, group.rank(), id);
  double unstarted[1] = {comm.ok() ? 0.0 : 1.0};
  HPCTUNE_TRY(group.sum(unstarted));
  if (unstarted[0] != 0.0)
    return without("the NCCL communicator could not be started on " + std::to_string(static_cast<int>(unstarted[0])) +
                   " rank(s)" + (comm.ok() ? "" : " (here: " + comm.error().message() + ")"));  // ours aborts as it goes
  const Status ready = comm->wait_ready(gpu::NcclCommunicator::Clock::now() + group.timeout());
  double failed[1] = {ready.ok() ? 0.0 : 1.0};
  HPCTUNE_TRY(group.sum(failed));
  if (failed[0] != 0.0)
    return without("the NCCL communicator could not be made on " + std::to_string(static_cast<int>(failed[0])) +
                   " rank(s)" + (ready.ok() ? "" : " (here: " + ready.error().message() + ")"));
  NcclJoin out;
  out.comm.emplace(std::move(comm).value());
  return out;
}

}  // namespace hpctune::trainers
