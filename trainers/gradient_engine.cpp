// make_gradient_engine and the multi-rank engine: data parallelism, the GPipe pipeline, and both
// at once (gradient_engine.h). One class covers every layout: a data replica is a pipeline of
// model_size stages (one stage when model_size is 1).
#include "trainers/gradient_engine.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <string>

#include "trainers/pipeline_partition.h"

namespace hpctune::trainers {

double layer_cost(const nn::Layer& layer) {
  const nn::Shape out = layer.output_shape();
  return static_cast<double>(layer.num_params()) * static_cast<double>(out.h * out.w) +
         static_cast<double>(out.size());
}

Result<std::vector<size_t>> pipeline_stage_bounds(const nn::Network& network, int stages) {
  const size_t n = network.num_layers();
  if (stages < 1 || static_cast<size_t>(stages) > n) {
    return err(Errc::kInvalidArgument, "a pipeline of " + std::to_string(stages) + " model ranks cannot split a network of " +
                                           std::to_string(n) + " layers (each stage needs at least one layer)");
  }
  std::vector<double> prefix(n + 1, 0.0);
  for (size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + layer_cost(network.layer(i));
  const size_t S = static_cast<size_t>(stages);
  const double inf = std::numeric_limits<double>::infinity();
  // best[s][i]: the smallest largest-stage cost of the first i layers in s stages; cut[s][i] where
  // the last of those stages starts.
  std::vector<std::vector<double>> best(S + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<size_t>> cut(S + 1, std::vector<size_t>(n + 1, 0));
  best[0][0] = 0.0;
  for (size_t s = 1; s <= S; ++s) {
    for (size_t i = s; i <= n; ++i) {
      for (size_t j = s - 1; j < i; ++j) {
        const double cost = std::max(best[s - 1][j], prefix[i] - prefix[j]);
        if (cost < best[s][i]) best[s][i] = cost, cut[s][i] = j;
      }
    }
  }
  std::vector<size_t> bounds(S + 1, 0);
  bounds[S] = n;
  for (size_t s = S; s >= 1; --s) bounds[s - 1] = cut[s][bounds[s]];
  return bounds;
}

std::pair<int64_t, int64_t> part_rows(int64_t count, int64_t parts, int64_t index) {
  return {count * index / parts, count * (index + 1) / parts};
}

namespace {

class GroupEngine final : public GradientEngine {
 public:
  GroupEngine(nn::Network& network, collectives::TrainerGroup& group, size_t first, size_t last, int64_t micro_batches,
              bool local_gradients, std::function<void(double)> after_compute)
      : net_(network), group_(group), first_(first), last_(last), micro_batches_(micro_batches),
        local_gradients_(local_gradients), after_compute_(std::move(after_compute)) {
    std::tie(offset_, count_) = net_.param_range(first_, last_);
    for (const nn::ParamBlock& b : net_.blocks()) {
      if (b.offset >= offset_ && b.offset + b.size <= offset_ + count_) {
        nn::ParamBlock local = b;  // keeps decay and frozen
        local.offset -= offset_;
        blocks_.push_back(local);
      }
    }
    in_size_ = net_.layer(first_).input_shape().size();
    out_size_ = net_.layer(last_ - 1).output_shape().size();
  }

  std::span<float> params() override { return net_.params().subspan(offset_, count_); }
  std::pair<size_t, size_t> layer_range() const override { return {first_, last_}; }
  std::span<float> grads() override { return net_.grads().subspan(offset_, count_); }
  const std::vector<nn::ParamBlock>& blocks() const override { return blocks_; }

  Result<nn::BatchStats> train_batch(const float* x, const int32_t* labels, int64_t global_batch, Rng& dropout_rng) override {
    const int D = group_.data_size();
    const auto [b0, b1] = part_rows(global_batch, D, group_.data_rank());
    const int64_t n = b1 - b0;
    // The loop seeds dropout_rng per rank (classifier_training.h), so masks differ across ranks.
    Rng& rng = dropout_rng;
    const float scale = 1.0f / static_cast<float>(global_batch);
    const auto t0 = std::chrono::steady_clock::now();
    net_.zero_grads();
    nn::BatchStats stats;
    if (group_.model_size() == 1) {
      if (n > 0) stats = net_.forward_backward(x + b0 * in_size_, labels + b0, n, scale, rng, /*accumulate=*/true);
    } else {
      HPCTUNE_ASSIGN(stats, pipeline(x + b0 * in_size_, labels + b0, n, scale, &rng, /*train=*/true, nullptr));
    }
    if (after_compute_) after_compute_(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (local_gradients_) return stats;
    if (D > 1) HPCTUNE_TRY(group_.sum_gradients(grads()));
    return sum_stats(stats);
  }

  Result<nn::BatchStats> evaluate(const float* x, const int32_t* labels, int64_t batch, float* probs) override {
    HPCTUNE_ASSIGN(const bool want_probs, group_.broadcast_flag(probs != nullptr));
    const auto [b0, b1] = part_rows(batch, group_.data_size(), group_.data_rank());
    const int64_t n = b1 - b0;
    const int64_t classes = net_.classes();
    const bool last_stage = group_.model_rank() == group_.model_size() - 1;
    std::vector<float> local(want_probs && last_stage ? static_cast<size_t>(n * classes) : 0);
    float* local_probs = local.empty() ? nullptr : local.data();
    nn::BatchStats stats;
    if (group_.model_size() == 1) {
      if (n > 0) stats = net_.evaluate(x + b0 * in_size_, labels + b0, n, local_probs);
    } else {
      HPCTUNE_ASSIGN(stats, pipeline(x + b0 * in_size_, labels + b0, n, 0.0f, nullptr, /*train=*/false, local_probs));
    }
    if (want_probs) {
      // Gathered as a sum: every row is written by exactly one rank (the last stage of its replica).
      std::vector<double> all(static_cast<size_t>(batch * classes), 0.0);
      for (size_t i = 0; i < local.size(); ++i) all[static_cast<size_t>(b0 * classes) + i] = local[i];
      HPCTUNE_TRY(group_.sum(all));
      if (probs != nullptr) {
        for (size_t i = 0; i < all.size(); ++i) probs[i] = static_cast<float>(all[i]);
      }
    }
    return sum_stats(stats);
  }

 private:
  Result<nn::BatchStats> sum_stats(const nn::BatchStats& stats) {
    double values[3] = {stats.loss_sum, static_cast<double>(stats.correct), static_cast<double>(stats.count)};
    HPCTUNE_TRY(group_.sum(values));
    nn::BatchStats total;
    total.loss_sum = values[0];
    total.correct = static_cast<int64_t>(values[1] + 0.5);
    total.count = static_cast<int64_t>(values[2] + 0.5);
    return total;
  }

  // GPipe over this replica's rows: every micro-batch forward through the stages, then (training)
  // every micro-batch backward in reverse order. Forward activations travel with tag 2k, input
  // gradients with tag 2k + 1. Only the last stage sees labels; the stats of the other stages are
  // zero. `probs` (last stage, evaluation) receives [n, classes].
  Result<nn::BatchStats> pipeline(const float* x, const int32_t* labels, int64_t n, float scale, Rng* rng, bool train,
                              float* probs) {
    nn::BatchStats stats;
    if (n <= 0) return stats;
    const int s = group_.model_rank(), S = group_.model_size();
    const int64_t m = std::min<int64_t>(micro_batches_, n);
    const int64_t classes = net_.classes();
    const size_t passes_needed = train ? static_cast<size_t>(m) : 1;
    if (passes_.size() < passes_needed) passes_.resize(passes_needed);
    inputs_.resize(static_cast<size_t>(m));
    dlogits_.resize(static_cast<size_t>(m));
    for (int64_t k = 0; k < m; ++k) {
      const auto [p0, p1] = part_rows(n, m, k);
      const int64_t nk = p1 - p0;
      nn::Network::Pass& pass = passes_[train ? static_cast<size_t>(k) : 0];
      const float* in = x + p0 * in_size_;
      if (s > 0) {
        auto& buf = inputs_[static_cast<size_t>(k)];
        buf.resize(static_cast<size_t>(nk * in_size_));
        HPCTUNE_TRY(group_.recv_from_model_rank(s - 1, buf, static_cast<int>(2 * k)));
        in = buf.data();
      }
      net_.forward(first_, last_, in, nk, train, rng, pass);
      if (s < S - 1) {
        HPCTUNE_TRY(group_.send_to_model_rank(
            s + 1, std::span<const float>(pass.output(), static_cast<size_t>(nk * out_size_)), static_cast<int>(2 * k)));
      } else if (train) {
        auto& dl = dlogits_[static_cast<size_t>(k)];
        dl.resize(static_cast<size_t>(nk * classes));
        stats += nn::softmax_cross_entropy(pass.output(), labels + p0, nk, classes, scale, dl.data(), nullptr);
      } else {
        stats += nn::softmax_cross_entropy(pass.output(), labels + p0, nk, classes, 0.0f, nullptr,
                                       probs ? probs + p0 * classes : nullptr);
      }
    }
    if (!train) return stats;
    for (int64_t k = m - 1; k >= 0; --k) {
      const auto [p0, p1] = part_rows(n, m, k);
      const int64_t nk = p1 - p0;
      const float* dy = nullptr;
      if (s == S - 1) {
        dy = dlogits_[static_cast<size_t>(k)].data();
      } else {
        dy_.resize(static_cast<size_t>(nk * out_size_));
        HPCTUNE_TRY(group_.recv_from_model_rank(s + 1, dy_, static_cast<int>(2 * k + 1)));
        dy = dy_.data();
      }
      float* dx = nullptr;
      if (s > 0) {
        dx_.resize(static_cast<size_t>(nk * in_size_));
        dx = dx_.data();
      }
      net_.backward(dy, dx, passes_[static_cast<size_t>(k)]);
      if (s > 0) {
        HPCTUNE_TRY(group_.send_to_model_rank(s - 1, std::span<const float>(dx, static_cast<size_t>(nk * in_size_)),
                                              static_cast<int>(2 * k + 1)));
      }
    }
    return stats;
  }

  nn::Network& net_;
  collectives::TrainerGroup& group_;
  size_t first_, last_;
  int64_t micro_batches_;
  bool local_gradients_;
  std::function<void(double)> after_compute_;
  size_t offset_ = 0, count_ = 0;
  int64_t in_size_ = 0, out_size_ = 0;
  std::vector<nn::ParamBlock> blocks_;
  // Reused across batches: one pass per micro-batch in flight, received inputs, loss gradients.
  std::vector<nn::Network::Pass> passes_;
  std::vector<std::vector<float>> inputs_, dlogits_;
  std::vector<float> dy_, dx_;
};

}  // namespace

Result<std::unique_ptr<GradientEngine>> make_gradient_engine(nn::Network& network, collectives::TrainerGroup* group,
                                                             const EngineOptions& options) {
  if (group == nullptr || group->size() == 1) return std::unique_ptr<GradientEngine>(std::make_unique<LocalEngine>(network));
  if (options.micro_batches < 0) return err(Errc::kInvalidArgument, "micro_batches must be >= 0");
  HPCTUNE_ASSIGN(auto bounds, pipeline_stage_bounds(network, group->model_size()));
  const size_t s = static_cast<size_t>(group->model_rank());
  const int64_t micro = options.micro_batches > 0 ? options.micro_batches : 2 * group->model_size();
  if (options.local_gradients && (group->model_size() != 1 || group->data_size() < 2)) {
    return err(Errc::kInvalidArgument, "local gradients need 2 or more data replicas and no pipeline");
  }
  if (group->data_size() > 1 && group->model_size() == 1 && !options.local_gradients) {
    // Gradients computed straight into memory the allreduce reads (the node's shared memory with
    // `hierarchical`), so that summing them copies nothing in or out.
    HPCTUNE_ASSIGN(collectives::TrainerGroup::GradientBuffer buffer, group->gradient_buffer(network.num_params()));
    if (!buffer.data.empty()) network.use_gradient_storage(buffer.data, std::move(buffer.owner));
  }
  return std::unique_ptr<GradientEngine>(std::make_unique<GroupEngine>(network, *group, bounds[s], bounds[s + 1], micro,
                                                                                options.local_gradients, options.after_compute));
}

}  // namespace hpctune::trainers
