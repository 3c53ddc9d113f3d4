#include "trainers/classifier_training.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <limits>
#include <numbers>
#include <numeric>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "common/npy.h"
#include "common/rng.h"
#include "common/text.h"
#include "nn/blas.h"
#include "nn/checkpoint.h"
#include "nn/denormals.h"
#include "nn/layers.h"  // dnnl_set_threads
#include "trainers/classifier_gpu.h"
#include "trainers/downpour.h"
#include "trainers/hogwild.h"
#include "trainers/replica_exchange.h"
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
  HPCTUNE_ASSIGN(const std::string device, r.string("device"));
  s.gpu = device == "gpu";
  HPCTUNE_ASSIGN(s.precision, r.string("precision"));
  HPCTUNE_ASSIGN(s.deterministic, r.boolean("deterministic"));
  if (!s.gpu && s.precision != "fp32")
    return r.bad("precision", r.raw("precision"), "fp32 with device: cpu (tf32 and bf16 are GPU arithmetic)");
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
  HPCTUNE_ASSIGN(const nlohmann::json classes, r.value("classes"));
  s.classes.clear();
  if (classes.is_array()) {
    for (const auto& c : classes) s.classes.push_back(c.get<int64_t>());
  } else {
    s.classes.push_back(classes.get<int64_t>());
  }
  if (auto problem = classes_problem(s.classes)) return r.bad("classes", r.raw("classes"), problem->must_be);
  HPCTUNE_ASSIGN(s.init_from, r.string("init_from"));
  HPCTUNE_ASSIGN(s.freeze, r.integer("freeze"));
  HPCTUNE_ASSIGN(s.head_epochs, r.integer("head_epochs"));
  if (s.head_epochs > s.epochs) {
    return r.bad("head_epochs", r.raw("head_epochs"), "at most 'epochs' (" + std::to_string(s.epochs) + ")");
  }
  HPCTUNE_ASSIGN(s.body_lr_scale, r.number("body_lr_scale"));
  HPCTUNE_TRY(parse_data_parallel(r, s.parallel));
  if (s.gpu && (s.parallel.exchanges() || s.parallel.sync == SyncMode::kHogwild)) {
    return r.bad("sync", r.raw("sync"), "allreduce without gradient_compression with device: gpu");
  }
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

// ---- the loop -----------------------------------------------------------------------------------

namespace {

// Independent random streams of one trial.
enum Stream : uint64_t { kSplitStream = 1, kInitStream = 2, kShuffleStream = 3, kDropoutStream = 4 };

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void shuffle(std::vector<int64_t>& v, Rng& rng) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng.below(i)]);
}

