#include "trainers/mlp_trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <numbers>
#include <numeric>

#include "common/rng.h"

namespace hpctune::trainers {

const std::vector<SettingSpec>& mlp_setting_specs() {
  static const std::vector<SettingSpec> specs = {
      {"data", "string", kDefaultDataDir,
       "directory with {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] (IDX, gzipped or plain)"},
      {"standardize", "bool", false, "scale pixels to zero mean and unit variance (training-set statistics)"},
      {"val_fraction", "float", 0.1, "fraction of the (capped) training file held out for validation, in (0, 1)"},
      {"max_train_samples", "int", 0, "use at most this many training-file images, validation included (0 = all)"},
      {"max_test_samples", "int", 0, "evaluate on at most the first this many test images (0 = all)"},
      {"hidden", "int|list[int]", nlohmann::json::array({256}), "hidden layer widths; one int repeats `layers` times"},
      {"layers", "int", nullptr, "number of hidden layers when `hidden` is one int (default 1)"},
      {"activation", "string", "relu", "hidden activation: relu, tanh or sigmoid"},
      {"dropout", "float", 0.0, "dropout probability after every hidden layer, in [0, 1)"},
      {"lr", "float", 0.05, "learning rate, > 0"},
      {"lr_schedule", "string", "cosine", "constant, or cosine: lr * (1 + cos(pi * t / T)) / 2 over the T minibatches"},
      {"momentum", "float", 0.9, "SGD momentum, in [0, 1)"},
      {"nesterov", "bool", false, "Nesterov momentum"},
      {"weight_decay", "float", 0.0, "L2 weight decay on weight matrices (not biases), >= 0"},
      {"batch_size", "int", 128, "minibatch size, >= 1"},
      {"epochs", "int", 10, "training epochs, >= 1"},
  };
  return specs;
}

Result<MlpSettings> parse_mlp_settings(const nlohmann::json& json) {
  SettingsReader r("mlp", json, mlp_setting_specs());
  HPCTUNE_TRY(r.check_known());
  MlpSettings s;
  HPCTUNE_ASSIGN(s.data, r.string("data"));
  if (s.data.empty()) return r.bad("data", r.raw("data"), "a directory");
  HPCTUNE_ASSIGN(s.standardize, r.boolean("standardize"));
  HPCTUNE_ASSIGN(s.val_fraction, r.number("val_fraction", 0.0, 1.0));
  if (s.val_fraction <= 0.0 || s.val_fraction >= 1.0) return r.bad("val_fraction", r.raw("val_fraction"), "in (0, 1)");
  HPCTUNE_ASSIGN(s.max_train_samples, r.integer("max_train_samples", 0));
  HPCTUNE_ASSIGN(s.max_test_samples, r.integer("max_test_samples", 0));

  constexpr int64_t kMaxWidth = 1 << 20;
  const auto& hidden = r.raw("hidden");
  s.hidden.clear();
  if (hidden.is_array()) {
    if (r.has("layers")) {
      HPCTUNE_ASSIGN(int64_t layers, r.integer("layers", 1, 1000));
      if (layers != static_cast<int64_t>(hidden.size())) {
        return r.bad("layers", r.raw("layers"), "absent or the length of `hidden` when `hidden` is a list");
      }
    }
    for (const auto& h : hidden) {
      auto width = r.integer_value("hidden", h, 1, kMaxWidth);
      if (!width.ok()) return r.bad("hidden", hidden, "an int or a list of ints, each in [1, " + std::to_string(kMaxWidth) + "]");
      s.hidden.push_back(*width);
    }
  } else {
    auto width = r.integer_value("hidden", hidden, 1, kMaxWidth);
    if (!width.ok()) return r.bad("hidden", hidden, "an int or a list of ints, each in [1, " + std::to_string(kMaxWidth) + "]");
    int64_t layers = 1;
    if (r.has("layers")) {
      HPCTUNE_ASSIGN(layers, r.integer("layers", 1, 1000));
    }
    s.hidden.assign(static_cast<size_t>(layers), *width);
  }

  HPCTUNE_ASSIGN(std::string activation, r.string("activation"));
  auto act = parse_activation(activation);
  if (!act.ok()) return r.bad("activation", r.raw("activation"), "relu, tanh or sigmoid");
  s.activation = *act;
  HPCTUNE_ASSIGN(s.dropout, r.number("dropout", 0.0, 1.0));
  if (s.dropout >= 1.0) return r.bad("dropout", r.raw("dropout"), "in [0, 1)");
  HPCTUNE_ASSIGN(s.lr, r.number("lr", 0.0));
  if (s.lr <= 0.0) return r.bad("lr", r.raw("lr"), "> 0");
  HPCTUNE_ASSIGN(std::string schedule, r.string("lr_schedule"));
  if (schedule == "constant") s.lr_schedule = LrSchedule::kConstant;
  else if (schedule == "cosine") s.lr_schedule = LrSchedule::kCosine;
  else return r.bad("lr_schedule", r.raw("lr_schedule"), "constant or cosine");
  HPCTUNE_ASSIGN(s.momentum, r.number("momentum", 0.0, 1.0));
  if (s.momentum >= 1.0) return r.bad("momentum", r.raw("momentum"), "in [0, 1)");
  HPCTUNE_ASSIGN(s.nesterov, r.boolean("nesterov"));
  HPCTUNE_ASSIGN(s.weight_decay, r.number("weight_decay", 0.0));
  HPCTUNE_ASSIGN(s.batch_size, r.integer("batch_size", 1, 1 << 20));
  HPCTUNE_ASSIGN(s.epochs, r.integer("epochs", 1, 1 << 20));
  return s;
}

namespace {

// Independent random streams of one trial.
enum Stream : uint64_t { kSplitStream = 1, kInitStream = 2, kShuffleStream = 3, kDropoutStream = 4 };

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void shuffle(std::vector<int64_t>& v, Rng& rng) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng.below(i)]);
}

