// ClassifierGpuPipeline (classifier_gpu_pipeline.h): one stage of a GPipe pipeline on this rank's
// GPU, its transfers to the neighbouring stages (NCCL or host-staged) and its optimizer step.
#include "trainers/classifier_gpu_pipeline.h"

#include <algorithm>
#include <optional>

#include "gpu/gpu_context.h"
#include "gpu/gpu_network.h"
#include "gpu/nccl_communicator.h"
#include "trainers/classifier_gpu_device.h"
#include "trainers/pipeline_partition.h"

namespace hpctune::trainers {

struct ClassifierGpuPipeline::Impl {
  gpu::GpuContext ctx;
  std::optional<gpu::GpuNetwork> net;
  std::optional<gpu::GpuOptimizer> optimizer;
  std::optional<gpu::GpuDataset> train, test;
  gpu::DeviceBuffer inputs;  // a later stage: the previous stage's activations of the micro-batches
  gpu::DeviceBuffer probs;   // the last stage: the probabilities of an evaluation batch
  collectives::TrainerGroup* group = nullptr;
  int S = 1, s = 0, D = 1, d = 0;  // stages, this stage, replicas, this replica
  int64_t classes = 0, micro_batches = 1, in_size = 0, out_size = 0;
  std::string description;
  std::vector<float> host;  // host-staged transfers and gradient sums
  std::optional<gpu::GpuLibrary> library;
  std::string pci_bus_id;
  // The stages' transfers; declared last, so destroyed first (before the memory it moves, and ctx).
  std::optional<gpu::NcclCommunicator> nccl;

  explicit Impl(gpu::GpuContext c) : ctx(std::move(c)) {}
  bool first() const { return s == 0; }
  bool last() const { return s == S - 1; }

  // Sends `count` floats of device memory to model rank `to` of this replica (tag: the CPU engine's,
  // 2k forward and 2k + 1 backward), or receives them from `from`.
  Status send(int to, const float* d_data, size_t count, int tag) {
    if (nccl) return exchange({to, true, const_cast<float*>(d_data), count});
    host.resize(count);
    HPCTUNE_TRY(ctx.check(ctx.api().copy_to_host(ctx.raw(), host.data(), d_data, count * sizeof(float)), "activations to the host"));
    return group->send_to_model_rank(to, std::span<const float>(host.data(), count), tag);
  }
  Status recv(int from, float* d_data, size_t count, int tag) {
    if (nccl) return exchange({from, false, d_data, count});
    host.resize(count);
    HPCTUNE_TRY(group->recv_from_model_rank(from, std::span<float>(host.data(), count), tag));
    return ctx.check(ctx.api().copy_to_device(ctx.raw(), d_data, host.data(), count * sizeof(float)), "activations to the device");
  }
  // One NCCL transfer with the peer's group rank (rank = data rank x stages + model rank) under the
  // group's deadline; a failure abandons the group.
  Status exchange(gpu::NcclCommunicator::PeerTransfer t) {
    t.peer = d * S + t.peer;
    Status done = nccl->exchange(std::span<const gpu::NcclCommunicator::PeerTransfer>(&t, 1),
                                 gpu::NcclCommunicator::Clock::now() + group->timeout());
    if (done.ok()) return done;
    group->abandon();
    return std::move(done).error().with_context("device: gpu: a pipeline transfer (NCCL) with stage " +
                                                std::to_string(t.peer % S));
  }

