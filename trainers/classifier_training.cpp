#include "trainers/classifier_training.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numbers>
#include <numeric>

#include "common/rng.h"
#include "nn/blas.h"
#include "nn/checkpoint.h"
#include "nn/denormals.h"
#include "nn/layers.h"  // dnnl_set_threads
#include "collectives/trainer_group.h"

namespace hpctune::trainers {

// Types, bounds and choices are checked by the reader against the declarations
// (classifier_settings.cpp); what is left here is what a declaration cannot say.
Status parse_classifier_common(const SettingsReader& r, ClassifierSettings& s) {
  HPCTUNE_ASSIGN(s.data, r.string("data"));
  if (s.data.empty()) return r.bad("data", r.raw("data"), "a directory");
  HPCTUNE_ASSIGN(s.standardize, r.boolean("standardize"));
  HPCTUNE_ASSIGN(s.val_fraction, r.number("val_fraction"));
  HPCTUNE_ASSIGN(const nlohmann::json data_seed, r.value("data_seed"));
  s.data_seed = data_seed.get<uint64_t>();  // >= 0 by its declaration; up to 2^64 - 1, as a campaign seed
  HPCTUNE_ASSIGN(s.max_train_samples, r.integer("max_train_samples"));
  HPCTUNE_ASSIGN(s.max_test_samples, r.integer("max_test_samples"));
  HPCTUNE_ASSIGN(std::string optimizer, r.string("optimizer"));
  auto kind = nn::parse_optimizer_kind(optimizer);
  if (!kind.ok()) return r.bad("optimizer", r.raw("optimizer"), kind.error().message());
  s.optimizer.kind = *kind;
  HPCTUNE_ASSIGN(s.lr, r.number("lr"));
  HPCTUNE_ASSIGN(std::string schedule, r.string("lr_schedule"));
  s.lr_schedule = schedule == "constant" ? LrSchedule::kConstant : LrSchedule::kCosine;
  HPCTUNE_ASSIGN(std::string scaling, r.string("lr_scaling"));
  s.lr_scaling = scaling == "linear" ? LrScaling::kLinear : LrScaling::kNone;
  HPCTUNE_ASSIGN(s.base_batch_size, r.integer("base_batch_size"));
  HPCTUNE_ASSIGN(s.warmup_epochs, r.number("warmup_epochs"));
  HPCTUNE_ASSIGN(s.optimizer.momentum, r.number("momentum"));
  HPCTUNE_ASSIGN(s.optimizer.nesterov, r.boolean("nesterov"));
  HPCTUNE_ASSIGN(s.optimizer.beta1, r.number("beta1"));
  HPCTUNE_ASSIGN(s.optimizer.beta2, r.number("beta2"));
  HPCTUNE_ASSIGN(s.optimizer.eps, r.number("eps"));
  HPCTUNE_ASSIGN(s.optimizer.weight_decay, r.number("weight_decay"));
  HPCTUNE_ASSIGN(s.batch_size, r.integer("batch_size"));
  HPCTUNE_ASSIGN(s.epochs, r.integer("epochs"));
  HPCTUNE_ASSIGN(s.checkpoint, r.boolean("checkpoint"));
  HPCTUNE_ASSIGN(s.micro_batches, r.integer("micro_batches"));
  HPCTUNE_ASSIGN(s.save_predictions, r.boolean("save_predictions"));
  return Status::Ok();
}

double LrPlan::at(int64_t t) const noexcept {
  if (t < warmup) return start + (peak - start) * static_cast<double>(t) / static_cast<double>(warmup);
  if (schedule == LrSchedule::kConstant) return peak;
  const double span = static_cast<double>(std::max<int64_t>(1, total - warmup));
  return peak * 0.5 * (1.0 + std::cos(std::numbers::pi * static_cast<double>(t - warmup) / span));
}

LrPlan make_lr_plan(const ClassifierSettings& s, int64_t batches_per_epoch) noexcept {
  LrPlan p;
  p.peak = s.lr;
  if (s.lr_scaling == LrScaling::kLinear) {
    p.peak = s.lr * static_cast<double>(s.batch_size) / static_cast<double>(s.base_batch_size);
  }
  p.total = std::max<int64_t>(1, batches_per_epoch * s.epochs);
  p.warmup = std::min<int64_t>(p.total, std::llround(s.warmup_epochs * static_cast<double>(batches_per_epoch)));
  p.start = p.peak > s.lr ? s.lr : 0.0;
  p.schedule = s.lr_schedule;
  return p;
}

// ---- .npy ---------------------------------------------------------------------------------------

namespace {

// Writes a C-order .npy of element type `descr` ('<f4', '<i8') and shape `shape` ("(3, 10)",
// "(3,)"), through a temporary file renamed onto `path`.
Status write_npy(const std::string& path, const char* descr, const std::string& shape, const void* data,
                 size_t bytes) {
  std::string header = "{'descr': '";  // appended, not "..." + ...: GCC 12 warns falsely (-Wrestrict, PR 105329)
  header.append(descr).append("', 'fortran_order': False, 'shape': ").append(shape).append(", }");
  // magic (6) + version (2) + length (2) + header + '\n', padded with spaces to a multiple of 64.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return err(Errc::kIo, "cannot create " + tmp);
    const char magic[8] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0};
    out.write(magic, 8);
    const uint16_t len = static_cast<uint16_t>(header.size());
    out.write(reinterpret_cast<const char*>(&len), 2);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
    out.flush();
    if (!out) return err(Errc::kIo, "cannot write " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return err(Errc::kIo, "cannot rename " + tmp + " onto " + path + ": " + ec.message());
  return Status::Ok();
}

// Opens a .npy of element type `descr`, leaves `in` at its data and returns the header text.
Result<std::string> read_npy_header(std::ifstream& in, const std::string& path, const char* descr) {
  if (!in) return err(Errc::kNotFound, "cannot open " + path);
  char magic[8];
  uint16_t len = 0;
  in.read(magic, 8);
  in.read(reinterpret_cast<char*>(&len), 2);
  if (!in || std::memcmp(magic, "\x93NUMPY", 6) != 0) return err(Errc::kInvalidArgument, path + ": not a .npy file");
  std::string header(len, '\0');
  in.read(header.data(), len);
  if (header.find(std::string("'descr': '") + descr + "'") == std::string::npos ||
      header.find("'fortran_order': False") == std::string::npos) {
    return err(Errc::kInvalidArgument, path + ": not a C-order " + descr + " array");
  }
  const auto open = header.find("'shape': (");
  if (open == std::string::npos) return err(Errc::kInvalidArgument, path + ": no shape");
  return header.substr(open + 10);
}

}  // namespace

Status write_npy_f32(const std::string& path, const float* values, int64_t rows, int64_t cols) {
  std::string shape = "(";
  shape.append(std::to_string(rows)).append(", ").append(std::to_string(cols)).append(")");
  return write_npy(path, "<f4", shape, values,
                   static_cast<size_t>(rows * cols) * sizeof(float));
}

Status write_npy_i64(const std::string& path, const int64_t* values, int64_t count) {
  std::string shape = "(";
  shape.append(std::to_string(count)).append(",)");
  return write_npy(path, "<i8", shape, values, static_cast<size_t>(count) * sizeof(int64_t));
}

Result<std::vector<float>> read_npy_f32(const std::string& path, int64_t& rows, int64_t& cols) {
  std::ifstream in(path, std::ios::binary);
  HPCTUNE_ASSIGN(const std::string shape, read_npy_header(in, path, "<f4"));
  if (std::sscanf(shape.c_str(), "%ld, %ld", &rows, &cols) != 2) return err(Errc::kInvalidArgument, path + ": not a 2-D array");
  std::vector<float> values(static_cast<size_t>(rows * cols));
  in.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(values.size() * 4));
  if (!in || in.peek() != std::char_traits<char>::eof()) return err(Errc::kInvalidArgument, path + ": wrong size");
  return values;
}