// Copies the rows `idx` of `d` into a contiguous batch.
void gather(const Dataset& d, const int64_t* idx, int64_t n, float* x, int32_t* y) {
  const size_t f = static_cast<size_t>(d.features());
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(x + static_cast<size_t>(i) * f, d.image(idx[i]), f * sizeof(float));
    y[i] = d.labels[static_cast<size_t>(idx[i])];
  }
}

constexpr int64_t kEvalBatch = 1024;

BatchStats evaluate_indices(Mlp& model, const Dataset& d, const std::vector<int64_t>& idx, std::vector<float>& x,
                            std::vector<int32_t>& y) {
  BatchStats total;
  for (size_t start = 0; start < idx.size(); start += kEvalBatch) {
    const int64_t n = std::min<int64_t>(kEvalBatch, static_cast<int64_t>(idx.size() - start));
    gather(d, idx.data() + start, n, x.data(), y.data());
    total += model.evaluate(x.data(), y.data(), n);
  }
  return total;
}

BatchStats evaluate_prefix(Mlp& model, const Dataset& d, int64_t count) {
  BatchStats total;
  for (int64_t start = 0; start < count; start += kEvalBatch) {
    const int64_t n = std::min(kEvalBatch, count - start);
    total += model.evaluate(d.image(start), d.labels.data() + start, n);
  }
  return total;
}

}  // namespace