  // The micro-batches' forward passes over this replica's n rows already gathered (stage 0 reads the
  // images, the last stage the labels): what enters micro-batch k and what leaves it.
  const float* input_of(const gpu::GpuDataset& data, int64_t p0) const {
    return first() ? data.batch_x() + p0 * in_size : inputs.as<const float>() + p0 * in_size;
  }
  Status forward(const gpu::GpuDataset& data, int64_t n, bool train, uint64_t seed, uint64_t offset, float* d_probs) {
    const int64_t m = std::min(micro_batches, n);
    for (int64_t k = 0; k < m; ++k) {
      const auto [p0, p1] = part_rows(n, m, k);
      const size_t nk = static_cast<size_t>(p1 - p0);
      if (!first()) HPCTUNE_TRY(recv(s - 1, inputs.as<float>() + p0 * in_size, nk * size_t(in_size), static_cast<int>(2 * k)));
      HPCTUNE_ASSIGN(const float* out, net->stage_forward(input_of(data, p0), p0, p1 - p0, train, seed, offset + uint64_t(k)));
      if (!last()) HPCTUNE_TRY(send(s + 1, out, nk * size_t(out_size), static_cast<int>(2 * k)));
      else if (!train) HPCTUNE_TRY(net->stage_loss(data.batch_labels() + p0, p0, p1 - p0, false, 0.f,
                                                   d_probs != nullptr ? d_probs + p0 * classes : nullptr));
    }
    return Status::Ok();
  }
  // Then every micro-batch backward in reverse order: the last stage from its loss, the others from
  // the next stage's input gradient; every stage after the first sends its own back.
  Status backward(const gpu::GpuDataset& data, int64_t n, float scale, uint64_t seed, uint64_t offset) {
    const int64_t m = std::min(micro_batches, n);
    for (int64_t k = m - 1; k >= 0; --k) {
      const auto [p0, p1] = part_rows(n, m, k);
      const size_t nk = static_cast<size_t>(p1 - p0);
      if (last()) HPCTUNE_TRY(net->stage_loss(data.batch_labels() + p0, p0, p1 - p0, true, scale, nullptr));
      else HPCTUNE_TRY(recv(s + 1, net->stage_delta(), nk * size_t(out_size), static_cast<int>(2 * k + 1)));
      HPCTUNE_ASSIGN(const float* din, net->stage_backward(input_of(data, p0), p0, p1 - p0, seed, offset + uint64_t(k)));
      if (!first()) HPCTUNE_TRY(send(s - 1, din, nk * size_t(in_size), static_cast<int>(2 * k + 1)));
    }
    return Status::Ok();
  }
  // Each stage's gradients summed over the replicas of that stage (a sum: scaled by 1 / global batch).
  Status sum_over_replicas() {
    if (D <= 1) return Status::Ok();
    const size_t count = net->num_params();
    host.resize(count);
    HPCTUNE_TRY(ctx.check(ctx.api().copy_to_host(ctx.raw(), host.data(), net->d_grads(), count * sizeof(float)), "gradients to the host"));
    HPCTUNE_TRY(group->sum_gradients(std::span<float>(host.data(), count)));
    return ctx.check(ctx.api().copy_to_device(ctx.raw(), net->d_grads(), host.data(), count * sizeof(float)), "gradients to the device");
  }
  Result<nn::BatchStats> summed_stats() {
    HPCTUNE_ASSIGN(gpu::GpuStepStats g, net->take_stats());
    double v[3] = {g.loss_sum, static_cast<double>(g.correct), static_cast<double>(g.count)};
    HPCTUNE_TRY(group->sum(v));
    return nn::BatchStats{v[0], static_cast<int64_t>(v[1] + 0.5), static_cast<int64_t>(v[2] + 0.5)};
  }
};

ClassifierGpuPipeline::ClassifierGpuPipeline(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ClassifierGpuPipeline::~ClassifierGpuPipeline() = default;
const std::string& ClassifierGpuPipeline::description() const noexcept { return impl_->description; }
bool ClassifierGpuPipeline::nccl() const noexcept { return impl_->nccl.has_value(); }

Result<std::unique_ptr<ClassifierGpuPipeline>> ClassifierGpuPipeline::create(
    const nn::Network& net, std::pair<size_t, size_t> layers, std::span<const float> stage_params,
    const nn::Optimizer& optimizer, const Dataset& train, const Dataset& test, const std::vector<int32_t>& label_map,
    collectives::TrainerGroup& group, const ClassifierGpuOptions& options, int64_t micro_batches) {
  if (micro_batches < 1) return err(Errc::kInvalidArgument, "device: gpu: a pipeline needs 1 or more micro-batches");
  HPCTUNE_ASSIGN(gpu::GpuPrecision precision, gpu::parse_gpu_precision(options.precision));
  HPCTUNE_ASSIGN(std::vector<gpu::GpuLayerDesc> all, gpu_layers_of(net, options.specs));
  if (layers.first >= layers.second || layers.second > all.size())
    return err(Errc::kInvalidArgument, "device: gpu: a stage of layers [" + std::to_string(layers.first) + ", " +
                                           std::to_string(layers.second) + ") of " + std::to_string(all.size()));
  HPCTUNE_ASSIGN(RankGpu rank_gpu, open_rank_gpu());
  auto ctx = gpu::GpuContext::create(rank_gpu.library, 0);
  if (!ctx.ok()) return std::move(ctx).error().with_context("device: gpu");
  auto impl = std::make_unique<Impl>(std::move(ctx).value());
  Impl& m = *impl;
  m.group = &group;
  m.S = group.model_size(), m.s = group.model_rank(), m.D = group.data_size(), m.d = group.data_rank();
  m.classes = net.classes();
  m.micro_batches = micro_batches;

  gpu::GpuNetworkOptions net_options;
  net_options.precision = precision;
  net_options.deterministic = options.deterministic;
  net_options.max_batch = options.max_batch;
  net_options.first_stage = m.first();
  net_options.last_stage = m.last();
  std::vector<gpu::GpuLayerDesc> mine(all.begin() + static_cast<long>(layers.first), all.begin() + static_cast<long>(layers.second));
  auto gnet = gpu::GpuNetwork::create(m.ctx, std::move(mine), m.last() ? net.classes() : 0, stage_params, net_options);
  if (!gnet.ok()) return std::move(gnet).error().with_context("device: gpu: the network's stage " + std::to_string(m.s));
  m.net.emplace(std::move(gnet).value());
  m.in_size = m.net->input_size(), m.out_size = m.net->output_size();
  HPCTUNE_ASSIGN(gpu::GpuOptimizer gopt, upload_optimizer(m.ctx, optimizer, stage_params.size()));
  m.optimizer.emplace(std::move(gopt));
  HPCTUNE_ASSIGN(gpu::GpuDataset train_set, upload_dataset(m.ctx, train, label_map, options.max_batch));
  HPCTUNE_ASSIGN(gpu::GpuDataset test_set, upload_dataset(m.ctx, test, label_map, options.max_batch));
  m.train.emplace(std::move(train_set));
  m.test.emplace(std::move(test_set));
  if (!m.first()) {
    HPCTUNE_ASSIGN(m.inputs, m.ctx.allocate(static_cast<size_t>(options.max_batch * m.in_size) * sizeof(float)));
  }
  if (m.last()) {
    HPCTUNE_ASSIGN(m.probs, m.ctx.allocate(static_cast<size_t>(options.max_batch * m.classes) * sizeof(float)));
  }

  m.description = "training stage " + std::to_string(m.s) + " of " + std::to_string(m.S) + " (layers [" +
                  std::to_string(layers.first) + ", " + std::to_string(layers.second) + "), " +
                  std::to_string(micro_batches) + " micro-batches) on " +
                  describe_rank_gpu(rank_gpu, options.precision, options.deterministic) + ", data set on the device";
  m.pci_bus_id = rank_gpu.device.pci_bus_id;
  m.library.emplace(std::move(rank_gpu.library));
  return std::unique_ptr<ClassifierGpuPipeline>(new ClassifierGpuPipeline(std::move(impl)));
}

Status ClassifierGpuPipeline::join_group() {
  Impl& m = *impl_;
  if (m.nccl) return Status::Ok();
  HPCTUNE_ASSIGN(NcclJoin join, join_nccl(*m.library, m.ctx, *m.group, m.pci_bus_id));
  m.nccl = std::move(join.comm);
  m.description += "; the " + std::to_string(m.S) + " stages pass activations and gradients " +
                   (m.nccl ? std::string("with NCCL send/receive on the devices (each rank has its own GPU)")
                           : "host-staged (the group's messages, not NCCL): " + join.why_not);
  if (m.D > 1)
    m.description += "; " + std::to_string(m.D) + " replicas of the pipeline sum each stage's gradients host-staged";
  return Status::Ok();
}

Status ClassifierGpuPipeline::train_batch(std::span<const int64_t> rows, const std::vector<nn::ParamBlock>& blocks,
                                          float lr, uint64_t dropout_seed, uint64_t dropout_offset) {
  Impl& m = *impl_;
  const int64_t global = static_cast<int64_t>(rows.size());
  const auto [b0, b1] = part_rows(global, m.D, m.d);
  HPCTUNE_TRY(m.net->zero_grads());
  if (b1 > b0) {
    HPCTUNE_TRY(m.train->gather(rows.subspan(static_cast<size_t>(b0), static_cast<size_t>(b1 - b0))));
    HPCTUNE_TRY(m.forward(*m.train, b1 - b0, true, dropout_seed, dropout_offset, nullptr));
    HPCTUNE_TRY(m.backward(*m.train, b1 - b0, 1.0f / static_cast<float>(global), dropout_seed, dropout_offset));
  }
  HPCTUNE_TRY(m.sum_over_replicas());
  std::vector<gpu::GpuParamBlock> gblocks;
  gblocks.reserve(blocks.size());
  for (const nn::ParamBlock& b : blocks) gblocks.push_back({b.offset, b.size, b.decay, b.frozen, b.lr_scale});
  return m.optimizer->step(m.net->d_params(), m.net->d_grads(), gblocks, lr);
}

Result<nn::BatchStats> ClassifierGpuPipeline::take_stats() { return impl_->summed_stats(); }

Result<nn::BatchStats> ClassifierGpuPipeline::evaluate(bool test, std::span<const int64_t> rows, float* probs) {
  Impl& m = *impl_;
  gpu::GpuDataset& data = test ? *m.test : *m.train;
  HPCTUNE_ASSIGN(const bool want_probs, m.group->broadcast_flag(probs != nullptr));
  HPCTUNE_ASSIGN(const gpu::GpuStepStats left, m.net->take_stats());
  if (left.count != 0) {
    return err(Errc::kInternal, "device: gpu: " + std::to_string(left.count) +
                                    " training images' stats were not taken before an evaluation");
  }
  const int64_t batch = static_cast<int64_t>(rows.size());
  const auto [b0, b1] = part_rows(batch, m.D, m.d);
  const bool local_probs = want_probs && m.last();
  if (b1 > b0) {
    HPCTUNE_TRY(data.gather(rows.subspan(static_cast<size_t>(b0), static_cast<size_t>(b1 - b0))));
    HPCTUNE_TRY(m.forward(data, b1 - b0, false, 0, 0, local_probs ? m.probs.as<float>() : nullptr));
  }
  HPCTUNE_ASSIGN(nn::BatchStats stats, m.summed_stats());
  if (!want_probs) return stats;
  // Gathered as a sum: every row is written by exactly one rank (the last stage of its replica).
  std::vector<double> all(static_cast<size_t>(batch * m.classes), 0.0);
  if (local_probs && b1 > b0) {
    std::vector<float> mine(static_cast<size_t>((b1 - b0) * m.classes));
    HPCTUNE_TRY(m.ctx.check(m.ctx.api().copy_to_host(m.ctx.raw(), mine.data(), m.probs.data(), mine.size() * sizeof(float)),
                            "probabilities to the host"));
    std::copy(mine.begin(), mine.end(), all.begin() + b0 * m.classes);
  }
  HPCTUNE_TRY(m.group->sum(all));
  if (probs != nullptr) std::transform(all.begin(), all.end(), probs, [](double v) { return static_cast<float>(v); });
  return stats;
}

Status ClassifierGpuPipeline::download(std::span<float> stage_params, nn::Optimizer& optimizer) {
  HPCTUNE_ASSIGN(std::vector<float> params, impl_->net->params());
  if (params.size() != stage_params.size()) return err(Errc::kInternal, "device: gpu: the stage's parameter count changed");
  std::copy(params.begin(), params.end(), stage_params.begin());
  HPCTUNE_ASSIGN(std::vector<std::vector<float>> buffers, impl_->optimizer->buffers());
  return optimizer.set_state(nn::OptimizerState{impl_->optimizer->steps(), std::move(buffers)});
}

}  // namespace hpctune::trainers