Result<std::vector<int64_t>> read_npy_i64(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  HPCTUNE_ASSIGN(const std::string shape, read_npy_header(in, path, "<i8"));
  long count = 0;
  char comma = 0;
  if (std::sscanf(shape.c_str(), "%ld%c)", &count, &comma) != 2 || comma != ',' || count < 0)
    return err(Errc::kInvalidArgument, path + ": not a 1-D array");
  std::vector<int64_t> values(static_cast<size_t>(count));
  in.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(int64_t)));
  if (!in || in.peek() != std::char_traits<char>::eof()) return err(Errc::kInvalidArgument, path + ": wrong size");
  return values;
}

// ---- the loop -----------------------------------------------------------------------------------

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

struct RankLayout {
  int rank = 0, size = 1, data_rank = 0, data_size = 1, model_rank = 0, model_size = 1;
  bool leader() const { return rank == 0; }
};

RankLayout layout_of(const collectives::TrainerGroup* g) {
  if (g == nullptr) return {};
  return {g->rank(), g->size(), g->data_rank(), g->data_size(), g->model_rank(), g->model_size()};
}

// The run identity a checkpoint must match to resume (checkpoint.h): everything that shapes the
// trajectory.
uint64_t config_hash(const std::string& kind, const nn::Network& net, const TrialContext& ctx, const RankLayout& l) {
  nlohmann::json settings = ctx.settings();
  settings.erase("checkpoint");
  settings.erase("save_predictions");
  const std::string text = "kind=" + kind + "\nnet=" + net.describe() + "\nsettings=" + settings.dump() +
                           "\nseed=" + std::to_string(ctx.seed) + "\nlayout=" + std::to_string(l.data_size) + "x" +
                           std::to_string(l.model_size) + "\nstage=" + std::to_string(l.model_rank);
  return nn::fnv1a64(text);
}