Result<TrialResult> train_mlp(const MlpSettings& s, const ImageClassificationData& data, const TrialContext& ctx) {
  const Dataset& train_file = data.train;
  if (train_file.count < 2) return err(Errc::kInvalidArgument, "mlp trainer: the training set needs at least 2 images");
  for (const auto* d : {&data.train, &data.test}) {
    for (int32_t label : d->labels) {
      if (label < 0 || label >= data.num_classes) return err(Errc::kInvalidArgument, "mlp trainer: a label is out of range");
    }
  }

  // Validation split.
  std::vector<int64_t> perm(static_cast<size_t>(train_file.count));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  Rng split_rng(derive_seed(ctx.seed, kSplitStream));
  shuffle(perm, split_rng);
  const int64_t pool = s.max_train_samples > 0 ? std::min(s.max_train_samples, train_file.count) : train_file.count;
  const int64_t n_val = std::max<int64_t>(1, std::llround(s.val_fraction * static_cast<double>(pool)));
  if (n_val >= pool) {
    return err(Errc::kInvalidArgument, "mlp trainer: setting 'val_fraction' = " + std::to_string(s.val_fraction) +
                                           " leaves no training images out of " + std::to_string(pool));
  }
  std::vector<int64_t> val_idx(perm.begin(), perm.begin() + n_val);
  std::vector<int64_t> train_idx(perm.begin() + n_val, perm.begin() + pool);
  std::sort(val_idx.begin(), val_idx.end());  // for memory locality; evaluation order is fixed either way
  const int64_t n_train = static_cast<int64_t>(train_idx.size());
  const int64_t n_test = s.max_test_samples > 0 ? std::min(s.max_test_samples, data.test.count) : data.test.count;

  MlpShape shape;
  shape.inputs = train_file.features();
  shape.hidden = s.hidden;
  shape.outputs = data.num_classes;
  shape.activation = s.activation;
  shape.dropout = static_cast<float>(s.dropout);
  HPCTUNE_ASSIGN(Mlp model, Mlp::create(shape));
  Rng init_rng(derive_seed(ctx.seed, kInitStream));
  model.init(init_rng);
  SgdMomentum optimizer(model.num_params(), SgdOptions{s.momentum, s.nesterov, s.weight_decay});
  Rng shuffle_rng(derive_seed(ctx.seed, kShuffleStream));
  Rng dropout_rng(derive_seed(ctx.seed, kDropoutStream));

  blas_select_kernels();
  blas_set_threads(ctx.threads);

  const int64_t batch = std::min(s.batch_size, n_train);
  const size_t features = static_cast<size_t>(train_file.features());
  const int64_t buffer_rows = std::max(batch, kEvalBatch);
  std::vector<float> x(static_cast<size_t>(buffer_rows) * features);
  std::vector<int32_t> y(static_cast<size_t>(buffer_rows));
  const int64_t batches_per_epoch = (n_train + batch - 1) / batch;
  const double total_batches = static_cast<double>(batches_per_epoch * s.epochs);
  int64_t global_batch = 0;
  auto lr_at = [&](int64_t t) -> float {
    if (s.lr_schedule == LrSchedule::kCosine) {
      return static_cast<float>(s.lr * 0.5 * (1.0 + std::cos(std::numbers::pi * static_cast<double>(t) / total_batches)));
    }
    return static_cast<float>(s.lr);
  };

  TrialResult result;
  double train_seconds = 0.0;
  int64_t images_trained = 0;
  protocol::Metrics last;
  auto stopped = [&]() -> Result<TrialResult> {
    result.stopped = true;
    result.metrics = last;
    result.metrics["train_seconds"] = train_seconds;
    return result;
  };

  for (int64_t epoch = 1; epoch <= s.epochs; ++epoch) {
    if (ctx.stop_requested()) return stopped();
    const auto epoch_start = Clock::now();
    shuffle(train_idx, shuffle_rng);
    BatchStats train_stats;
    int64_t batch_no = 0;
    for (int64_t start = 0; start < n_train; start += batch, ++batch_no) {
      if (batch_no % MlpTrainer::kStopPollBatches == 0 && batch_no > 0 && ctx.stop_requested()) {
        train_seconds += seconds_since(epoch_start);
        return stopped();
      }
      const int64_t n = std::min(batch, n_train - start);
      gather(train_file, train_idx.data() + start, n, x.data(), y.data());
      const BatchStats b = model.forward_backward(x.data(), y.data(), n, 1.0f / static_cast<float>(n), dropout_rng);
      if (!std::isfinite(b.loss_sum)) {
        return err(Errc::kFailed, "mlp trainer: training diverged (loss is not finite in epoch " + std::to_string(epoch) +
                                      ", batch " + std::to_string(batch_no + 1) + "); try a smaller 'lr'");
      }
      optimizer.step(model.params(), model.grads(), model.blocks(), lr_at(global_batch++));
      train_stats += b;
    }
    const double epoch_train_seconds = seconds_since(epoch_start);
    train_seconds += epoch_train_seconds;
    images_trained += n_train;

    const BatchStats val = evaluate_indices(model, train_file, val_idx, x, y);
    last = {{"val_loss", val.mean_loss()},
            {"val_accuracy", val.accuracy()},
            {"train_loss", train_stats.mean_loss()},
            {"train_accuracy", train_stats.accuracy()},
            {"epoch_seconds", seconds_since(epoch_start)}};
    if (!std::isfinite(val.loss_sum)) {
      return err(Errc::kFailed, "mlp trainer: training diverged (validation loss is not finite after epoch " +
                                    std::to_string(epoch) + "); try a smaller 'lr'");
    }
    result.step = epoch;
    ctx.report(epoch, last);
  }
  if (ctx.stop_requested()) return stopped();

  const BatchStats test = evaluate_prefix(model, data.test, n_test);
  result.metrics = {{"val_loss", last["val_loss"]},
                    {"val_accuracy", last["val_accuracy"]},
                    {"train_loss", last["train_loss"]},
                    {"test_loss", test.mean_loss()},
                    {"test_accuracy", test.accuracy()},
                    {"train_seconds", train_seconds},
                    {"images_per_second", train_seconds > 0 ? static_cast<double>(images_trained) / train_seconds : 0.0}};
  return result;
}

Result<TrialResult> MlpTrainer::run(const TrialContext& ctx) {
  HPCTUNE_ASSIGN(MlpSettings s, parse_mlp_settings(ctx.settings()));
  std::error_code ec;
  if (!std::filesystem::is_directory(s.data, ec)) {
    return err(Errc::kInvalidArgument, "mlp trainer: setting 'data' = \"" + s.data + "\": no such directory");
  }
  DatasetOptions options;
  options.standardize = s.standardize;
  auto data = datasets_ != nullptr ? datasets_->get(s.data, options) : load_idx_dataset(s.data, options);
  if (!data.ok()) return std::move(data).error().with_context("while loading the dataset of setting 'data' = \"" + s.data + "\"");
  return train_mlp(s, **data, ctx);
}

}  // namespace hpctune::trainers