// Copies the rows `idx` of `d` into a contiguous batch, with labels through `label_map` (the
// classes setting: file label -> trained label).
void gather(const Dataset& d, const std::vector<int32_t>& label_map, const int64_t* idx, int64_t n, float* x,
            int32_t* y) {
  const size_t f = static_cast<size_t>(d.features());
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(x + static_cast<size_t>(i) * f, d.image(idx[i]), f * sizeof(float));
    y[i] = label_map[static_cast<size_t>(d.labels[static_cast<size_t>(idx[i])])];
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
// trajectory. `source` identifies the contents of ctx.resume_from (0 without one): a paused trial
// resumed from another checkpoint is another run, even under the same settings and path, so that
// a checkpoint of its earlier interval never wins over the weights it was told to continue from.
uint64_t config_hash(const std::string& kind, const nn::Network& net, const TrialContext& ctx, const RankLayout& l,
                     uint64_t source) {
  nlohmann::json settings = ctx.settings();
  settings.erase("checkpoint");
  settings.erase("save_predictions");
  // Where it trains is not what it trains: a trial's checkpoint resumes on the other backend
  // (classifier_gpu.h), the same run continued.
  for (const char* key : {"device", "precision", "deterministic"}) settings.erase(key);
  std::string text = "kind=" + kind + "\nnet=" + net.describe() + "\nsettings=" + settings.dump() +
                     "\nseed=" + std::to_string(ctx.seed) + "\nlayout=" + std::to_string(l.data_size) + "x" +
                     std::to_string(l.model_size) + "\nstage=" + std::to_string(l.model_rank);
  if (!ctx.resume_from.empty()) text += "\nresume_from=" + ctx.resume_from + "#" + std::to_string(source);
  return nn::fnv1a64(text);
}

// FNV-1a 64 over a checkpoint's state (counters, parameters, optimizer buffers): what a resume
// continues from.
uint64_t state_digest(const nn::Checkpoint& c) {
  uint64_t h = 0xcbf29ce484222325ULL;
  auto mix = [&h](const void* data, size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  };
  for (int64_t v : {c.epoch, c.step, c.optimizer.steps}) mix(&v, sizeof v);
  mix(&c.model_hash, sizeof c.model_hash);
  mix(c.params.data(), c.params.size() * sizeof(float));
  for (const auto& b : c.optimizer.buffers) mix(b.data(), b.size() * sizeof(float));
  return h;
}

void warn(const std::string& kind, const TrialContext& ctx, const std::string& what) {
  std::cerr << "hpctune " << kind << " trainer: trial " << ctx.trial_id << " attempt " << ctx.attempt
            << ": warning: " << what << std::endl;
}

void note(const std::string& kind, const TrialContext& ctx, const std::string& what) {
  std::cerr << "hpctune " << kind << " trainer: trial " << ctx.trial_id << " attempt " << ctx.attempt << ": " << what
            << std::endl;
}

// In a group, every rank's `st` decides together: when any rank failed, every rank fails (the
// failed ones with their own error, the others naming the cause), so that no rank goes on to a
// collective the others never reach. Without a group, `st` itself.
Status agree(collectives::TrainerGroup* group, Status st, const std::string& what) {
  if (group == nullptr) return st;
  std::vector<double> failed{st.ok() ? 0.0 : 1.0};
  HPCTUNE_TRY(group->sum(failed));
  if (!st.ok()) return st;
  if (failed[0] > 0) return err(Errc::kFailed, what + " failed on another rank of the group (see its log)");
  return Status::Ok();
}

// The checkpoint `path` names: a checkpoint file, or a trial (or snapshot) directory of
// checkpoint-stage*.bin files, joined. kInvalidArgument or kIo naming `setting` and the path.
Result<nn::Checkpoint> read_source_checkpoint(const std::string& who, const std::string& setting,
                                              const std::string& path) {
  std::error_code ec;
  const bool dir = std::filesystem::is_directory(path, ec);
  auto read = dir ? nn::read_trial_checkpoint(path) : nn::read_checkpoint(path);
  const std::string where = who + ": " + setting + " \"" + path + "\": ";
  if (!read.ok()) {
    const Errc code = read.error().code() == Errc::kIo ? Errc::kIo : Errc::kInvalidArgument;
    if (read.error().code() == Errc::kNotFound) {
      return err(code, where + (dir ? "the directory holds no checkpoint-stage*.bin" : "no such checkpoint file or directory"));
    }
    return err(code, where + read.error().message());
  }
  if (read->manifest.empty()) {
    return err(Errc::kInvalidArgument, where + "a checkpoint without a layer manifest (version 1) loads into no other trial");
  }
  return read;
}

// The optimizer state of another run made to fit `options`: SGD's velocity buffer exists only
// with momentum, and PBT may move momentum to or from 0 (a missing velocity starts at 0, as in a
// fresh run; a velocity no longer used is dropped). Anything else is left to set_state() to refuse.
nn::OptimizerState fit_optimizer_state(nn::OptimizerState st, const nn::OptimizerOptions& options, size_t params) {
  if (options.kind != nn::OptimizerKind::kSgd) return st;
  const size_t want = options.momentum != 0.0 ? 1 : 0;
  if (st.buffers.size() == 0 && want == 1) st.buffers.assign(1, std::vector<float>(params, 0.0f));
  else if (st.buffers.size() == 1 && want == 0) st.buffers.clear();
  return st;
}

// What tags the replica messages of this run (replica_exchange.h, downpour.h): the run hash, the
// trial, its attempt and where it started, so that a later trial on the same group never reads an
// earlier one's leftovers.
uint64_t run_id_of(uint64_t run_hash, const TrialContext& ctx, int64_t start_epoch) {
  return nn::fnv1a64(std::to_string(run_hash) + "/" + std::to_string(ctx.trial_id) + "/" + std::to_string(ctx.attempt) +
                     "/" + std::to_string(start_epoch));
}

// The sync_* metrics of a data-parallel run (classifier_training.h, step 4).
void add_sync_metrics(protocol::Metrics& m, const ReplicaExchange* exchange, int data_size, size_t params) {
  const double d = static_cast<double>(data_size);
  m["sync_bytes_per_step"] = exchange ? exchange->bytes_per_step()
                                      : 2.0 * (d - 1.0) / d * 4.0 * static_cast<double>(params);
  m["sync_staleness_max"] = exchange ? static_cast<double>(exchange->staleness_max()) : 0.0;
  m["sync_staleness_mean"] = exchange ? exchange->staleness_mean() : 0.0;
  m["sync_replica_fraction_min"] = 1.0;
}

// The sync_* metrics of a downpour run, from the shards' summaries (the leader's, after finish()),
// plus sync_replicas_dropped.
void add_downpour_metrics(protocol::Metrics& m, const Downpour& dp, int64_t batches_per_epoch, int64_t epochs,
                          int64_t push_interval) {
  const DownpourSummary& sum = dp.summary();
  m["sync_bytes_per_step"] = dp.bytes_per_step();
  m["sync_staleness_max"] = static_cast<double>(sum.staleness_max);
  m["sync_staleness_mean"] = sum.staleness_mean;
  double lowest = 1.0, dropped = 0.0;
  const int64_t R = dp.replicas();
  for (int64_t r = 0; r < R && static_cast<size_t>(r) < sum.pushes.size(); ++r) {
    // Replica r's minibatches: r, r + R, ... of every epoch; a push every push_interval of them.
    const int64_t steps = epochs * ((batches_per_epoch - r + R - 1) / R);
    const int64_t expected = std::max<int64_t>(1, steps / push_interval);
    const double fraction = std::min(1.0, static_cast<double>(sum.pushes[static_cast<size_t>(r)]) / static_cast<double>(expected));
    lowest = std::min(lowest, fraction);
    if (r < 16) m["sync_replica" + std::to_string(r) + "_fraction"] = fraction;
    dropped += sum.dropped[static_cast<size_t>(r)] ? 1.0 : 0.0;
  }
  m["sync_replica_fraction_min"] = lowest;
  m["sync_replicas_dropped"] = dropped;
}

// The leader's view of a coordinated exchange (replica_exchange.h): each replica's fraction of the
// steps it contributed to, the late gradients dropped, the replicas dropped (an event each; the
// group then lost a rank).
void add_coordinated_metrics(TrialResult& result, const ReplicaExchange& x, SyncMode sync, const TrialContext& ctx) {
  protocol::Metrics& m = result.metrics;
  const double clocks = static_cast<double>(std::max<int64_t>(1, x.clocks_applied()));
  double lowest = 1.0;
  for (size_t r = 0; r < x.included().size(); ++r) {
    const double fraction = static_cast<double>(x.included()[r]) / clocks;
    lowest = std::min(lowest, fraction);
    if (r < 16) m["sync_replica" + std::to_string(r) + "_fraction"] = fraction;
  }
  m["sync_replica_fraction_min"] = lowest;
  m["sync_late_packets"] = static_cast<double>(x.late_packets());
  const std::vector<int> dropped = x.dropped_now();
  m["sync_replicas_dropped"] = static_cast<double>(dropped.size());
  for (int r : dropped) {
    result.events.push_back({"replica_dropped", {{"sync", sync_mode_name(sync)}, {"replica", r},
                                                 {"steps", x.included()[static_cast<size_t>(r)]},
                                                 {"silent_ms", ctx.group != nullptr ? ctx.group->timeout().count() : 0}}});
    result.group_degraded = true;
  }
}

// Test aid (tests/test_downpour_kill.cpp, tests/test_replica_loss_campaign.cpp):
// HPCTUNE_TEST_KILL_REPLICA="<data rank>:<step>" makes that data replica of a multi-rank group kill
// itself (SIGKILL) before its minibatch <step> (downpour: its own minibatches counted over the
// trial; the other modes: the loop's step counter): a replica dying mid-trial. With
// HPCTUNE_TEST_KILL_ONCE_FILE set it happens only where that file can still be created (once per
// campaign, so that the attempt queued again runs normally).
void test_kill_replica(int data_rank, int64_t step) {
  static const char* spec = std::getenv("HPCTUNE_TEST_KILL_REPLICA");
  if (spec == nullptr || *spec == '\0') return;
  const std::string text(spec);
  const size_t colon = text.find(':');
  if (colon == std::string::npos) return;
  if (std::atoi(text.substr(0, colon).c_str()) != data_rank || std::atoll(text.c_str() + colon + 1) != step) return;
  if (const char* once = std::getenv("HPCTUNE_TEST_KILL_ONCE_FILE"); once != nullptr && *once != '\0') {
    const int fd = ::open(once, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return;  // killed once already
    ::close(fd);
  }
  std::raise(SIGKILL);
}

// sync_clocks_replica<r>.csv (classifier_training.h, step 4); a failed write is a warning.
void write_clock_log(const std::filesystem::path& path, const std::vector<ClockEvent>& events,
                     const std::function<void(const std::string&)>& warn_about) {
  std::ofstream out(path, std::ios::trunc);
  for (const ClockEvent& e : events) {
    out << (e.applied < 0 ? "publish," : "begin,") << e.clock << ',' << e.applied << ',' << e.t_ns << '\n';
  }
  out.close();
  if (!out) warn_about("could not write " + path.string());
}

}  // namespace

Result<TrialResult> train_classifier(const std::string& kind, const ClassifierSettings& s,
                                     const ImageClassificationData& data, const TrialContext& ctx) {
  const std::string who = kind + " trainer";
  const Dataset& train_file = data.train;
  for (const auto* d : {&data.train, &data.test}) {
    for (int32_t label : d->labels) {
      if (label < 0 || label >= data.num_classes) return err(Errc::kInvalidArgument, who + ": a label is out of range");
    }
  }
  const RankLayout lay = layout_of(ctx.group);

  // Classes: label_map[file label] = the trained label 0..classes-1, or -1 for a class left out.
  std::vector<int32_t> label_map(static_cast<size_t>(std::max(data.num_classes, 0)), -1);
  int64_t classes = data.num_classes;
  if (s.classes.empty()) {
    std::iota(label_map.begin(), label_map.end(), 0);
  } else {
    std::vector<int64_t> per_class(label_map.size(), 0);
    for (int32_t label : train_file.labels) ++per_class[static_cast<size_t>(label)];
    for (size_t i = 0; i < s.classes.size(); ++i) {
      const int64_t c = s.classes[i];
      if (c < 0 || c >= data.num_classes || per_class[static_cast<size_t>(c)] == 0) {
        return err(Errc::kInvalidArgument, who + ": setting 'classes': class " + std::to_string(c) +
                                               " is not in the data (its training file has classes 0.." +
                                               std::to_string(data.num_classes - 1) +
                                               (c >= 0 && c < data.num_classes ? ", but no image of class " + std::to_string(c) : std::string()) + ")");
      }
      label_map[static_cast<size_t>(c)] = static_cast<int32_t>(i);
    }
    classes = static_cast<int64_t>(s.classes.size());
  }
  auto kept = [&](const Dataset& d, int64_t i) { return label_map[static_cast<size_t>(d.labels[static_cast<size_t>(i)])] >= 0; };

  // Validation split, over the training images of the kept classes (in file order).
  std::vector<int64_t> perm;
  perm.reserve(static_cast<size_t>(train_file.count));
  for (int64_t i = 0; i < train_file.count; ++i)
    if (kept(train_file, i)) perm.push_back(i);
  const int64_t available = static_cast<int64_t>(perm.size());
  if (available < 2) return err(Errc::kInvalidArgument, who + ": the training set needs at least 2 images");
  // From the campaign's data seed, not the trial's: every trial holds out the same images.
  Rng split_rng(derive_seed(s.data_seed, kSplitStream));
  shuffle(perm, split_rng);
  const int64_t pool = s.max_train_samples > 0 ? std::min(s.max_train_samples, available) : available;
  const int64_t n_val = std::max<int64_t>(1, std::llround(s.val_fraction * static_cast<double>(pool)));
  if (n_val >= pool) {
    return err(Errc::kInvalidArgument, who + ": setting 'val_fraction' = " + std::to_string(s.val_fraction) +
                                           " leaves no training images out of " + std::to_string(pool));
  }
  std::vector<int64_t> val_idx(perm.begin(), perm.begin() + n_val);
  const std::vector<int64_t> base_train(perm.begin() + n_val, perm.begin() + pool);
  std::sort(val_idx.begin(), val_idx.end());  // for memory locality; evaluation order is fixed either way
  const int64_t n_train = static_cast<int64_t>(base_train.size());
  // The test images of the kept classes, in file order, the first max_test_samples of them.
  std::vector<int64_t> test_idx;
  for (int64_t i = 0; i < data.test.count; ++i) {
    if (s.max_test_samples > 0 && static_cast<int64_t>(test_idx.size()) >= s.max_test_samples) break;
    if (kept(data.test, i)) test_idx.push_back(i);
  }
  const int64_t n_test = static_cast<int64_t>(test_idx.size());

  // For the whole trial, on this thread (denormals.h); first, so that BLAS threads started by the
  // two calls below inherit it.
  const nn::FlushDenormals flush_denormals;
  nn::blas_select_kernels();
  nn::blas_set_threads(ctx.threads);
  nn::dnnl_set_threads(ctx.threads);  // oneDNN's OpenMP pool is per calling thread: set it on this one

  auto created = nn::Network::create(nn::Shape{1, train_file.rows, train_file.cols}, s.layers, classes);
  if (!created.ok()) return std::move(created).error().with_context(who + ": building the network");
  nn::Network net = std::move(created).value();
  Rng init_rng(derive_seed(ctx.seed, kInitStream));
  net.init(init_rng);  // the output layer keeps this initialisation under init_from too: a fresh head
  if (s.freeze > 0) {
    // Before the engine is made: a pipeline stage copies the frozen blocks then (network.h).
    if (static_cast<size_t>(s.freeze) >= net.num_layers()) {
      return err(Errc::kInvalidArgument, who + ": setting 'freeze' = " + std::to_string(s.freeze) +
                                             ": the network has only " + std::to_string(net.num_layers() - 1) +
                                             " layers before its output layer");
    }
    HPCTUNE_TRY(net.freeze(static_cast<size_t>(s.freeze)));
  }
  EngineOptions engine_options;
  engine_options.micro_batches = s.micro_batches;
  // trainer.sync (data_parallel.h): the replica exchange instead of the allreduce.
  const bool exchanging = s.parallel.exchanges() && lay.data_size > 1;
  if (exchanging && lay.model_size > 1) {
    return err(Errc::kInvalidArgument, who + ": setting 'sync' = " + std::string(sync_mode_name(s.parallel.sync)) +
                                           " with gradient_compression: " +
                                           (s.parallel.compression == GradientCompression::kOneBit ? "1bit" : "none") +
                                           " needs model: 1 (pipeline stages exchange gradients by allreduce only)");
  }
  engine_options.local_gradients = exchanging;
  const bool downpour = s.parallel.sync == SyncMode::kDownpour && lay.data_size > 1;
  if (downpour && lay.model_size > 1) {
    return err(Errc::kInvalidArgument, who + ": setting 'sync' = downpour needs model: 1 (replicas of whole models)");
  }
  const bool hogwild = s.parallel.sync == SyncMode::kHogwild;
  if (hogwild && lay.size > 1) {
    return err(Errc::kInvalidArgument, who + ": setting 'sync' = hogwild trains with the threads of one rank "
                                           "(resources.threads); this group has " + std::to_string(lay.size) +
                                           " ranks: use sync: allreduce or ssp across ranks");
  }
  if (s.parallel.debug_slowdown > 1.0 && lay.data_rank == s.parallel.debug_slowdown_rank) {
    const double extra = s.parallel.debug_slowdown - 1.0;
    engine_options.after_compute = [extra](double seconds) {
      std::this_thread::sleep_for(std::chrono::duration<double>(seconds * extra));
    };
  }
  HPCTUNE_ASSIGN(std::unique_ptr<GradientEngine> engine, make_gradient_engine(net, ctx.group, engine_options));
  std::unique_ptr<Downpour> dp;  // sync: downpour, made once the starting weights are loaded
  nn::Optimizer optimizer(engine->params().size(), s.optimizer);
  // The optimizer's view of this rank's blocks: while probing (epochs 1..head_epochs) only the
  // output layer's train; afterwards the others at lr * body_lr_scale. The output layer's blocks
  // are those at or past its first parameter, on the rank that holds it (a pipeline's last stage).
  const auto [first_layer, last_layer] = engine->layer_range();
  const size_t rank_offset = net.param_range(first_layer, last_layer).first;
  const size_t head_offset = last_layer == net.num_layers() ? net.param_range(last_layer - 1, last_layer).first
                                                            : std::numeric_limits<size_t>::max();
  std::vector<nn::ParamBlock> probe_blocks = engine->blocks(), tune_blocks = engine->blocks();
  for (size_t i = 0; i < tune_blocks.size(); ++i) {
    if (tune_blocks[i].offset + rank_offset >= head_offset) continue;
    probe_blocks[i].frozen = true;
    tune_blocks[i].lr_scale = static_cast<float>(s.body_lr_scale);
  }
  // Both streams are reseeded at every epoch start from (seed, epoch), so that an epoch's data
  // order and dropout masks do not depend on where the run started (crash resume, a PBT interval).
  const uint64_t shuffle_seed = derive_seed(ctx.seed, kShuffleStream);
  Rng shuffle_rng(shuffle_seed);
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
  auto restore_last = [&](const nn::Checkpoint& c) {
    if (c.meta.contains("last") && c.meta["last"].is_object()) {
      for (auto it = c.meta["last"].begin(); it != c.meta["last"].end(); ++it) {
        if (it.value().is_number()) last[it.key()] = it.value().get<double>();
      }
    }
  };

  // A paused trial's checkpoint to continue from (PBT): read on every rank before the run hash,
  // which depends on its contents.
  nn::Checkpoint source;
  uint64_t source_digest = 0;
  if (!ctx.resume_from.empty()) {
    auto read = read_source_checkpoint(who, "resume_from", ctx.resume_from);
    Status st = read.ok() ? Status::Ok() : Status(std::move(read).error());
    if (read.ok()) source = std::move(read).value();
    HPCTUNE_TRY(agree(ctx.group, std::move(st), "reading resume_from \"" + ctx.resume_from + "\""));
    source_digest = state_digest(source);
  }

  // Checkpoint resume.
  const bool checkpointing = s.checkpoint && !ctx.trial_dir.empty();
  const std::string ckpt_path = checkpointing ? nn::checkpoint_path(ctx.trial_dir, lay.model_rank) : std::string();
  const uint64_t hash = config_hash(kind, net, ctx, lay, source_digest);
  bool resumed_own = false;
  if (checkpointing) {
    nn::Checkpoint c;
    std::string problem;
    auto read = nn::read_checkpoint(ckpt_path);
    bool valid = false;
    if (read.ok()) {
      c = std::move(read).value();
      if (c.run_hash != hash) problem = "it belongs to another run (another model, settings, seed, layout or resume_from)";
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
    if (!problem.empty()) {
      const std::string instead = !ctx.resume_from.empty() ? "from resume_from"
                                  : !s.init_from.empty()   ? "from init_from"
                                                           : "from scratch";
      warn(kind, ctx, "ignoring checkpoint " + ckpt_path + " and starting " + instead + ": " + problem);
    }
    if (agreed) {
      std::copy(c.params.begin(), c.params.end(), engine->params().begin());
      HPCTUNE_TRY(optimizer.set_state(c.optimizer));
      start_epoch = c.epoch;
      step = c.step;
      train_seconds = c.meta.value("train_seconds", 0.0);
      images_trained = c.meta.value("images_trained", int64_t{0});
      restore_last(c);
      result.step = start_epoch;
      resumed_own = true;
    }
  }

  if (!resumed_own && !ctx.resume_from.empty()) {
    // The whole state of the paused run: every layer, the optimizer's buffers for this rank's
    // layers, the counters and the last metrics; the settings (lr, momentum, ...) are this trial's.
    Status st = [&]() -> Status {
      const std::string where = who + ": resume_from \"" + ctx.resume_from + "\": ";
      if (source.epoch > s.epochs) {
        return err(Errc::kInvalidArgument, where + "its epoch " + std::to_string(source.epoch) +
                                               " is past setting 'epochs' = " + std::to_string(s.epochs));
      }
      Status loaded = nn::load_model(net, source);
      if (!loaded.ok()) return err(Errc::kInvalidArgument, where + loaded.error().message());
      auto part = nn::slice_checkpoint(source, engine->layer_range().first, engine->layer_range().second);
      if (!part.ok()) return err(Errc::kInvalidArgument, where + part.error().message());
      Status set = optimizer.set_state(fit_optimizer_state(part->optimizer, s.optimizer, engine->params().size()));
      if (!set.ok()) return err(Errc::kInvalidArgument, where + set.error().message());
      return Status::Ok();
    }();
    HPCTUNE_TRY(agree(ctx.group, std::move(st), "loading resume_from \"" + ctx.resume_from + "\""));
    start_epoch = source.epoch;
    step = source.step;
    restore_last(source);
    result.step = start_epoch;
    if (lay.leader()) {
      note(kind, ctx, "resumed from " + ctx.resume_from + " at epoch " + std::to_string(source.epoch) +
                          " (weights, optimizer state and counters; this trial's settings)");
    }
  } else if (!resumed_own && !s.init_from.empty()) {
    // Transfer: every layer but the output from the source; the head keeps its fresh
    // initialisation, also when its size is the source's (the classes mean something else).
    Status st = [&]() -> Status {
      HPCTUNE_ASSIGN(const nn::Checkpoint c, read_source_checkpoint(who, "init_from", s.init_from));
      Status loaded = nn::load_model(net, c, /*skip_output=*/true);
      if (!loaded.ok()) return err(Errc::kInvalidArgument, who + ": init_from \"" + s.init_from + "\": " + loaded.error().message());
      if (lay.leader()) {
        note(kind, ctx, "initialised " + std::to_string(net.num_layers() - 1) + " layers from " + s.init_from +
                            " (epoch " + std::to_string(c.epoch) + " of its run), a new output layer of " +
                            std::to_string(classes) + " classes, " + std::to_string(s.freeze) + " layers frozen");
      }
      return Status::Ok();
    }();
    HPCTUNE_TRY(agree(ctx.group, std::move(st), "loading init_from \"" + s.init_from + "\""));
  }
  source = nn::Checkpoint();  // its memory is not needed any more

  // device: gpu: the state loaded above goes to the device; from here the host's network and
  // optimizer are the copy that checkpoints are written from (classifier_gpu.h).
  std::unique_ptr<ClassifierGpu> gpu;
  if (s.gpu) {
    ClassifierGpuOptions gpu_options;
    gpu_options.precision = s.precision;
    gpu_options.deterministic = s.deterministic;
    gpu_options.max_batch = std::max(batch, kEvalBatch);
    gpu_options.specs = s.layers;
    auto made = ClassifierGpu::create(net, optimizer, train_file, data.test, label_map, ctx.group, gpu_options);
    // Every rank agrees, so that no rank waits in a collective for one whose GPU failed.
    Status st = made.ok() ? Status::Ok() : Status(std::move(made).error());
    HPCTUNE_TRY(agree(ctx.group, std::move(st), "setting up the GPU"));
    gpu = std::move(made).value();
    if (lay.leader()) std::fprintf(stderr, "%s: %s\n", who.c_str(), gpu->description().c_str());
  }

  // The stage's layers with the model's manifest, so that other trials can load them by layer.
  auto save_checkpoint = [&](int64_t epoch) {
    if (gpu) {
      Status st = gpu->download(net, optimizer);
      if (!st.ok()) {
        warn(kind, ctx, "no checkpoint written: " + st.error().message());
        return;
      }
    }
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
  };
  // A run continued from resume_from writes its starting state at once: the trial directory then
  // never holds an earlier interval's weights under this trial (what a PBT snapshot copies), even
  // when no epoch is left to train.
  if (checkpointing && lay.data_rank == 0 && !resumed_own && !ctx.resume_from.empty()) save_checkpoint(start_epoch);

  auto stopped = [&]() -> Result<TrialResult> {
    result.stopped = true;
    result.metrics = last;
    result.metrics["train_seconds"] = train_seconds;
    return result;
  };
  // Coordinated exchange (replica_exchange.h): once a commit says the group lost a replica, no
  // collective of the group runs any more: the leader evaluates alone (the replicas hold the same
  // weights after each epoch's drain), and stop requests come with the commits. Every replica
  // reads the same commit, so they switch together.
  std::unique_ptr<ReplicaExchange> exchange;
  bool alone = false;
  const int64_t note_lag = s.parallel.sync == SyncMode::kSsp ? s.parallel.staleness : 0;
  auto group_lost_at = [&](int64_t clock) -> std::optional<CommitNote> {
    if (!exchange || !exchange->coordinated()) return std::nullopt;
    auto note = exchange->commit_note(clock);
    if (!note || note->dropped == 0) return std::nullopt;
    return note;
  };
  // The stop poll, at a point every replica reaches having applied `clock`.
  auto stop_now = [&](int64_t clock) -> bool {
    if (auto note = group_lost_at(clock)) {
      alone = true;
      return note->stop;
    }
    return ctx.stop_requested();
  };
  auto evaluate_rows = [&](const Dataset& d, const int64_t* idx, int64_t count, float* probs) -> Result<nn::BatchStats> {
    nn::BatchStats total;
    for (int64_t start = 0; start < count; start += kEvalBatch) {
      const int64_t n = std::min(kEvalBatch, count - start);
      float* pb = probs != nullptr ? probs + start * classes : nullptr;
      if (gpu) {
        HPCTUNE_ASSIGN(nn::BatchStats b, gpu->evaluate(&d == &data.test, std::span<const int64_t>(idx + start, static_cast<size_t>(n)), pb));
        total += b;
        continue;
      }
      gather(d, label_map, idx + start, n, x.data(), y.data());
      if (dp || alone) {  // the leader alone, on the weights it fetched last (downpour) or holds
        total += net.evaluate(x.data(), y.data(), n, pb);
        continue;
      }
      HPCTUNE_ASSIGN(nn::BatchStats b, engine->evaluate(x.data(), y.data(), n, pb));
      total += b;
    }
    return total;
  };

  // Resumed with nothing left to train (the master died after the last epoch's report, before the
  // result was recorded): that report is sent again, so a judge of reports (PBT's pause at the end
  // of an interval) sees the step it has to decide on.
  if (start_epoch > 0 && start_epoch == s.epochs && !last.empty() && lay.leader()) ctx.report(start_epoch, last);

  if (exchanging && lay.leader() && s.parallel.sync == SyncMode::kSsp && s.parallel.staleness > 0 &&
      s.optimizer.kind == nn::OptimizerKind::kSgd && s.optimizer.momentum >= 0.8) {
    // Measured (README, "ssp and momentum"): the two momenta together overshoot.
    warn(kind, ctx, "ssp with staleness " + std::to_string(s.parallel.staleness) + " and momentum " +
                        format_number(s.optimizer.momentum) +
                        ": stale gradients add momentum of their own, and training may degrade or stall; a momentum "
                        "of 0-0.5 trains as allreduce does (README, \"ssp and momentum\")");
  }
  if (exchanging) {
    ReplicaExchangeOptions xo;
    xo.staleness = s.parallel.sync == SyncMode::kSsp ? s.parallel.staleness : 0;
    xo.onebit = s.parallel.compression == GradientCompression::kOneBit;
    xo.coordinated = s.parallel.coordinated();
    xo.min_fraction = s.parallel.min_replica_fraction;
    xo.compressed_allreduce = xo.onebit && s.parallel.sync == SyncMode::kAllreduce && !xo.coordinated;
    xo.leader_stop = ctx.leader_stop_requested;
    xo.run_id = run_id_of(hash, ctx, start_epoch);
    HPCTUNE_ASSIGN(exchange, ReplicaExchange::create(*ctx.group, engine->params().size(), xo));
    HPCTUNE_TRY(exchange->start_at(step));
  }
  // sync: hogwild (hogwild.h): the threads beyond this one, each with its network and buffers.
  std::unique_ptr<HogwildWorkers> hog;
  std::vector<std::vector<float>> hog_x;
  std::vector<std::vector<int32_t>> hog_y;
  if (hogwild) {
    auto make_network = [&]() -> Result<nn::Network> {
      HPCTUNE_ASSIGN(nn::Network copy, nn::Network::create(nn::Shape{1, train_file.rows, train_file.cols}, s.layers, classes));
      if (s.freeze > 0) HPCTUNE_TRY(copy.freeze(static_cast<size_t>(s.freeze)));
      return copy;
    };
    HPCTUNE_ASSIGN(hog, HogwildWorkers::create(std::max(1, ctx.threads), engine->params().size(), s.optimizer, make_network));
    hog_x.assign(static_cast<size_t>(hog->threads()), std::vector<float>(static_cast<size_t>(batch) * features));
    hog_y.assign(static_cast<size_t>(hog->threads()), std::vector<int32_t>(static_cast<size_t>(batch)));
  }
  // sync: downpour (downpour.h): from here no collective of the group runs (a replica may die).
  if (downpour) {
    DownpourOptions o;
    o.shards = static_cast<int>(s.parallel.ps_shards);
    o.own_ranks = s.parallel.ps_on_own_ranks;
    o.push_interval = s.parallel.push_interval;
    o.fetch_interval = s.parallel.fetch_interval;
    o.adagrad = s.parallel.shard_optimizer == ShardOptimizer::kAdagrad;
    o.onebit = s.parallel.compression == GradientCompression::kOneBit;
    o.run_id = run_id_of(hash, ctx, start_epoch);
    HPCTUNE_ASSIGN(dp, Downpour::create(*ctx.group, engine->params(), o));
    if (!dp->replica()) {
      // A rank that only serves its shard: until every replica is done or dropped.
      Status served = dp->finish();
      for (const std::string& e : dp->take_events()) warn(kind, ctx, e);
      HPCTUNE_TRY(std::move(served));
      result.step = s.epochs;
      return result;
    }
  }
  int64_t current_epoch = 0;
  // A complete clock of the exchange: the optimizer step the allreduce path takes at that step.
  const ReplicaExchange::Apply apply = [&](int64_t clock, std::span<const float> sum) {
    optimizer.step(engine->params(), sum, current_epoch <= s.head_epochs ? probe_blocks : tune_blocks,
                   static_cast<float>(plan.at(clock)));
  };
  auto diverged = [&](const nn::BatchStats& b, int64_t epoch, int64_t batch_no) -> Status {
    if (std::isfinite(b.loss_sum)) return Status::Ok();
    return err(Errc::kFailed, who + ": training diverged (loss is not finite in epoch " + std::to_string(epoch) +
                                  ", batch " + std::to_string(batch_no + 1) + "); try a smaller 'lr'");
  };

  std::vector<int64_t> order;
  int64_t downpour_steps = 0;  // this replica's minibatches so far
  for (int64_t epoch = start_epoch + 1; epoch <= s.epochs; ++epoch) {
    current_epoch = epoch;
    // Downpour polls no stop request (a collective a dead replica would never join).
    if (!dp && stop_now(step - 1)) return stopped();
    const auto epoch_start = Clock::now();
    order = base_train;
    shuffle_rng.reseed(derive_seed(shuffle_seed, static_cast<uint64_t>(epoch)));
    shuffle(order, shuffle_rng);
    dropout_rng.reseed(derive_seed(dropout_seed, static_cast<uint64_t>(epoch)));
    nn::BatchStats train_stats;
    int64_t batch_no = 0;
    if (hog) {
      auto train_one = [&](int t, int64_t i, nn::Network& mine, Rng& rng) {
        const int64_t start = i * batch, n = std::min(batch, n_train - start);
        float* bx = hog_x[static_cast<size_t>(t)].data();
        int32_t* by = hog_y[static_cast<size_t>(t)].data();
        gather(train_file, label_map, order.data() + start, n, bx, by);
        return mine.forward_backward(bx, by, n, 1.0f / static_cast<float>(n), rng);
      };
      const HogwildEpochResult r = hog->run(
          net, optimizer, epoch <= s.head_epochs ? probe_blocks : tune_blocks, batches_per_epoch, step,
          [&](int64_t k) { return static_cast<float>(plan.at(k)); }, derive_seed(dropout_seed, static_cast<uint64_t>(epoch)),
          dropout_rng, train_one, ctx.stop_requested, kStopPollBatches);
      step += r.batches_done;
      train_stats = r.stats;
      batch_no = batches_per_epoch;
      if (r.diverged) {
        return err(Errc::kFailed, who + ": training diverged (loss is not finite in epoch " + std::to_string(epoch) +
                                      "); try a smaller 'lr'");
      }
      if (r.stopped) {
        train_seconds += seconds_since(epoch_start);
        return stopped();
      }
    }
    if (dp) {
      // Replica i of R: minibatches i, i + R, ... of the epoch's order, each a whole step.
      const int64_t R = dp->replicas(), first_step = step;
      for (int64_t i = dp->replica_index(); i < batches_per_epoch; i += R, ++downpour_steps) {
        if (dp->due_fetch(downpour_steps)) HPCTUNE_TRY(dp->fetch(net.params()));
        test_kill_replica(lay.data_rank, downpour_steps);
        const int64_t start = i * batch, n = std::min(batch, n_train - start);
        const auto t0 = Clock::now();
        gather(train_file, label_map, order.data() + start, n, x.data(), y.data());
        const nn::BatchStats b = net.forward_backward(x.data(), y.data(), n, 1.0f / static_cast<float>(n), dropout_rng);
        if (engine_options.after_compute) {
          // The straggler of debug_slowdown, whose shard keeps answering while it is slow.
          const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                                                 seconds_since(t0) * (s.parallel.debug_slowdown - 1.0)));
          while (Clock::now() < until) {
            HPCTUNE_TRY(dp->serve());
            std::this_thread::sleep_for(std::chrono::microseconds(200));
          }
        }
        HPCTUNE_TRY(diverged(b, epoch, i));
        HPCTUNE_TRY(dp->push(first_step + i, net.grads(), static_cast<float>(plan.at(first_step + i))));
        train_stats += b;
      }
      step = first_step + batches_per_epoch;
      batch_no = batches_per_epoch;
      for (const std::string& e : dp->take_events()) warn(kind, ctx, e);
      if (!lay.leader()) {  // only the leader validates, reports and writes checkpoints
        train_seconds += seconds_since(epoch_start);
        images_trained += n_train;
        continue;
      }
      HPCTUNE_TRY(dp->fetch(net.params()));  // the shards' weights now
    }
    for (int64_t start = 0; !hog && !dp && start < n_train; start += batch, ++batch_no) {
      if (batch_no % kStopPollBatches == 0 && batch_no > 0 && stop_now(step - note_lag - 2)) {
        train_seconds += seconds_since(epoch_start);
        return stopped();
      }
      const int64_t n = std::min(batch, n_train - start);
      if (gpu) {
        // Nothing waits per step: the stats are read every kStopPollBatches minibatches and at the end.
        HPCTUNE_TRY(gpu->train_batch(std::span<const int64_t>(order.data() + start, static_cast<size_t>(n)),
                                     epoch <= s.head_epochs ? probe_blocks : tune_blocks,
                                     static_cast<float>(plan.at(step++)), derive_seed(dropout_seed, static_cast<uint64_t>(epoch)),
                                     static_cast<uint64_t>(batch_no) << 32));
        if ((batch_no + 1) % kStopPollBatches == 0 || start + n >= n_train) {
          HPCTUNE_ASSIGN(nn::BatchStats b, gpu->take_stats());
          if (!std::isfinite(b.loss_sum)) {
            return err(Errc::kFailed, who + ": training diverged (loss is not finite in epoch " + std::to_string(epoch) +
                                          ", by batch " + std::to_string(batch_no + 1) + "); try a smaller 'lr'");
          }
          train_stats += b;
        }
        continue;
      }
      if (lay.data_size > 1) test_kill_replica(lay.data_rank, step);
      if (exchange) {
        HPCTUNE_ASSIGN(const bool compute, exchange->begin_step(step, apply));
        if (!compute) {  // applied without this replica (coordinated): a straggler catches up
          ++step;
          HPCTUNE_TRY(diverged(exchange->take_applied_stats(train_stats), epoch, batch_no));
          continue;
        }
        gather(train_file, label_map, order.data() + start, n, x.data(), y.data());
        HPCTUNE_ASSIGN(const nn::BatchStats own, engine->train_batch(x.data(), y.data(), n, dropout_rng));
        HPCTUNE_TRY(exchange->publish(step++, engine->grads(), own, apply));
        HPCTUNE_TRY(diverged(exchange->take_applied_stats(train_stats), epoch, batch_no));
        continue;
      }
      gather(train_file, label_map, order.data() + start, n, x.data(), y.data());
      HPCTUNE_ASSIGN(nn::BatchStats b, engine->train_batch(x.data(), y.data(), n, dropout_rng));
      if (!std::isfinite(b.loss_sum)) {
        return err(Errc::kFailed, who + ": training diverged (loss is not finite in epoch " + std::to_string(epoch) +
                                      ", batch " + std::to_string(batch_no + 1) + "); try a smaller 'lr'");
      }
      optimizer.step(engine->params(), engine->grads(), epoch <= s.head_epochs ? probe_blocks : tune_blocks,
                     static_cast<float>(plan.at(step++)));
      train_stats += b;
    }
    if (exchange) {
      // Every replica's clocks of the epoch applied: the same weights everywhere from here.
      HPCTUNE_TRY(exchange->drain(step, apply));
      HPCTUNE_TRY(diverged(exchange->take_applied_stats(train_stats), epoch, batch_no - 1));
      for (const std::string& e : exchange->take_events()) warn(kind, ctx, e);
      if (group_lost_at(step - 1)) alone = true;  // every replica holds commit step - 1 now
      if (alone && !lay.leader()) {  // only the leader validates, reports and writes checkpoints
        train_seconds += seconds_since(epoch_start);
        images_trained += n_train;
        continue;
      }
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

    if (checkpointing && lay.data_rank == 0) save_checkpoint(epoch);
  }
  if (dp) {
    HPCTUNE_TRY(dp->finish());
    for (const std::string& e : dp->take_events()) warn(kind, ctx, e);
    if (!lay.leader()) {
      result.step = s.epochs;
      return result;
    }
  } else if (stop_now(step - 1)) {
    return stopped();
  } else if (alone && !lay.leader()) {
    result.step = s.epochs;
    return result;
  }

  const bool predictions = s.save_predictions && !ctx.trial_dir.empty();
  std::vector<float> val_probs, test_probs;
  if (predictions && lay.leader()) {
    val_probs.resize(static_cast<size_t>(n_val * classes));
    test_probs.resize(static_cast<size_t>(n_test * classes));
  }
  if (predictions) {
    HPCTUNE_ASSIGN(nn::BatchStats v, evaluate_rows(train_file, val_idx.data(), n_val, lay.leader() ? val_probs.data() : nullptr));
    (void)v;
  }
  HPCTUNE_ASSIGN(nn::BatchStats test, evaluate_rows(data.test, test_idx.data(), n_test, lay.leader() && predictions ? test_probs.data() : nullptr));
  result.metrics = {{"val_loss", last["val_loss"]},
                    {"val_accuracy", last["val_accuracy"]},
                    {"train_loss", last["train_loss"]},
                    {"test_loss", test.mean_loss()},
                    {"test_accuracy", test.accuracy()},
                    {"train_seconds", train_seconds},
                    {"images_per_second", train_seconds > 0 ? static_cast<double>(images_trained) / train_seconds : 0.0}};
  if (start_epoch > 0) result.metrics["resumed_epoch"] = static_cast<double>(start_epoch);
  if (lay.data_size > 1 || hogwild) result.sync_mode = sync_mode_name(s.parallel.sync);
  if (dp) {
    add_downpour_metrics(result.metrics, *dp, batches_per_epoch, s.epochs - start_epoch, s.parallel.push_interval);
    for (size_t r = 0; r < dp->summary().dropped.size(); ++r) {
      if (dp->summary().dropped[r]) {
        warn(kind, ctx, "downpour: replica " + std::to_string(r) + " stopped answering and was dropped after " +
                            std::to_string(dp->summary().pushes[r]) + " pushes; the trial finished with the others");
        result.events.push_back({"replica_dropped",
                                 {{"sync", "downpour"}, {"replica", r}, {"pushes", dp->summary().pushes[r]},
                                  {"silent_ms", ctx.group->timeout().count()}}});
        // The dead replica's rank is gone from the MPI job: no later trial can use this group.
        result.group_degraded = true;
      }
    }
  } else if (lay.data_size > 1) {
    add_sync_metrics(result.metrics, exchange.get(), lay.data_size, engine->params().size());
    if (exchange && exchange->coordinated()) add_coordinated_metrics(result, *exchange, s.parallel.sync, ctx);
  }
  if (exchange && exchange->coordinated() && !ctx.trial_dir.empty()) {
    write_clock_log(std::filesystem::path(ctx.trial_dir) / ("sync_clocks_replica" + std::to_string(lay.data_rank) + ".csv"),
                    exchange->events(), [&](const std::string& what) { warn(kind, ctx, what); });
  }
  result.step = s.epochs;

  if (lay.leader()) {
    if (predictions) {
      const std::string val_path = (std::filesystem::path(ctx.trial_dir) / "val_probs.npy").string();
      const std::string test_path = (std::filesystem::path(ctx.trial_dir) / "test_probs.npy").string();
      HPCTUNE_TRY(write_npy_f32(val_path, val_probs.data(), n_val, classes));
      HPCTUNE_TRY(write_npy_f32(test_path, test_probs.data(), n_test, classes));
      const std::string indices_path = (std::filesystem::path(ctx.trial_dir) / "val_indices.npy").string();
      HPCTUNE_TRY(write_npy_i64(indices_path, val_idx.data(), n_val));
      // The labels of those rows as trained (after the classes remapping), for scoring blends.
      auto labels_of = [&](const Dataset& d, const std::vector<int64_t>& rows) {
        std::vector<int64_t> out(rows.size());
        for (size_t i = 0; i < rows.size(); ++i)
          out[i] = label_map[static_cast<size_t>(d.labels[static_cast<size_t>(rows[i])])];
        return out;
      };
      const std::string val_labels_path = (std::filesystem::path(ctx.trial_dir) / "val_labels.npy").string();
      const std::string test_labels_path = (std::filesystem::path(ctx.trial_dir) / "test_labels.npy").string();
      const std::vector<int64_t> val_labels = labels_of(train_file, val_idx), test_labels = labels_of(data.test, test_idx);
      HPCTUNE_TRY(write_npy_i64(val_labels_path, val_labels.data(), n_val));
      HPCTUNE_TRY(write_npy_i64(test_labels_path, test_labels.data(), n_test));
      result.artifacts.push_back({"val_probs", val_path});
      result.artifacts.push_back({"test_probs", test_path});
      result.artifacts.push_back({"val_indices", indices_path});
      result.artifacts.push_back({"val_labels", val_labels_path});
      result.artifacts.push_back({"test_labels", test_labels_path});
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