void warn(const std::string& kind, const TrialContext& ctx, const std::string& what) {
  std::cerr << "hpctune " << kind << " trainer: trial " << ctx.trial_id << " attempt " << ctx.attempt
            << ": warning: " << what << std::endl;
}

}  // namespace

Result<TrialResult> train_classifier(const std::string& kind, const ClassifierSettings& s,
                                     const ImageClassificationData& data, const TrialContext& ctx) {
  const std::string who = kind + " trainer";
  const Dataset& train_file = data.train;
  if (train_file.count < 2) return err(Errc::kInvalidArgument, who + ": the training set needs at least 2 images");
  for (const auto* d : {&data.train, &data.test}) {
    for (int32_t label : d->labels) {
      if (label < 0 || label >= data.num_classes) return err(Errc::kInvalidArgument, who + ": a label is out of range");
    }
  }
  const RankLayout lay = layout_of(ctx.group);

  // Validation split.
  std::vector<int64_t> perm(static_cast<size_t>(train_file.count));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  // From the campaign's data seed, not the trial's: every trial holds out the same images.
  Rng split_rng(derive_seed(s.data_seed, kSplitStream));
  shuffle(perm, split_rng);
  const int64_t pool = s.max_train_samples > 0 ? std::min(s.max_train_samples, train_file.count) : train_file.count;
  const int64_t n_val = std::max<int64_t>(1, std::llround(s.val_fraction * static_cast<double>(pool)));
  if (n_val >= pool) {
    return err(Errc::kInvalidArgument, who + ": setting 'val_fraction' = " + std::to_string(s.val_fraction) +
                                           " leaves no training images out of " + std::to_string(pool));
  }
  std::vector<int64_t> val_idx(perm.begin(), perm.begin() + n_val);
  const std::vector<int64_t> base_train(perm.begin() + n_val, perm.begin() + pool);
  std::sort(val_idx.begin(), val_idx.end());  // for memory locality; evaluation order is fixed either way
  const int64_t n_train = static_cast<int64_t>(base_train.size());
  const int64_t n_test = s.max_test_samples > 0 ? std::min(s.max_test_samples, data.test.count) : data.test.count;

  // For the whole trial, on this thread (denormals.h); first, so that BLAS threads started by the
  // two calls below inherit it.
  const nn::FlushDenormals flush_denormals;
  nn::blas_select_kernels();
  nn::blas_set_threads(ctx.threads);
  nn::dnnl_set_threads(ctx.threads);  // oneDNN's OpenMP pool is per calling thread: set it on this one

  auto created = nn::Network::create(nn::Shape{1, train_file.rows, train_file.cols}, s.layers, data.num_classes);
  if (!created.ok()) return std::move(created).error().with_context(who + ": building the network");
  nn::Network net = std::move(created).value();
  Rng init_rng(derive_seed(ctx.seed, kInitStream));
  net.init(init_rng);
  EngineOptions engine_options;
  engine_options.micro_batches = s.micro_batches;
  HPCTUNE_ASSIGN(std::unique_ptr<GradientEngine> engine, make_gradient_engine(net, ctx.group, engine_options));
  nn::Optimizer optimizer(engine->params().size(), s.optimizer);
  Rng shuffle_rng(derive_seed(ctx.seed, kShuffleStream));
  const uint64_t dropout_seed = derive_seed(derive_seed(ctx.seed, kDropoutStream), static_cast<uint64_t>(lay.rank));
  Rng dropout_rng(dropout_seed);

  const int64_t batch = std::min(s.batch_size, n_train);
  const size_t features = static_cast<size_t>(train_file.features());
  const int64_t buffer_rows = std::max(batch, kEvalBatch);
  std::vector<float> x(static_cast<size_t>(buffer_rows) * features);
  std::vector<int32_t> y(static_cast<size_t>(buffer_rows));
  const int64_t batches_per_epoch = (n_train + batch - 1) / batch;
  const LrPlan plan = make_lr_plan(s, batches_per_epoch);

  TrialResult result;
  double train_seconds = 0.0;
  int64_t images_trained = 0;
  int64_t step = 0;
  int64_t start_epoch = 0;
  protocol::Metrics last;

  // Checkpoint resume.
  const bool checkpointing = s.checkpoint && !ctx.trial_dir.empty();
  const std::string ckpt_path = checkpointing ? nn::checkpoint_path(ctx.trial_dir, lay.model_rank) : std::string();
  const uint64_t hash = config_hash(kind, net, ctx, lay);
  if (checkpointing) {
    nn::Checkpoint c;
    std::string problem;
    auto read = nn::read_checkpoint(ckpt_path);
    bool valid = false;
    if (read.ok()) {
      c = std::move(read).value();
      if (c.run_hash != hash) problem = "it belongs to another run (another model, settings, seed or layout)";
      else if (!c.manifest.empty() && (c.first_layer != engine->layer_range().first ||
                                       c.last_layer != engine->layer_range().second)) {
        problem = "it holds other layers than this stage's";
      } else if (c.params.size() != engine->params().size()) problem = "its parameter count differs";
      else if (c.rngs.size() != 2) problem = "it does not hold the loop's 2 random streams";
      else if (c.epoch > s.epochs) problem = "it is past the last epoch";
      else {
        nn::Optimizer probe(engine->params().size(), s.optimizer);
        Status st = probe.set_state(c.optimizer);
        if (!st.ok()) problem = st.error().message();
        else valid = true;
      }
    } else if (read.error().code() != Errc::kNotFound) {
      problem = read.error().message();
    }
    bool agreed = valid;
    if (ctx.group != nullptr) {
      // Resume only when every rank holds a valid checkpoint of the same epoch.
      const double e = valid ? static_cast<double>(c.epoch) : 0.0;
      std::vector<double> v{valid ? 1.0 : 0.0, e, e * e};
      HPCTUNE_TRY(ctx.group->sum(v));
      const double n = static_cast<double>(lay.size);
      agreed = v[0] == n && v[2] * n == v[1] * v[1];
      if (valid && !agreed && problem.empty()) problem = "another rank of the group cannot resume from the same epoch";
    }
    if (!problem.empty()) warn(kind, ctx, "ignoring checkpoint " + ckpt_path + " and starting from scratch: " + problem);
    if (agreed) {
      std::copy(c.params.begin(), c.params.end(), engine->params().begin());
      HPCTUNE_TRY(optimizer.set_state(c.optimizer));
      shuffle_rng.set_state(c.rngs[0]);
      dropout_rng.set_state(c.rngs[1]);
      start_epoch = c.epoch;
      step = c.step;
      train_seconds = c.meta.value("train_seconds", 0.0);
      images_trained = c.meta.value("images_trained", int64_t{0});
      if (c.meta.contains("last") && c.meta["last"].is_object()) {
        for (auto it = c.meta["last"].begin(); it != c.meta["last"].end(); ++it) {
          if (it.value().is_number()) last[it.key()] = it.value().get<double>();
        }
      }
      result.step = start_epoch;
    }
  }

  auto stopped = [&]() -> Result<TrialResult> {
    result.stopped = true;
    result.metrics = last;
    result.metrics["train_seconds"] = train_seconds;
    return result;
  };
  auto evaluate_rows = [&](const Dataset& d, const int64_t* idx, int64_t count, float* probs) -> Result<nn::BatchStats> {
    nn::BatchStats total;
    for (int64_t start = 0; start < count; start += kEvalBatch) {
      const int64_t n = std::min(kEvalBatch, count - start);
      const float* xb = nullptr;
      const int32_t* yb = nullptr;
      if (idx != nullptr) {
        gather(d, idx + start, n, x.data(), y.data());
        xb = x.data(), yb = y.data();
      } else {
        xb = d.image(start), yb = d.labels.data() + start;
      }
      float* pb = probs != nullptr ? probs + start * data.num_classes : nullptr;
      HPCTUNE_ASSIGN(nn::BatchStats b, engine->evaluate(xb, yb, n, pb));
      total += b;
    }
    return total;
  };

  std::vector<int64_t> order;
  for (int64_t epoch = start_epoch + 1; epoch <= s.epochs; ++epoch) {
    if (ctx.stop_requested()) return stopped();
    const auto epoch_start = Clock::now();
    order = base_train;
    shuffle(order, shuffle_rng);
    dropout_rng.reseed(derive_seed(dropout_seed, static_cast<uint64_t>(epoch)));
    nn::BatchStats train_stats;
    int64_t batch_no = 0;
    for (int64_t start = 0; start < n_train; start += batch, ++batch_no) {
      if (batch_no % kStopPollBatches == 0 && batch_no > 0 && ctx.stop_requested()) {
        train_seconds += seconds_since(epoch_start);
        return stopped();
      }
      const int64_t n = std::min(batch, n_train - start);
      gather(train_file, order.data() + start, n, x.data(), y.data());
      HPCTUNE_ASSIGN(nn::BatchStats b, engine->train_batch(x.data(), y.data(), n, dropout_rng));
      if (!std::isfinite(b.loss_sum)) {
        return err(Errc::kFailed, who + ": training diverged (loss is not finite in epoch " + std::to_string(epoch) +
                                      ", batch " + std::to_string(batch_no + 1) + "); try a smaller 'lr'");
      }
      optimizer.step(engine->params(), engine->grads(), engine->blocks(), static_cast<float>(plan.at(step++)));
      train_stats += b;
    }
    const double epoch_train_seconds = seconds_since(epoch_start);
    train_seconds += epoch_train_seconds;
    images_trained += n_train;

    HPCTUNE_ASSIGN(nn::BatchStats val, evaluate_rows(train_file, val_idx.data(), n_val, nullptr));
    last = {{"val_loss", val.mean_loss()},
            {"val_accuracy", val.accuracy()},
            {"train_loss", train_stats.mean_loss()},
            {"train_accuracy", train_stats.accuracy()},
            {"epoch_seconds", seconds_since(epoch_start)}};
    if (!std::isfinite(val.loss_sum)) {
      return err(Errc::kFailed, who + ": training diverged (validation loss is not finite after epoch " +
                                    std::to_string(epoch) + "); try a smaller 'lr'");
    }
    result.step = epoch;
    if (lay.leader()) ctx.report(epoch, last);

    if (checkpointing && lay.data_rank == 0) {
      // The stage's layers with the model's manifest, so that other trials can load them by layer.
      nn::Checkpoint c = nn::checkpoint_of(net, engine->layer_range().first, engine->layer_range().second);
      c.run_hash = hash;
      c.epoch = epoch;
      c.step = step;
      c.optimizer = optimizer.state();
      c.rngs = {shuffle_rng.state(), dropout_rng.state()};
      nlohmann::json last_json = nlohmann::json::object();
      for (const auto& [k, v] : last) last_json[k] = v;
      c.meta = {{"train_seconds", train_seconds}, {"images_trained", images_trained}, {"last", last_json}};
      // A failed write leaves the previous checkpoint in place: a resume then repeats more epochs,
      // which costs time but not correctness, so the trial goes on.
      Status st = nn::write_checkpoint(ckpt_path, c);
      if (!st.ok()) warn(kind, ctx, st.error().message());
    }
  }
  if (ctx.stop_requested()) return stopped();

  const bool predictions = s.save_predictions && !ctx.trial_dir.empty();
  std::vector<float> val_probs, test_probs;
  if (predictions && lay.leader()) {
    val_probs.resize(static_cast<size_t>(n_val * data.num_classes));
    test_probs.resize(static_cast<size_t>(n_test * data.num_classes));
  }
  if (predictions) {
    HPCTUNE_ASSIGN(nn::BatchStats v, evaluate_rows(train_file, val_idx.data(), n_val, lay.leader() ? val_probs.data() : nullptr));
    (void)v;
  }
  HPCTUNE_ASSIGN(nn::BatchStats test, evaluate_rows(data.test, nullptr, n_test, lay.leader() && predictions ? test_probs.data() : nullptr));
  result.metrics = {{"val_loss", last["val_loss"]},
                    {"val_accuracy", last["val_accuracy"]},
                    {"train_loss", last["train_loss"]},
                    {"test_loss", test.mean_loss()},
                    {"test_accuracy", test.accuracy()},
                    {"train_seconds", train_seconds},
                    {"images_per_second", train_seconds > 0 ? static_cast<double>(images_trained) / train_seconds : 0.0}};
  if (start_epoch > 0) result.metrics["resumed_epoch"] = static_cast<double>(start_epoch);
  result.step = s.epochs;

  if (lay.leader()) {
    if (predictions) {
      const std::string val_path = (std::filesystem::path(ctx.trial_dir) / "val_probs.npy").string();
      const std::string test_path = (std::filesystem::path(ctx.trial_dir) / "test_probs.npy").string();
      HPCTUNE_TRY(write_npy_f32(val_path, val_probs.data(), n_val, data.num_classes));
      HPCTUNE_TRY(write_npy_f32(test_path, test_probs.data(), n_test, data.num_classes));
      const std::string indices_path = (std::filesystem::path(ctx.trial_dir) / "val_indices.npy").string();
      HPCTUNE_TRY(write_npy_i64(indices_path, val_idx.data(), n_val));
      result.artifacts.push_back({"val_probs", val_path});
      result.artifacts.push_back({"test_probs", test_path});
      result.artifacts.push_back({"val_indices", indices_path});
    }
    if (checkpointing) {
      for (int stage = 0; stage < lay.model_size; ++stage) {
        result.artifacts.push_back({"checkpoint", nn::checkpoint_path(ctx.trial_dir, stage)});
      }
    }
  }
  return result;
}

Result<TrialResult> run_classifier_trial(const std::string& kind, const ClassifierSettings& s, DatasetCache* cache,
                                         const TrialContext& ctx) {
  std::error_code ec;
  if (!std::filesystem::is_directory(s.data, ec)) {
    return err(Errc::kInvalidArgument, kind + " trainer: setting 'data' = \"" + s.data + "\": no such directory");
  }
  DatasetOptions options;
  options.standardize = s.standardize;
  auto data = cache != nullptr ? cache->get(s.data, options) : load_idx_dataset(s.data, options);
  if (!data.ok()) {
    return std::move(data).error().with_context("while loading the dataset of setting 'data' = \"" + s.data + "\"");
  }
  return train_classifier(kind, s, **data, ctx);
}

}  // namespace hpctune::trainers
