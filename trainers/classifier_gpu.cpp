// ClassifierGpu (classifier_gpu.h): nn::Network's layers as gpu::GpuLayerDesc, and the loop's
// minibatch, evaluation and state transfers on the GPU.
#include "trainers/classifier_gpu.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "gpu/gpu_backend.h"
#include "gpu/gpu_context.h"
#include "gpu/gpu_network.h"
#include "gpu/nccl_communicator.h"
#include "nn/layers.h"

namespace hpctune::trainers {
namespace {

Result<gpu::GpuActivation> gpu_activation(const std::string& name) {
  nn::LayerActivation a;
  if (!nn::parse_layer_activation(name, a)) return err(Errc::kInvalidArgument, "unknown activation '" + name + "'");
  switch (a) {
    case nn::LayerActivation::kNone: return gpu::GpuActivation::kNone;
    case nn::LayerActivation::kRelu: return gpu::GpuActivation::kRelu;
    case nn::LayerActivation::kTanh: return gpu::GpuActivation::kTanh;
    case nn::LayerActivation::kSigmoid: return gpu::GpuActivation::kSigmoid;
  }
  return gpu::GpuActivation::kNone;
}

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

// How a data-parallel group's replicas sum their gradients (classifier_gpu.h): NCCL on the devices
// when every rank has its own GPU and NCCL, else host-staged; `why` says which and why. Collective:
// every rank makes the same group calls. An NCCL join that fails on any rank leaves every rank
// host-staged (a peer that is gone fails the group's next call instead).
struct GradientSum {
  std::optional<gpu::NcclCommunicator> nccl;
  std::string why;
};
Result<GradientSum> choose_gradient_sum(const gpu::GpuLibrary& library, const gpu::GpuContext& ctx,
                                        collectives::TrainerGroup& group, const std::string& bus_id) {
  const int D = group.data_size();
  auto host_staged = [D](const std::string& reason) {
    return GradientSum{std::nullopt, std::to_string(D) +
                                         " data-parallel replicas sum their gradients host-staged (the group's "
                                         "collectives, not NCCL): " + reason};
  };
  int32_t version = 0;
  const bool nccl_here = library.api().nccl_version(&version) == 0;
  const std::string no_nccl_why = nccl_here ? "" : library.last_error();
  HPCTUNE_ASSIGN(RankDevices devices, gather_rank_devices(group, bus_id, nccl_here));
  for (int r = 0; r < D; ++r)
    if (!devices.nccl[static_cast<size_t>(r)])
      return host_staged("rank " + std::to_string(r) + "'s CUDA library has no NCCL" +
                         (no_nccl_why.empty() ? "" : " (here: " + no_nccl_why + ")"));
  for (int a = 0; a < D; ++a)
    for (int b = a + 1; b < D; ++b)
      if (devices.bus_ids[static_cast<size_t>(a)] == devices.bus_ids[static_cast<size_t>(b)])
        return host_staged("ranks " + std::to_string(a) + " and " + std::to_string(b) + " share a GPU (PCI bus id " +
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
    return host_staged("rank 0 could not make an NCCL unique id" + (id_why.empty() ? "" : " (" + id_why + ")"));
  gpu::NcclUniqueId id;
  std::copy(id_bytes.begin(), id_bytes.end(), id.bytes.begin());
  auto comm = gpu::NcclCommunicator::create(ctx, D, group.data_rank(), id,
                                            gpu::NcclCommunicator::Clock::now() + group.timeout());
  double failed[1] = {comm.ok() ? 0.0 : 1.0};
  HPCTUNE_TRY(group.sum(failed));
  if (failed[0] != 0.0)
    return host_staged("the NCCL communicator could not be made on " + std::to_string(static_cast<int>(failed[0])) +
                       " rank(s)" + (comm.ok() ? "" : " (here: " + comm.error().message() + ")"));
  GradientSum out;
  out.nccl.emplace(std::move(comm).value());
  out.why = std::to_string(D) +
            " data-parallel replicas sum their gradients with NCCL on the devices (each rank has its own GPU)";
  return out;
}
}  // namespace

// The network's layers are its specs' in order, then the output layer (Network::create()).
Result<std::vector<gpu::GpuLayerDesc>> gpu_layers_of(const nn::Network& net, const std::vector<nn::LayerSpec>& specs) {
  if (net.num_layers() != specs.size() + 1) {
    return err(Errc::kInvalidArgument, "the network has " + std::to_string(net.num_layers()) + " layers for " +
                                           std::to_string(specs.size()) + " specs and the output layer");
  }
  std::vector<gpu::GpuLayerDesc> out;
  for (size_t i = 0; i < net.num_layers(); ++i) {
    const nn::Layer& layer = net.layer(i);
    gpu::GpuLayerDesc d;
    const nn::Shape in = layer.input_shape(), o = layer.output_shape();
    d.in_c = in.c, d.in_h = in.h, d.in_w = in.w;
    d.out_c = o.c, d.out_h = o.h, d.out_w = o.w;
    const bool output = i == specs.size();
    const std::string kind = output ? "dense" : specs[i].kind;
    if (kind == "dense") {
      d.kind = gpu::GpuLayerDesc::Kind::kDense;
      HPCTUNE_ASSIGN(d.activation, output ? Result<gpu::GpuActivation>(gpu::GpuActivation::kNone)
                                          : gpu_activation(specs[i].activation));
    } else if (kind == "conv") {
      d.kind = gpu::GpuLayerDesc::Kind::kConv;
      HPCTUNE_ASSIGN(d.activation, gpu_activation(specs[i].activation));
      d.kernel = specs[i].kernel;
      d.stride = specs[i].stride > 0 ? specs[i].stride : 1;
      if (specs[i].padding == "same") {
        // As nn/layers_conv.cpp: the total padding makes the output ceil(H / stride), the extra low-right.
        const int64_t ph = std::max<int64_t>((o.h - 1) * d.stride + d.kernel - in.h, 0);
        const int64_t pw = std::max<int64_t>((o.w - 1) * d.stride + d.kernel - in.w, 0);
        d.pad_top = ph / 2, d.pad_left = pw / 2;
      }
    } else if (kind == "maxpool") {
      d.kind = gpu::GpuLayerDesc::Kind::kMaxpool;
      d.kernel = specs[i].size;
      d.stride = specs[i].stride > 0 ? specs[i].stride : specs[i].size;
    } else if (kind == "dropout") {
      d.kind = gpu::GpuLayerDesc::Kind::kDropout;
      d.rate = specs[i].rate;
    } else {
      return err(Errc::kInvalidArgument, "layer " + std::to_string(i) + " (" + kind + ") has no GPU kernel");
    }
    if (d.num_params() != layer.num_params()) {
      return err(Errc::kInvalidArgument, "layer " + std::to_string(i) + " (" + layer.describe() + "): " +
                                             std::to_string(d.num_params()) + " parameters on the GPU, " +
                                             std::to_string(layer.num_params()) + " on the CPU");
    }
    out.push_back(d);
  }
  return out;
}

struct ClassifierGpu::Impl {
  gpu::GpuContext ctx;
  std::optional<gpu::GpuNetwork> net;
  std::optional<gpu::GpuOptimizer> optimizer;
  std::optional<gpu::GpuDataset> train, test;
  gpu::DeviceBuffer probs;
  collectives::TrainerGroup* group = nullptr;
  int64_t classes = 0;
  std::string description;
  std::vector<float> host_grads;  // host-staged allreduce
  std::optional<gpu::GpuLibrary> library;
  std::string pci_bus_id;
  // The gradient allreduce; declared last, so destroyed first (before the memory it sums, and ctx).
  std::optional<gpu::NcclCommunicator> nccl;
  explicit Impl(gpu::GpuContext c) : ctx(std::move(c)) {}
};

ClassifierGpu::ClassifierGpu(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ClassifierGpu::~ClassifierGpu() = default;
const std::string& ClassifierGpu::description() const noexcept { return impl_->description; }

Result<std::unique_ptr<ClassifierGpu>> ClassifierGpu::create(const nn::Network& net, const nn::Optimizer& optimizer,
                                                             const Dataset& train, const Dataset& test,
                                                             const std::vector<int32_t>& label_map,
                                                             collectives::TrainerGroup* group,
                                                             const ClassifierGpuOptions& options) {
  if (group != nullptr && group->model_size() > 1) {
    return err(Errc::kInvalidArgument, "device: gpu trains data-parallel groups only (model: 1); this group has " +
                                           std::to_string(group->model_size()) + " model ranks");
  }
  HPCTUNE_ASSIGN(gpu::GpuPrecision precision, gpu::parse_gpu_precision(options.precision));
  auto library = gpu::GpuLibrary::open_default();
  if (!library.ok()) return std::move(library).error().with_context("device: gpu");
  const gpu::GpuInventory inventory = library->inventory();
  if (inventory.devices.empty()) return err(Errc::kUnavailable, "device: gpu, but no GPU is usable here: " + inventory.no_device_reason);
  auto ctx = gpu::GpuContext::create(*library, 0);
  if (!ctx.ok()) return std::move(ctx).error().with_context("device: gpu");
  auto impl = std::make_unique<Impl>(std::move(ctx).value());
  impl->group = group;
  impl->classes = net.classes();

  HPCTUNE_ASSIGN(std::vector<gpu::GpuLayerDesc> layers, gpu_layers_of(net, options.specs));
  gpu::GpuNetworkOptions net_options;
  net_options.precision = precision;
  net_options.deterministic = options.deterministic;
  net_options.max_batch = options.max_batch;
  auto gnet = gpu::GpuNetwork::create(impl->ctx, std::move(layers), net.classes(), net.params(), net_options);
  if (!gnet.ok()) return std::move(gnet).error().with_context("device: gpu: the network");
  impl->net.emplace(std::move(gnet).value());

  const nn::OptimizerOptions& o = optimizer.options();
  gpu::GpuOptimizerOptions go;
  go.kind = o.kind == nn::OptimizerKind::kSgd    ? gpu::GpuOptimizerOptions::Kind::kSgd
            : o.kind == nn::OptimizerKind::kAdam ? gpu::GpuOptimizerOptions::Kind::kAdam
                                                 : gpu::GpuOptimizerOptions::Kind::kAdamW;
  go.momentum = o.momentum, go.nesterov = o.nesterov, go.beta1 = o.beta1, go.beta2 = o.beta2, go.eps = o.eps;
  go.weight_decay = o.weight_decay;
  HPCTUNE_ASSIGN(gpu::GpuOptimizer gopt, gpu::GpuOptimizer::create(impl->ctx, net.num_params(), go));
  const nn::OptimizerState state = optimizer.state();
  HPCTUNE_TRY(gopt.set_state(state.steps, state.buffers));
  impl->optimizer.emplace(std::move(gopt));

  auto upload = [&](const Dataset& d) -> Result<gpu::GpuDataset> {
    std::vector<int32_t> labels(d.labels.size());
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = std::max(label_map[static_cast<size_t>(d.labels[i])], 0);
    return gpu::GpuDataset::create(impl->ctx, d.images, labels, d.features(), options.max_batch);
  };
  HPCTUNE_ASSIGN(gpu::GpuDataset train_set, upload(train));
  HPCTUNE_ASSIGN(gpu::GpuDataset test_set, upload(test));
  impl->train.emplace(std::move(train_set));
  impl->test.emplace(std::move(test_set));
  HPCTUNE_ASSIGN(impl->probs, impl->ctx.allocate(static_cast<size_t>(options.max_batch * net.classes()) * sizeof(float)));

  const gpu::GpuDevice& dev = inventory.devices.front();
  impl->description = "training on GPU " + dev.name + " (" + dev.pci_bus_id + ", driver " +
                      gpu::cuda_version_string(inventory.driver_version) + "), " + options.precision +
                      (options.deterministic ? ", deterministic" : "") + ", data set on the device";
  impl->library.emplace(*library);
  impl->pci_bus_id = dev.pci_bus_id;
  return std::unique_ptr<ClassifierGpu>(new ClassifierGpu(std::move(impl)));
}

Status ClassifierGpu::join_group() {
  Impl& m = *impl_;
  if (m.group == nullptr || m.group->data_size() <= 1 || m.nccl || !m.host_grads.empty()) return Status::Ok();
  HPCTUNE_ASSIGN(GradientSum sum, choose_gradient_sum(*m.library, m.ctx, *m.group, m.pci_bus_id));
  m.description += "; " + sum.why;
  m.nccl = std::move(sum.nccl);
  if (!m.nccl) m.host_grads.resize(m.net->num_params());
  return Status::Ok();
}

bool ClassifierGpu::nccl() const noexcept { return impl_->nccl.has_value(); }

Status ClassifierGpu::train_batch(std::span<const int64_t> rows, const std::vector<nn::ParamBlock>& blocks, float lr,
                                  uint64_t dropout_seed, uint64_t dropout_offset) {
  Impl& m = *impl_;
  const int64_t global = static_cast<int64_t>(rows.size());
  size_t b0 = 0, b1 = rows.size();
  const int D = m.group != nullptr ? m.group->data_size() : 1;
  if (D > 1) {
    const int r = m.group->data_rank();
    b0 = rows.size() * static_cast<size_t>(r) / static_cast<size_t>(D);
    b1 = rows.size() * static_cast<size_t>(r + 1) / static_cast<size_t>(D);
  }
  const float scale = 1.0f / static_cast<float>(global);
  if (b1 > b0) {
    HPCTUNE_TRY(m.train->gather(rows.subspan(b0, b1 - b0)));
    HPCTUNE_TRY(m.net->forward_backward(m.train->batch_x(), m.train->batch_labels(), static_cast<int64_t>(b1 - b0), scale,
                                        dropout_seed, dropout_offset));
  } else {
    HPCTUNE_TRY(m.ctx.check(m.ctx.api().fill_zero(m.ctx.raw(), m.net->d_grads(), m.net->num_params() * sizeof(float)),
                            "zero gradients"));
  }
  if (D > 1 && m.nccl) {
    // A peer lost inside the allreduce: the communicator is aborted at the group's deadline and the
    // group abandoned, so the worker ends it and the master queues the attempt again.
    Status summed = m.nccl->allreduce(m.net->d_grads(), m.net->num_params(),
                                      gpu::NcclCommunicator::Clock::now() + m.group->timeout());
    if (!summed.ok()) {
      m.group->abandon();
      return std::move(summed).error().with_context("device: gpu: the gradient allreduce (NCCL)");
    }
  } else if (D > 1) {
    if (m.host_grads.empty()) return err(Errc::kInternal, "device: gpu: a group's step before join_group()");
    HPCTUNE_TRY(m.ctx.check(m.ctx.api().copy_to_host(m.ctx.raw(), m.host_grads.data(), m.net->d_grads(),
                                                     m.host_grads.size() * sizeof(float)),
                            "gradients to the host"));
    HPCTUNE_TRY(m.group->sum_gradients(m.host_grads));
    HPCTUNE_TRY(m.ctx.check(m.ctx.api().copy_to_device(m.ctx.raw(), m.net->d_grads(), m.host_grads.data(),
                                                       m.host_grads.size() * sizeof(float)),
                            "gradients to the device"));
  }
  std::vector<gpu::GpuParamBlock> gblocks;
  gblocks.reserve(blocks.size());
  for (const nn::ParamBlock& b : blocks) gblocks.push_back({b.offset, b.size, b.decay, b.frozen, b.lr_scale});
  return m.optimizer->step(m.net->d_params(), m.net->d_grads(), gblocks, lr);
}

Result<nn::BatchStats> ClassifierGpu::take_stats() {
  HPCTUNE_ASSIGN(gpu::GpuStepStats g, impl_->net->take_stats());
  nn::BatchStats b{g.loss_sum, g.correct, g.count};
  if (impl_->group != nullptr && impl_->group->size() > 1) {
    double v[3] = {b.loss_sum, static_cast<double>(b.correct), static_cast<double>(b.count)};
    HPCTUNE_TRY(impl_->group->sum(v));
    b = {v[0], static_cast<int64_t>(v[1]), static_cast<int64_t>(v[2])};
  }
  return b;
}

// Every rank evaluates every row (the replicas hold the same parameters): no collective.
Result<nn::BatchStats> ClassifierGpu::evaluate(bool test, std::span<const int64_t> rows, float* probs) {
  Impl& m = *impl_;
  gpu::GpuDataset& d = test ? *m.test : *m.train;
  // The loop takes the training stats before it evaluates (the last minibatch of an epoch reads
  // them); any left here would be lost, so they are an error, not mixed into this evaluation's.
  HPCTUNE_ASSIGN(const gpu::GpuStepStats left, m.net->take_stats());
  if (left.count != 0) {
    return err(Errc::kInternal, "device: gpu: " + std::to_string(left.count) +
                                    " training images' stats were not taken before an evaluation");
  }
  HPCTUNE_TRY(d.gather(rows));
  const int64_t n = static_cast<int64_t>(rows.size());
  HPCTUNE_TRY(m.net->evaluate(d.batch_x(), d.batch_labels(), n, probs != nullptr ? m.probs.as<float>() : nullptr));
  if (probs != nullptr) {
    HPCTUNE_TRY(m.ctx.check(m.ctx.api().copy_to_host(m.ctx.raw(), probs, m.probs.data(),
                                                     static_cast<size_t>(n * m.classes) * sizeof(float)),
                            "probabilities to the host"));
  }
  HPCTUNE_ASSIGN(gpu::GpuStepStats g, m.net->take_stats());
  return nn::BatchStats{g.loss_sum, g.correct, g.count};
}

Status ClassifierGpu::download(nn::Network& net, nn::Optimizer& optimizer) {
  HPCTUNE_ASSIGN(std::vector<float> params, impl_->net->params());
  if (params.size() != net.params().size()) return err(Errc::kInternal, "device: gpu: parameter count changed");
  std::copy(params.begin(), params.end(), net.params().begin());
  HPCTUNE_ASSIGN(std::vector<std::vector<float>> buffers, impl_->optimizer->buffers());
  return optimizer.set_state(nn::OptimizerState{impl_->optimizer->steps(), std::move(buffers)});
}

}  // namespace hpctune::trainers
