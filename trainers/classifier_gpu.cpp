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
#include "trainers/classifier_gpu_device.h"
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

// How a data-parallel group's replicas sum their gradients (classifier_gpu.h): NCCL on the devices
// when every rank has its own GPU and NCCL, else host-staged; `why` says which and why. Collective.
struct GradientSum {
  std::optional<gpu::NcclCommunicator> nccl;
  std::string why;
};
Result<GradientSum> choose_gradient_sum(const gpu::GpuLibrary& library, const gpu::GpuContext& ctx,
                                        collectives::TrainerGroup& group, const std::string& bus_id) {
  const int D = group.data_size();
  HPCTUNE_ASSIGN(NcclJoin join, join_nccl(library, ctx, group, bus_id));
  if (!join.comm) {
    return GradientSum{std::nullopt, std::to_string(D) +
                                         " data-parallel replicas sum their gradients host-staged (the group's "
                                         "collectives, not NCCL): " + join.why_not};
  }
  return GradientSum{std::move(join.comm),
                     std::to_string(D) + " data-parallel replicas sum their gradients with NCCL on the devices (each rank "
                                         "has its own GPU)"};
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
  HPCTUNE_ASSIGN(RankGpu rank_gpu, open_rank_gpu());
  auto ctx = gpu::GpuContext::create(rank_gpu.library, 0);
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

  HPCTUNE_ASSIGN(gpu::GpuOptimizer gopt, upload_optimizer(impl->ctx, optimizer, net.num_params()));
  impl->optimizer.emplace(std::move(gopt));

  HPCTUNE_ASSIGN(gpu::GpuDataset train_set, upload_dataset(impl->ctx, train, label_map, options.max_batch));
  HPCTUNE_ASSIGN(gpu::GpuDataset test_set, upload_dataset(impl->ctx, test, label_map, options.max_batch));
  impl->train.emplace(std::move(train_set));
  impl->test.emplace(std::move(test_set));
  HPCTUNE_ASSIGN(impl->probs, impl->ctx.allocate(static_cast<size_t>(options.max_batch * net.classes()) * sizeof(float)));

  impl->description = "training on " + describe_rank_gpu(rank_gpu, options.precision, options.deterministic) +
                      ", data set on the device";
  impl->pci_bus_id = rank_gpu.device.pci_bus_id;
  impl->library.emplace(std::move(rank_gpu.library));
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
