// The classifier training loop (classifier_training.h) and its parts: the optimizers against
// PyTorch's formulas, checkpoints (format, atomicity, corruption), Rng state, the learning-rate
// plan, resume == uninterrupted, prediction artifacts, and the mlp/cnn kinds on small in-memory
// data (fast; the Fashion-MNIST accuracy runs are in test_mlp_accuracy.cpp).
#include <doctest/doctest.h>

#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "common/npy.h"
#include "common/rng.h"
#include "nn/checkpoint.h"
#include "nn/optimizer.h"
#include "tests/synthetic_images.h"
#include "tests/temp_dir.h"
#include "trainers/classifier_training.h"
#include "trainers/cnn_trainer.h"
#include "trainers/mlp_trainer.h"
#include "trainers/trainer.h"

using namespace hpctune;
using namespace hpctune::trainers;
using namespace hpctune::nn;

namespace {

using hpctune::testing::synthetic;
using hpctune::testing::TempDir;

struct Recorder {
  std::vector<std::pair<int64_t, protocol::Metrics>> reports;
  TrialContext context(nlohmann::json trainer, const std::string& dir = "", uint64_t seed = 3) {
    TrialContext ctx;
    ctx.trial_id = 1;
    ctx.seed = seed;
    ctx.trainer = std::move(trainer);
    ctx.trial_dir = dir;
    ctx.report = [this](int64_t step, const protocol::Metrics& m) { reports.emplace_back(step, m); };
    return ctx;
  }
};

Result<TrialResult> run_mlp(const nlohmann::json& settings, const ImageClassificationData& data, const TrialContext& ctx) {
  auto s = parse_mlp_settings(settings);
  if (!s.ok()) return std::move(s).error();
  return train_mlp(*s, data, ctx);
}

std::vector<ParamBlock> two_blocks() { return {{0, 2, true}, {2, 1, false}}; }  // 2 weights, 1 bias

}  // namespace

// ---------------------------------------------------------------------------------------------
// Optimizers: three steps on p = {1, -2, 0.5}, reference computed in double from PyTorch's
// definitions (torch.optim.SGD / Adam / AdamW, 1.13).

TEST_CASE("optimizer: SGD momentum, Nesterov and L2 weight decay follow PyTorch") {
  const std::vector<std::vector<float>> grads = {{0.5f, -1.0f, 2.0f}, {0.25f, 0.5f, -1.0f}, {-0.5f, 0.1f, 0.3f}};
  for (bool nesterov : {false, true}) {
    CAPTURE(nesterov);
    const double lr = 0.1, mu = 0.9, wd = 0.01;
    std::vector<float> p = {1.0f, -2.0f, 0.5f};
    std::vector<double> ref = {1.0, -2.0, 0.5}, buf(3, 0.0);
    Optimizer opt(3, {OptimizerKind::kSgd, mu, nesterov, 0.9, 0.999, 1e-8, wd});
    for (int t = 0; t < 3; ++t) {
      opt.step(p, grads[static_cast<size_t>(t)], two_blocks(), static_cast<float>(lr));
      for (size_t i = 0; i < 3; ++i) {
        double g = grads[static_cast<size_t>(t)][i] + (i < 2 ? wd * ref[i] : 0.0);
        buf[i] = t == 0 ? g : mu * buf[i] + g;  // PyTorch: buf = g on the first step
        ref[i] -= lr * (nesterov ? g + mu * buf[i] : buf[i]);
      }
    }
    for (size_t i = 0; i < 3; ++i) CHECK(p[i] == doctest::Approx(ref[i]).epsilon(1e-6));
    CHECK(opt.steps() == 3);
  }
  // Plain SGD keeps no buffers.
  Optimizer plain(3, {OptimizerKind::kSgd, 0.0});
  CHECK(plain.state().buffers.empty());
  std::vector<float> p = {1.0f, 1.0f, 1.0f};
  plain.step(p, grads[0], two_blocks(), 0.5f);
  CHECK(p[0] == doctest::Approx(0.75));
  CHECK(p[2] == doctest::Approx(0.0));
}

TEST_CASE("optimizer: Adam with L2 and AdamW with decoupled decay follow PyTorch") {
  const std::vector<std::vector<float>> grads = {{0.5f, -1.0f, 2.0f}, {0.25f, 0.5f, -1.0f}, {-0.5f, 0.1f, 0.3f}};
  for (auto kind : {OptimizerKind::kAdam, OptimizerKind::kAdamW}) {
    CAPTURE(optimizer_kind_name(kind));
    const double lr = 0.01, b1 = 0.8, b2 = 0.99, eps = 1e-3, wd = 0.1;
    std::vector<float> p = {1.0f, -2.0f, 0.5f};
    std::vector<double> ref = {1.0, -2.0, 0.5}, m(3, 0.0), v(3, 0.0);
    Optimizer opt(3, {kind, 0.0, false, b1, b2, eps, wd});
    for (int t = 1; t <= 3; ++t) {
      opt.step(p, grads[static_cast<size_t>(t - 1)], two_blocks(), static_cast<float>(lr));
      for (size_t i = 0; i < 3; ++i) {
        const double decay = i < 2 ? wd : 0.0;
        double g = grads[static_cast<size_t>(t - 1)][i];
        if (kind == OptimizerKind::kAdamW) ref[i] *= 1.0 - lr * decay;
        else g += decay * ref[i];
        m[i] = b1 * m[i] + (1 - b1) * g;
        v[i] = b2 * v[i] + (1 - b2) * g * g;
        const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
        ref[i] -= lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + eps);
      }
    }
    for (size_t i = 0; i < 3; ++i) CHECK(p[i] == doctest::Approx(ref[i]).epsilon(1e-6));
  }
  // The two differ only through weight decay: the bias (no decay) moves identically.
  std::vector<float> pa = {1.0f, -2.0f, 0.5f}, pw = pa;
  Optimizer a(3, {OptimizerKind::kAdam, 0.0, false, 0.9, 0.999, 1e-8, 0.5});
  Optimizer w(3, {OptimizerKind::kAdamW, 0.0, false, 0.9, 0.999, 1e-8, 0.5});
  a.step(pa, grads[0], two_blocks(), 0.1f);
  w.step(pw, grads[0], two_blocks(), 0.1f);
  CHECK(pa[2] == pw[2]);
  CHECK(pa[0] != pw[0]);
}

TEST_CASE("optimizer: state round-trips and a foreign state is refused") {
  const std::vector<float> g = {0.3f, -0.2f, 0.1f};
  Optimizer a(3, {OptimizerKind::kAdam});
  std::vector<float> pa = {1.0f, 2.0f, 3.0f};
  a.step(pa, g, two_blocks(), 0.01f);
  a.step(pa, g, two_blocks(), 0.01f);
  Optimizer b(3, {OptimizerKind::kAdam});
  REQUIRE(b.set_state(a.state()).ok());
  std::vector<float> pb = pa;
  a.step(pa, g, two_blocks(), 0.01f);
  b.step(pb, g, two_blocks(), 0.01f);
  CHECK(pa == pb);
  CHECK(b.steps() == 3);

  Optimizer sgd(3, {OptimizerKind::kSgd, 0.9});
  CHECK(sgd.set_state(a.state()).error().code() == Errc::kInvalidArgument);  // 2 buffers for 1
  Optimizer bigger(4, {OptimizerKind::kAdam});
  CHECK(bigger.set_state(a.state()).error().code() == Errc::kInvalidArgument);
  CHECK(parse_optimizer_kind("lion").error().code() == Errc::kInvalidArgument);
}

TEST_CASE("rng: state() and set_state() continue the same sequence, normal's spare included") {
  Rng a(99);
  (void)a.normal();  // leaves a spare
  const Rng::State st = a.state();
  std::vector<double> expected;
  for (int i = 0; i < 5; ++i) expected.push_back(a.normal());
  Rng b(1);
  b.set_state(st);
  for (int i = 0; i < 5; ++i) CHECK(b.normal() == expected[static_cast<size_t>(i)]);
  CHECK(a.next() == b.next());
}

// ---------------------------------------------------------------------------------------------
// Checkpoints

namespace {
Checkpoint sample_checkpoint(float base) {
  Checkpoint c;
  c.run_hash = 0x1234;
  c.epoch = 3;
  c.step = 42;
  c.params = {base, base + 1, base + 2};
  c.optimizer.steps = 42;
  c.optimizer.buffers = {{0.1f, 0.2f, 0.3f}, {1.0f, 2.0f, 3.0f}};
  Rng r(5);
  (void)r.normal();
  c.rngs = {r.state(), Rng(6).state()};
  c.meta = {{"train_seconds", 1.5}};
  return c;
}
std::vector<uint8_t> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void spit(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(bytes.data()),
                                                                 static_cast<std::streamsize>(bytes.size()));
}
}  // namespace

TEST_CASE("checkpoint and .npy writers: a link or a FIFO planted at the temporary name is refused, nothing written through") {
  // A trial directory unpacked from someone else's archive: before, <path>.tmp linked to a file of
  // the user's was emptied and overwritten (then the link renamed away), and a FIFO there hung.
  TempDir dir;
  const std::string victim = dir.file("victim.txt");
  std::ofstream(victim) << "victim\n";
  auto unchanged = [&] {
    std::ifstream in(victim);
    return std::string(std::istreambuf_iterator<char>(in), {}) == "victim\n";
  };
  const std::vector<float> probs(6, 0.5f);
  for (const bool fifo : {false, true}) {
    CAPTURE(fifo);
    const std::string ckpt = dir.file(fifo ? "f.bin" : "l.bin"), npy = dir.file(fifo ? "f.npy" : "l.npy");
    for (const std::string& tmp : {ckpt + ".tmp", npy + ".tmp"}) {
      if (fifo) REQUIRE(::mkfifo(tmp.c_str(), 0600) == 0);
      else std::filesystem::create_symlink(victim, tmp);
    }
    const std::string says = fifo ? " is a FIFO: not written to" : " is a symbolic link: not written through";
    const Status c = write_checkpoint(ckpt, sample_checkpoint(1.0f));
    REQUIRE_FALSE(c.ok());
    CHECK(c.error().code() == Errc::kInvalidArgument);
    CHECK_MESSAGE(c.error().message().find(ckpt + ".tmp" + says) != std::string::npos, c.error().message());
    const Status n = write_npy_f32(npy, probs.data(), 2, 3);
    REQUIRE_FALSE(n.ok());
    CHECK_MESSAGE(n.error().message().find(npy + ".tmp" + says) != std::string::npos, n.error().message());
    CHECK_FALSE(std::filesystem::exists(ckpt));
    CHECK_FALSE(std::filesystem::exists(npy));
    CHECK(unchanged());
  }
}

TEST_CASE("checkpoint: round trip, and every kind of damage is detected") {
  TempDir dir;
  const std::string path = checkpoint_path(dir.path, 0);
  CHECK(path == dir.path + "/checkpoint-stage0.bin");
  CHECK(read_checkpoint(path).error().code() == Errc::kNotFound);

  const Checkpoint c = sample_checkpoint(1.0f);
  REQUIRE(write_checkpoint(path, c).ok());
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  auto r = read_checkpoint(path);
  REQUIRE(r.ok());
  CHECK(r->run_hash == c.run_hash);
  CHECK(r->epoch == 3);
  CHECK(r->step == 42);
  CHECK(r->params == c.params);
  CHECK(r->optimizer.steps == 42);
  CHECK(r->optimizer.buffers == c.optimizer.buffers);
  REQUIRE(r->rngs.size() == 2);
  Rng x(0), y(0);
  x.set_state(r->rngs[0]);
  y.set_state(c.rngs[0]);
  CHECK(x.normal() == y.normal());
  CHECK(r->meta["train_seconds"] == 1.5);

  const auto good = slurp(path);
  SUBCASE("a flipped payload bit fails the checksum") {
    auto bad = good;
    bad[bad.size() / 2] ^= 0x10;
    spit(path, bad);
    CHECK(read_checkpoint(path).error().code() == Errc::kInvalidArgument);
  }
  SUBCASE("truncated") {
    spit(path, std::vector<uint8_t>(good.begin(), good.end() - 7));
    CHECK(read_checkpoint(path).error().code() == Errc::kInvalidArgument);
    spit(path, std::vector<uint8_t>(good.begin(), good.begin() + 10));
    CHECK(read_checkpoint(path).error().code() == Errc::kInvalidArgument);
  }
  SUBCASE("another format version") {
    auto bad = good;
    bad[8] = 9;
    spit(path, bad);
    CHECK(read_checkpoint(path).error().code() == Errc::kInvalidArgument);
  }
  SUBCASE("not a checkpoint") {
    spit(path, std::vector<uint8_t>(200, 'x'));
    CHECK(read_checkpoint(path).error().code() == Errc::kInvalidArgument);
  }
}

TEST_CASE("checkpoint: a crash mid-write leaves the previous checkpoint readable") {
  TempDir dir;
  const std::string path = checkpoint_path(dir.path, 1);
  REQUIRE(write_checkpoint(path, sample_checkpoint(1.0f)).ok());
  // A writer that died before its rename: a half-written temp file beside the checkpoint.
  REQUIRE(write_checkpoint(dir.file("other.bin"), sample_checkpoint(7.0f)).ok());
  const auto newer = slurp(dir.file("other.bin"));
  spit(path + ".tmp", std::vector<uint8_t>(newer.begin(), newer.begin() + static_cast<long>(newer.size() / 2)));
  auto r = read_checkpoint(path);
  REQUIRE(r.ok());
  CHECK(r->params == std::vector<float>{1.0f, 2.0f, 3.0f});
  // The next write replaces both.
  REQUIRE(write_checkpoint(path, sample_checkpoint(7.0f)).ok());
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  CHECK(read_checkpoint(path)->params == std::vector<float>{7.0f, 8.0f, 9.0f});
  // A directory that cannot be written is an I/O error.
  CHECK(write_checkpoint(dir.file("missing/x.bin"), sample_checkpoint(1.0f)).error().code() == Errc::kIo);
}

// ---------------------------------------------------------------------------------------------
// The learning-rate plan

TEST_CASE("lr plan: linear scaling, Goyal warmup, cosine after the warmup") {
  ClassifierSettings s;
  s.lr = 0.1;
  s.batch_size = 512;
  s.base_batch_size = 128;
  s.epochs = 10;
  s.lr_scaling = LrScaling::kLinear;
  s.warmup_epochs = 2;
  s.lr_schedule = LrSchedule::kConstant;
  const int64_t per_epoch = 50;
  LrPlan p = make_lr_plan(s, per_epoch);
  CHECK(p.peak == doctest::Approx(0.4));  // 0.1 * 512 / 128
  CHECK(p.warmup == 100);
  CHECK(p.total == 500);
  CHECK(p.at(0) == doctest::Approx(0.1));   // starts at the small-batch rate
  CHECK(p.at(50) == doctest::Approx(0.25));  // half way
  CHECK(p.at(100) == doctest::Approx(0.4));
  CHECK(p.at(499) == doctest::Approx(0.4));

  s.lr_schedule = LrSchedule::kCosine;
  p = make_lr_plan(s, per_epoch);
  CHECK(p.at(100) == doctest::Approx(0.4));
  CHECK(p.at(300) == doctest::Approx(0.2));  // half way through the 400 cosine steps
  CHECK(p.at(500) == doctest::Approx(0.0).epsilon(1e-12));

  // No scaling: warmup from 0; no warmup: the plain cosine of the old mlp trainer.
  s.lr_scaling = LrScaling::kNone;
  p = make_lr_plan(s, per_epoch);
  CHECK(p.peak == doctest::Approx(0.1));
  CHECK(p.at(0) == 0.0);
  CHECK(p.at(50) == doctest::Approx(0.05));
  s.warmup_epochs = 0;
  p = make_lr_plan(s, per_epoch);
  CHECK(p.at(0) == doctest::Approx(0.1));
  CHECK(p.at(250) == doctest::Approx(0.05));
  // Fractional warmup epochs round to minibatches.
  s.warmup_epochs = 0.5;
  CHECK(make_lr_plan(s, per_epoch).warmup == 25);
}

// ---------------------------------------------------------------------------------------------
// The loop

namespace {
nlohmann::json small_settings() {
  return {{"kind", "mlp"}, {"hidden", {24}}, {"dropout", 0.1}, {"lr", 0.05}, {"batch_size", 32}, {"epochs", 2}};
}
}  // namespace

TEST_CASE("classifier loop: a run stopped after epoch 1 and resumed as attempt 2 ends as an uninterrupted run") {
  const auto data = synthetic(600, 100);
  for (const char* optimizer : {"sgd", "adamw"}) {
    CAPTURE(optimizer);
    auto settings = small_settings();
    settings["optimizer"] = optimizer;
    settings["weight_decay"] = 1e-3;
    if (std::string(optimizer) == "adamw") settings["lr"] = 0.003;

    TempDir full_dir, split_dir;
    Recorder full;
    auto a = run_mlp(settings, data, full.context(settings, full_dir.path));
    REQUIRE(a.ok());
    REQUIRE(full.reports.size() == 2);

    Recorder first;
    auto ctx1 = first.context(settings, split_dir.path);
    ctx1.stop_requested = [&] { return !first.reports.empty(); };
    auto b1 = run_mlp(settings, data, ctx1);
    REQUIRE(b1.ok());
    CHECK(b1->stopped);
    CHECK(b1->step == 1);
    REQUIRE(std::filesystem::exists(checkpoint_path(split_dir.path, 0)));
    CHECK(read_checkpoint(checkpoint_path(split_dir.path, 0))->epoch == 1);

    Recorder second;
    auto ctx2 = second.context(settings, split_dir.path);
    ctx2.attempt = 2;
    auto b2 = run_mlp(settings, data, ctx2);
    REQUIRE(b2.ok());
    CHECK_FALSE(b2->stopped);
    CHECK(b2->step == 2);
    CHECK(b2->metrics.at("resumed_epoch") == 1.0);
    CHECK(a->metrics.count("resumed_epoch") == 0);
    REQUIRE(second.reports.size() == 1);  // only epoch 2 was trained again
    CHECK(second.reports[0].first == 2);
    CHECK(second.reports[0].second.at("val_loss") == full.reports[1].second.at("val_loss"));
    CHECK(second.reports[0].second.at("train_loss") == full.reports[1].second.at("train_loss"));
    for (const char* key : {"val_loss", "val_accuracy", "test_loss", "test_accuracy", "train_loss"}) {
      CAPTURE(key);
      CHECK(b2->metrics.at(key) == a->metrics.at(key));
    }
    // Bit-identical final weights and optimizer state.
    auto ca = read_checkpoint(checkpoint_path(full_dir.path, 0));
    auto cb = read_checkpoint(checkpoint_path(split_dir.path, 0));
    REQUIRE(ca.ok());
    REQUIRE(cb.ok());
    CHECK(ca->epoch == 2);
    CHECK(cb->epoch == 2);
    CHECK(ca->params == cb->params);
    CHECK(ca->optimizer.buffers == cb->optimizer.buffers);
    CHECK(ca->step == cb->step);
  }
}

TEST_CASE("classifier loop: a corrupt or foreign checkpoint is ignored, never trained into the trial") {
  const auto data = synthetic(400, 50);
  auto settings = small_settings();
  TempDir clean_dir, dir;
  auto clean = run_mlp(settings, data, Recorder().context(settings, clean_dir.path));
  REQUIRE(clean.ok());
  const std::string path = checkpoint_path(dir.path, 0);

  SUBCASE("corrupt") {
    REQUIRE(run_mlp(settings, data, Recorder().context(settings, dir.path)).ok());
    auto bytes = slurp(path);
    bytes[bytes.size() - 20] ^= 0xff;
    spit(path, bytes);
  }
  SUBCASE("another model's") {
    auto other = settings;
    other["hidden"] = {24};
    other["lr"] = 0.2;  // same shapes, another trajectory
    REQUIRE(run_mlp(other, data, Recorder().context(other, dir.path)).ok());
  }
  Recorder rec;
  auto again = run_mlp(settings, data, rec.context(settings, dir.path));
  REQUIRE(again.ok());
  CHECK(again->metrics.count("resumed_epoch") == 0);
  CHECK(rec.reports.size() == 2);  // trained from epoch 1
  CHECK(again->metrics.at("val_loss") == clean->metrics.at("val_loss"));
  CHECK(read_checkpoint(path)->params == read_checkpoint(checkpoint_path(clean_dir.path, 0))->params);
}

TEST_CASE("classifier loop: a finished checkpoint only re-evaluates; checkpoint: false writes none") {
  const auto data = synthetic(400, 50);
  auto settings = small_settings();
  TempDir dir;
  auto a = run_mlp(settings, data, Recorder().context(settings, dir.path));
  REQUIRE(a.ok());
  Recorder rec;
  auto b = run_mlp(settings, data, rec.context(settings, dir.path));
  REQUIRE(b.ok());
  // Nothing left to train: the last epoch's report is sent again (a judge of reports, such as
  // PBT's pause, must see the step a dead master did not record), with the metrics it had.
  REQUIRE(rec.reports.size() == 1);
  CHECK(rec.reports[0].first == 2);
  CHECK(rec.reports[0].second.at("val_loss") == a->metrics.at("val_loss"));
  CHECK(b->metrics.at("resumed_epoch") == 2.0);
  CHECK(b->metrics.at("test_loss") == a->metrics.at("test_loss"));
  CHECK(b->metrics.at("val_loss") == a->metrics.at("val_loss"));

  TempDir none;
  settings["checkpoint"] = false;
  auto c = run_mlp(settings, data, Recorder().context(settings, none.path));
  REQUIRE(c.ok());
  CHECK_FALSE(std::filesystem::exists(checkpoint_path(none.path, 0)));
  for (const auto& art : c->artifacts) CHECK(art.kind != "checkpoint");
}

TEST_CASE("classifier loop: predictions are float32 .npy artifacts whose rows are probabilities") {
  const auto data = synthetic(500, 70, 8, 5);
  auto settings = small_settings();
  settings["val_fraction"] = 0.2;
  TempDir dir;
  auto r = run_mlp(settings, data, Recorder().context(settings, dir.path));
  REQUIRE(r.ok());
  std::map<std::string, std::string> paths;
  for (const auto& a : r->artifacts) paths[a.kind] = a.path;
  REQUIRE(paths.count("val_probs") == 1);
  REQUIRE(paths.count("test_probs") == 1);
  CHECK(paths["checkpoint"] == checkpoint_path(dir.path, 0));
  const Dataset& test = data.test;
  for (const auto& [kind, rows_expected] : std::vector<std::pair<std::string, int64_t>>{{"val_probs", 100}, {"test_probs", 70}}) {
    CAPTURE(kind);
    int64_t rows = 0, cols = 0;
    auto probs = read_npy_f32(paths[kind], rows, cols);
    REQUIRE(probs.ok());
    CHECK(rows == rows_expected);
    CHECK(cols == 5);
    for (int64_t i = 0; i < rows; ++i) {
      double sum = 0;
      for (int64_t j = 0; j < cols; ++j) {
        const float p = (*probs)[static_cast<size_t>(i * cols + j)];
        CHECK(p >= 0.0f);
        sum += p;
      }
      CHECK(sum == doctest::Approx(1.0).epsilon(1e-5));
    }
    if (kind == "test_probs") {  // argmax agrees with the reported accuracy
      int64_t correct = 0;
      for (int64_t i = 0; i < rows; ++i) {
        const float* row = probs->data() + i * cols;
        correct += (std::max_element(row, row + cols) - row) == test.labels[static_cast<size_t>(i)];
      }
      CHECK(static_cast<double>(correct) / 70.0 == doctest::Approx(r->metrics.at("test_accuracy")));
    }
  }
  // The numpy header is what numpy.load expects: 64-byte aligned, version 1.0.
  const auto bytes = slurp(paths["test_probs"]);
  const uint16_t header = static_cast<uint16_t>(bytes[8] | (bytes[9] << 8));
  CHECK((10 + header) % 64 == 0);
  CHECK(bytes.size() == 10u + header + 70u * 5u * 4u);

  // No trial directory: no files, no artifacts.
  auto none = run_mlp(settings, data, Recorder().context(settings, ""));
  REQUIRE(none.ok());
  CHECK(none->artifacts.empty());
}

// The validation split comes from the campaign's data seed (trainer.data_seed), not from the
// trial's seed (issue 10): row i of every trial's val_probs.npy is the same image, so that the
// predictions of several trials can be combined (ensembles). val_indices.npy says which.
TEST_CASE("classifier loop: trials with different seeds hold out the same images; another data seed does not") {
  const auto data = synthetic(400, 30, 8, 5);
  auto settings = small_settings();
  settings["epochs"] = 1;
  settings["val_fraction"] = 0.25;
  settings["max_train_samples"] = 300;  // the training subset comes from the data seed too
  settings["data_seed"] = 7;
  struct Run {
    std::vector<int64_t> indices;
    std::vector<uint8_t> bytes;
    std::vector<float> probs;
  };
  auto run = [&](const nlohmann::json& s, uint64_t trial_seed) {
    TempDir dir;
    auto r = run_mlp(s, data, Recorder().context(s, dir.path, trial_seed));
    REQUIRE(r.ok());
    std::string path;
    for (const auto& a : r->artifacts)
      if (a.kind == "val_indices") path = a.path;
    REQUIRE(path == dir.path + "/val_indices.npy");
    auto indices = read_npy_i64(path);
    REQUIRE(indices.ok());
    int64_t rows = 0, cols = 0;
    auto probs = read_npy_f32(dir.path + "/val_probs.npy", rows, cols);
    REQUIRE(probs.ok());
    CHECK(rows == static_cast<int64_t>(indices->size()));  // one row per index
    return Run{*indices, slurp(path), *probs};
  };
  const Run a = run(settings, 1), b = run(settings, 2);
  REQUIRE(a.indices.size() == 75);  // 0.25 of the 300 the cap keeps
  CHECK(std::is_sorted(a.indices.begin(), a.indices.end()));
  CHECK(std::adjacent_find(a.indices.begin(), a.indices.end()) == a.indices.end());
  for (int64_t i : a.indices) CHECK((i >= 0 && i < 400));
  CHECK(a.indices == b.indices);
  CHECK(a.bytes == b.bytes);     // the same file
  CHECK(a.probs != b.probs);     // the trials' own seeds still differ: another initialisation, another model

  auto other = settings;
  other["data_seed"] = 8;
  const Run c = run(other, 1);
  REQUIRE(c.indices.size() == 75);
  CHECK(c.indices != a.indices);
}

TEST_CASE("classifier loop: linear scaling and warmup reach the trainer; bad new settings are named") {
  const auto data = synthetic(300, 40);
  auto settings = small_settings();
  settings["lr_scaling"] = "linear";
  settings["base_batch_size"] = 16;  // 2x the rate
  settings["warmup_epochs"] = 1;
  settings["optimizer"] = "adam";
  settings["lr"] = 0.002;
  auto r = run_mlp(settings, data, Recorder().context(settings));
  REQUIRE(r.ok());
  CHECK(r->metrics.at("val_accuracy") > 0.8);

  for (const auto& [key, value] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"optimizer", "lion"}, {"lr_scaling", "sqrt"}, {"base_batch_size", 0}, {"warmup_epochs", -1},
           {"beta1", 1.0}, {"beta2", -0.1}, {"eps", 0.0}, {"checkpoint", "yes"}, {"micro_batches", -2},
           {"save_predictions", 1}}) {
    auto bad = settings;
    bad[key] = value;
    auto s = parse_mlp_settings(bad);
    CAPTURE(key);
    REQUIRE_FALSE(s.ok());
    CHECK(s.error().code() == Errc::kInvalidArgument);
    CHECK(s.error().message().find("'" + key + "'") != std::string::npos);
  }
}

TEST_CASE("cnn trainer: default layers, parsing, and learning a small synthetic problem") {
  auto defaults = parse_cnn_settings({{"kind", "cnn"}});
  REQUIRE(defaults.ok());
  REQUIRE(defaults->layers.size() == 5);
  CHECK(defaults->layers[0].kind == "conv");
  CHECK(defaults->layers[0].filters == 32);
  CHECK(defaults->layers[0].kernel == 5);
  CHECK(defaults->layers[1].kind == "maxpool");
  CHECK(defaults->layers[2].filters == 64);
  CHECK(defaults->layers[4].units == 1024);
  CHECK(defaults->batch_size == 128);
  CHECK(defaults->lr == 0.01);  // the mlp keeps 0.05
  CHECK(parse_mlp_settings({{"kind", "mlp"}})->lr == 0.05);

  auto bad = parse_cnn_settings({{"layers", {{{"kind", "conv"}, {"filters", 0}, {"kernel", 3}}}}});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code() == Errc::kInvalidArgument);
  CHECK(bad.error().message().find("'layers'") != std::string::npos);
  CHECK(parse_cnn_settings({{"hidden", 3}}).error().code() == Errc::kInvalidArgument);

  const auto data = synthetic(600, 100, 12, 4);
  nlohmann::json settings = {{"kind", "cnn"},
                             {"layers", nlohmann::json::parse(R"([{"kind": "conv", "filters": 8, "kernel": 3},
                                                                  {"kind": "maxpool", "size": 2},
                                                                  {"kind": "dense", "units": 32}])")},
                             {"lr", 0.05}, {"batch_size", 32}, {"epochs", 3}};
  auto s = parse_cnn_settings(settings);
  REQUIRE(s.ok());
  Recorder rec;
  TempDir dir;
  auto r = train_classifier("cnn", *s, data, rec.context(settings, dir.path));
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message()));
  CHECK(rec.reports.size() == 3);
  CHECK(r->metrics.at("test_accuracy") > 0.9);
  CHECK(rec.reports.back().second.at("train_loss") < rec.reports.front().second.at("train_loss"));
}

TEST_CASE("cnn trainer: named blocks in layers, filled in by searched settings (architecture search)") {
  const auto conv3 = nlohmann::json::parse(R"([{"kind": "conv", "filters": 8, "kernel": 3}, {"kind": "maxpool", "size": 2}])");
  const auto conv5 = nlohmann::json::parse(R"([{"kind": "conv", "filters": 16, "kernel": 5}])");
  const auto head = nlohmann::json::parse(R"([{"kind": "dense", "units": 32}, {"kind": "dropout", "rate": 0.25}])");
  nlohmann::json settings = {{"kind", "cnn"},
                             {"layers", {"block1", "block2", "block3", "head"}},
                             {"block1", conv3},
                             {"block3", conv5},  // block2 absent: an inactive conditional parameter
                             {"head", head}};
  auto s = parse_cnn_settings(settings);
  REQUIRE_MESSAGE(s.ok(), s.error().message());
  REQUIRE(s->layers.size() == 5);
  CHECK(s->layers[0].kind == "conv");
  CHECK(s->layers[0].kernel == 3);
  CHECK(s->layers[1].kind == "maxpool");
  CHECK(s->layers[2].kernel == 5);
  CHECK(s->layers[3].units == 32);
  CHECK(s->layers[4].kind == "dropout");
  // `blocks` leaves out the blocks after it (the head is not counted).
  settings["blocks"] = 2;
  settings["block2"] = conv5;
  auto two = parse_cnn_settings(settings);
  REQUIRE(two.ok());
  CHECK(two->layers.size() == 5);  // block1 (2) + block2 (1) + head (2); block3 left out
  CHECK(two->layers[2].kernel == 5);
  CHECK(two->layers[2].filters == 16);
  CHECK(parse_cnn_settings({{"blocks", 7}}).error().code() == Errc::kInvalidArgument);
  // Blocks mix with layer maps; every block absent leaves the fixed layers.
  auto fixed = parse_cnn_settings({{"layers", nlohmann::json::array({"block1", head[0]})}});
  REQUIRE(fixed.ok());
  CHECK(fixed->layers.size() == 1);

  auto fails = [](nlohmann::json bad, const std::string& needle) {
    auto r = parse_cnn_settings(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == Errc::kInvalidArgument);
    CHECK_MESSAGE(r.error().message().find(needle) != std::string::npos, r.error().message());
  };
  fails({{"layers", {"block9"}}}, "'block9' is neither a layer map nor a block");
  fails({{"layers", {"block1", "block1"}}, {"block1", conv3}}, "placed twice");
  fails({{"block1", conv3}}, "block1 is set but layers does not place it");  // the default layers name no block
  fails({{"layers", {"block1"}}, {"block1", nlohmann::json::array({{{"kind", "conv"}, {"filters", 0}, {"kernel", 3}}})}},
        "setting 'block1': block1[0].filters: must be >= 1");
  fails({{"layers", {"block1"}}, {"block1", 3}}, "block1");
}

// ---------------------------------------------------------------------------------------------
// Issue 11: classes, transfer (init_from + freeze) and PBT (resume_from)

namespace {

std::map<std::string, std::string> artifact_paths(const TrialResult& r) {
  std::map<std::string, std::string> paths;
  for (const auto& a : r.artifacts) paths[a.kind] = a.path;
  return paths;
}

// The parameters of layer `i` of a whole-model checkpoint.
std::vector<float> layer_params(const Checkpoint& c, size_t i) {
  const size_t first = c.manifest.num_params(0, i);
  const size_t n = c.manifest.layers[i].num_params();
  REQUIRE(first + n <= c.params.size());
  return {c.params.begin() + static_cast<std::ptrdiff_t>(first), c.params.begin() + static_cast<std::ptrdiff_t>(first + n)};
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

Checkpoint final_checkpoint(const std::string& dir) {
  auto c = read_trial_checkpoint(dir);
  REQUIRE_MESSAGE(c.ok(), (c.ok() ? "" : c.error().message()));
  return *c;
}

std::string error_of(const Result<TrialResult>& r) { return r.ok() ? std::string("(ok)") : r.error().message(); }

}  // namespace

TEST_CASE("classes: only the listed classes are used, relabelled 0..k-1 in order, with a k-unit head") {
  const auto data = synthetic(600, 120, 8, 6);
  auto settings = small_settings();
  settings["classes"] = {4, 1, 3};
  settings["max_train_samples"] = 200;  // 200 images of classes 4, 1, 3: after the filter
  settings["val_fraction"] = 0.25;
  TempDir dir;
  auto r = run_mlp(settings, data, Recorder().context(settings, dir.path));
  REQUIRE_MESSAGE(r.ok(), error_of(r));
  auto paths = artifact_paths(*r);
  REQUIRE(paths.count("val_labels") == 1);
  REQUIRE(paths.count("test_labels") == 1);
  CHECK(paths["val_labels"] == dir.path + "/val_labels.npy");
  CHECK(paths["test_labels"] == dir.path + "/test_labels.npy");
  auto val_idx = read_npy_i64(paths["val_indices"]);
  auto val_labels = read_npy_i64(paths["val_labels"]);
  auto test_labels = read_npy_i64(paths["test_labels"]);
  REQUIRE(val_idx.ok());
  REQUIRE(val_labels.ok());
  REQUIRE(test_labels.ok());
  REQUIRE(val_idx->size() == 50);  // 0.25 of the 200 kept
  REQUIRE(val_labels->size() == 50);
  const std::vector<int> order = {4, 1, 3};
  for (size_t i = 0; i < val_idx->size(); ++i) {
    const int file_label = data.train.labels[static_cast<size_t>((*val_idx)[i])];
    const auto at = std::find(order.begin(), order.end(), file_label);
    REQUIRE(at != order.end());  // only listed classes
    CHECK((*val_labels)[i] == at - order.begin());
  }
  std::vector<int64_t> expected_test;
  for (int32_t label : data.test.labels) {
    const auto at = std::find(order.begin(), order.end(), label);
    if (at != order.end()) expected_test.push_back(at - order.begin());
  }
  CHECK(*test_labels == expected_test);
  int64_t rows = 0, cols = 0;
  REQUIRE(read_npy_f32(paths["test_probs"], rows, cols).ok());
  CHECK(rows == static_cast<int64_t>(expected_test.size()));
  CHECK(cols == 3);
  const Checkpoint c = final_checkpoint(dir.path);
  CHECK(c.manifest.layers.back().shapes == std::vector<std::vector<int64_t>>{{24, 3}, {3}});
  CHECK(r->metrics.at("test_accuracy") > 0.5);  // 3 classes: chance is 1/3

  // max_test_samples counts the filtered test images.
  auto capped = settings;
  capped["max_test_samples"] = 10;
  TempDir dir2;
  auto r2 = run_mlp(capped, data, Recorder().context(capped, dir2.path));
  REQUIRE(r2.ok());
  auto capped_labels = read_npy_i64(dir2.path + "/test_labels.npy");
  REQUIRE(capped_labels.ok());
  CHECK(*capped_labels == std::vector<int64_t>(expected_test.begin(), expected_test.begin() + 10));

  // A class the data lacks fails the trial naming it; duplicates and a single class are refused.
  auto missing = settings;
  missing["classes"] = {1, 9};
  auto bad = run_mlp(missing, data, Recorder().context(missing));
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code() == Errc::kInvalidArgument);
  CHECK(bad.error().message().find("class 9") != std::string::npos);
  for (const nlohmann::json& value : {nlohmann::json{1, 1}, nlohmann::json{2}, nlohmann::json{-1, 2}}) {
    auto s = settings;
    s["classes"] = value;
    auto parsed = parse_mlp_settings(s);
    CAPTURE(value.dump());
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.error().message().find("'classes'") != std::string::npos);
  }
}

TEST_CASE("classifier loop: the label files hold the labels of the prediction rows") {
  const auto data = synthetic(300, 40, 8, 5);
  auto settings = small_settings();
  settings["epochs"] = 1;
  TempDir dir;
  auto r = run_mlp(settings, data, Recorder().context(settings, dir.path));
  REQUIRE(r.ok());
  auto paths = artifact_paths(*r);
  auto idx = read_npy_i64(paths["val_indices"]);
  auto val_labels = read_npy_i64(paths["val_labels"]);
  auto test_labels = read_npy_i64(paths["test_labels"]);
  REQUIRE(idx.ok());
  REQUIRE(val_labels.ok());
  REQUIRE(test_labels.ok());
  REQUIRE(val_labels->size() == idx->size());
  for (size_t i = 0; i < idx->size(); ++i) CHECK((*val_labels)[i] == data.train.labels[static_cast<size_t>((*idx)[i])]);
  CHECK(*test_labels == std::vector<int64_t>(data.test.labels.begin(), data.test.labels.end()));
}

TEST_CASE("transfer: init_from loads every layer but a new head; frozen layers stay bit-for-bit") {
  const auto data = synthetic(600, 100, 8, 8);
  nlohmann::json source = {{"kind", "mlp"}, {"hidden", {24, 16}}, {"lr", 0.05}, {"batch_size", 32},
                           {"epochs", 2}, {"classes", {0, 1, 2, 3, 4}}};
  TempDir src_dir;
  REQUIRE(run_mlp(source, data, Recorder().context(source, src_dir.path, 11)).ok());
  const Checkpoint src = final_checkpoint(src_dir.path);
  REQUIRE(src.manifest.layers.size() == 3);
  TempDir export_dir;
  const std::string exported = export_dir.file("model.bin");
  REQUIRE(export_checkpoint(src_dir.path, exported).ok());

  for (const std::string& from : {src_dir.path, exported}) {
    CAPTURE(from);
    nlohmann::json target = {{"kind", "mlp"}, {"hidden", {24, 16}}, {"lr", 0.05}, {"batch_size", 32},
                             {"epochs", 2}, {"classes", {5, 6, 7}}, {"init_from", from}, {"freeze", 1},
                             {"momentum", 0.9}, {"weight_decay", 0.01}};
    TempDir dir;
    Recorder rec;
    auto r = run_mlp(target, data, rec.context(target, dir.path, 12));
    REQUIRE_MESSAGE(r.ok(), error_of(r));
    CHECK(rec.reports.size() == 2);
    const Checkpoint tuned = final_checkpoint(dir.path);
    CHECK(same_bits(layer_params(tuned, 0), layer_params(src, 0)));      // frozen: unchanged
    CHECK_FALSE(same_bits(layer_params(tuned, 1), layer_params(src, 1)));  // trained
    CHECK(tuned.manifest.layers[2].shapes == std::vector<std::vector<int64_t>>{{16, 3}, {3}});  // the target's head
    // The optimizer kept no state for the frozen layer either.
    REQUIRE(tuned.optimizer.buffers.size() == 1);
    const size_t n0 = tuned.manifest.layers[0].num_params();
    CHECK(std::all_of(tuned.optimizer.buffers[0].begin(), tuned.optimizer.buffers[0].begin() + static_cast<std::ptrdiff_t>(n0),
                      [](float v) { return v == 0.0f; }));
  }

  // Without freeze every layer trains (so the check above can fail).
  nlohmann::json unfrozen = {{"kind", "mlp"}, {"hidden", {24, 16}}, {"lr", 0.05}, {"batch_size", 32},
                             {"epochs", 1}, {"classes", {5, 6, 7}}, {"init_from", src_dir.path}};
  TempDir u_dir;
  REQUIRE(run_mlp(unfrozen, data, Recorder().context(unfrozen, u_dir.path, 12)).ok());
  CHECK_FALSE(same_bits(layer_params(final_checkpoint(u_dir.path), 0), layer_params(src, 0)));

  // Another architecture, too deep a freeze and a missing source fail the trial, naming why.
  auto wider = unfrozen;
  wider["hidden"] = {32, 16};
  auto w = run_mlp(wider, data, Recorder().context(wider));
  REQUIRE_FALSE(w.ok());
  CHECK(w.error().code() == Errc::kInvalidArgument);
  CHECK(w.error().message().find("init_from") != std::string::npos);
  CHECK(w.error().message().find("layer 0") != std::string::npos);
  auto deep = unfrozen;
  deep["freeze"] = 3;
  auto d = run_mlp(deep, data, Recorder().context(deep));
  REQUIRE_FALSE(d.ok());
  CHECK(d.error().message().find("'freeze'") != std::string::npos);
  auto missing = unfrozen;
  missing["init_from"] = src_dir.path + "/nothing-here.bin";
  auto m = run_mlp(missing, data, Recorder().context(missing));
  REQUIRE_FALSE(m.ok());
  CHECK(m.error().message().find("nothing-here.bin") != std::string::npos);
}

TEST_CASE("transfer: head_epochs trains only the head first (LP-FT); body_lr_scale slows every other layer") {
  const auto data = synthetic(600, 100, 8, 8);
  nlohmann::json source = {{"kind", "mlp"}, {"hidden", {24, 16}}, {"lr", 0.05}, {"batch_size", 32},
                           {"epochs", 2}, {"classes", {0, 1, 2, 3, 4}}};
  TempDir src_dir;
  REQUIRE(run_mlp(source, data, Recorder().context(source, src_dir.path, 11)).ok());
  const Checkpoint src = final_checkpoint(src_dir.path);

  // Every epoch a probe: the loaded layers stay bit-for-bit, the optimizer keeps no state for
  // them, and only the head moves.
  nlohmann::json probe = {{"kind", "mlp"}, {"hidden", {24, 16}}, {"lr", 0.05}, {"batch_size", 32}, {"epochs", 2},
                          {"classes", {5, 6, 7}}, {"init_from", src_dir.path}, {"head_epochs", 2}};
  TempDir probe_dir;
  auto p = run_mlp(probe, data, Recorder().context(probe, probe_dir.path, 12));
  REQUIRE_MESSAGE(p.ok(), error_of(p));
  const Checkpoint probed = final_checkpoint(probe_dir.path);
  CHECK(same_bits(layer_params(probed, 0), layer_params(src, 0)));
  CHECK(same_bits(layer_params(probed, 1), layer_params(src, 1)));
  const size_t body = probed.manifest.num_params(0, 2);
  REQUIRE(probed.optimizer.buffers.size() == 1);
  CHECK(std::all_of(probed.optimizer.buffers[0].begin(), probed.optimizer.buffers[0].begin() + static_cast<std::ptrdiff_t>(body),
                    [](float v) { return v == 0.0f; }));
  CHECK(std::any_of(probed.optimizer.buffers[0].begin() + static_cast<std::ptrdiff_t>(body), probed.optimizer.buffers[0].end(),
                    [](float v) { return v != 0.0f; }));
  // One probing epoch of two: the second trains every layer (so the checks above can fail).
  auto lp_ft = probe;
  lp_ft["head_epochs"] = 1;
  TempDir lp_ft_dir;
  REQUIRE(run_mlp(lp_ft, data, Recorder().context(lp_ft, lp_ft_dir.path, 12)).ok());
  CHECK_FALSE(same_bits(layer_params(final_checkpoint(lp_ft_dir.path), 0), layer_params(src, 0)));

  // body_lr_scale: one plain SGD step (the batch is the whole training set), so each layer moves
  // by rate x the same gradient: the loaded layers by half as much as at scale 1, the head alike.
  nlohmann::json step = {{"kind", "mlp"}, {"hidden", {24, 16}}, {"lr", 0.5}, {"momentum", 0.0}, {"batch_size", 4096},
                         {"epochs", 1}, {"classes", {5, 6, 7}}, {"init_from", src_dir.path}, {"checkpoint", true}};
  auto half = step;
  half["body_lr_scale"] = 0.5;
  TempDir full_dir, half_dir;
  REQUIRE(run_mlp(step, data, Recorder().context(step, full_dir.path, 12)).ok());
  auto h = run_mlp(half, data, Recorder().context(half, half_dir.path, 12));
  REQUIRE_MESSAGE(h.ok(), error_of(h));
  const Checkpoint full_ckpt = final_checkpoint(full_dir.path), half_ckpt = final_checkpoint(half_dir.path);
  for (size_t layer = 0; layer < 3; ++layer) {
    CAPTURE(layer);
    const std::vector<float> a = layer_params(src, layer), f = layer_params(full_ckpt, layer), g = layer_params(half_ckpt, layer);
    const double want = layer < 2 ? 0.5 : 1.0;
    double moved = 0.0;
    for (size_t i = 0; i < f.size(); ++i) {
      if (layer == 2) {
        CHECK(g[i] == f[i]);  // the head: the same fresh start, the same gradient, the full rate
        continue;
      }
      const double df = static_cast<double>(f[i]) - a[i], dg = static_cast<double>(g[i]) - a[i];
      // To the float rounding of the parameters themselves (their last bit near 1 is 1.2e-7).
      CHECK(std::abs(dg - want * df) <= 1e-3 * std::abs(df) + 5e-7);
      moved = std::max(moved, std::abs(df));
    }
    if (layer < 2) CHECK(moved > 1e-4);  // the step did move the loaded layers
  }

  // Bad values are named.
  auto too_long = probe;
  too_long["head_epochs"] = 3;
  auto t = run_mlp(too_long, data, Recorder().context(too_long));
  REQUIRE_FALSE(t.ok());
  CHECK(t.error().message().find("'head_epochs'") != std::string::npos);
  auto zero = step;
  zero["body_lr_scale"] = 0.0;
  auto z = run_mlp(zero, data, Recorder().context(zero));
  REQUIRE_FALSE(z.ok());
  CHECK(z.error().message().find("body_lr_scale") != std::string::npos);
}

TEST_CASE("transfer: a head of the source's size is initialised afresh, not copied") {
  const auto data = synthetic(400, 60, 8, 6);
  nlohmann::json source = {{"kind", "mlp"}, {"hidden", {16}}, {"lr", 0.05}, {"batch_size", 32},
                           {"epochs", 2}, {"classes", {0, 1, 2}}};
  TempDir src_dir;
  REQUIRE(run_mlp(source, data, Recorder().context(source, src_dir.path, 5)).ok());
  const Checkpoint src = final_checkpoint(src_dir.path);
  // A rate far below the weights' last bit: the training steps leave every weight as it started.
  nlohmann::json target = {{"kind", "mlp"}, {"hidden", {16}}, {"lr", 1e-20}, {"momentum", 0.0}, {"batch_size", 32},
                           {"epochs", 1}, {"classes", {3, 4, 5}}, {"init_from", src_dir.path}};
  TempDir dir;
  REQUIRE(run_mlp(target, data, Recorder().context(target, dir.path, 6)).ok());
  auto scratch = target;
  scratch.erase("init_from");
  TempDir scratch_dir;
  REQUIRE(run_mlp(scratch, data, Recorder().context(scratch, scratch_dir.path, 6)).ok());
  const Checkpoint tuned = final_checkpoint(dir.path), fresh = final_checkpoint(scratch_dir.path);
  // The head's weights (its biases start at 0 and are moved by even the tiniest step).
  auto head_weights = [](const Checkpoint& c) {
    std::vector<float> p = layer_params(c, 1);
    p.resize(16 * 3);
    return p;
  };
  CHECK(same_bits(layer_params(tuned, 0), layer_params(src, 0)));  // the body is the source's
  CHECK_FALSE(same_bits(head_weights(tuned), head_weights(src)));  // the head is not
  CHECK(same_bits(head_weights(tuned), head_weights(fresh)));      // but this trial's fresh one
}

TEST_CASE("resume_from: the whole state of a paused trial continues with the trial's current settings") {
  const auto data = synthetic(500, 80, 8, 4);
  auto settings = small_settings();
  settings["lr_schedule"] = "constant";
  settings["epochs"] = 2;
  TempDir a_dir;
  REQUIRE(run_mlp(settings, data, Recorder().context(settings, a_dir.path)).ok());
  const Checkpoint a = final_checkpoint(a_dir.path);
  REQUIRE(a.epoch == 2);

  // (a) Nothing left to train: the trial's checkpoint is A's state exactly, under the new lr.
  {
    auto s = settings;
    s["lr"] = 0.2;
    TempDir dir;
    Recorder rec;
    auto ctx = rec.context(s, dir.path);
    ctx.resume_from = a_dir.path;
    auto r = run_mlp(s, data, ctx);
    REQUIRE_MESSAGE(r.ok(), error_of(r));
    REQUIRE(rec.reports.size() == 1);  // the resumed epoch's report again, nothing trained
    CHECK(rec.reports[0].first == 2);
    CHECK(r->step == 2);
    CHECK(r->metrics.at("resumed_epoch") == 2.0);
    const Checkpoint c = final_checkpoint(dir.path);
    CHECK(same_bits(c.params, a.params));
    CHECK(c.optimizer.buffers == a.optimizer.buffers);
    CHECK(c.epoch == 2);
  }
  // The same settings continued from A end exactly where an uninterrupted run does: weights,
  // momentum, counters, data order and dropout all continue; reports resume at step 3.
  auto four = settings;
  four["epochs"] = 4;
  TempDir full_dir;
  REQUIRE(run_mlp(four, data, Recorder().context(four, full_dir.path)).ok());
  {
    TempDir dir;
    Recorder rec;
    auto ctx = rec.context(four, dir.path);
    ctx.resume_from = checkpoint_path(a_dir.path, 0);  // a file works as well as a directory
    auto r = run_mlp(four, data, ctx);
    REQUIRE_MESSAGE(r.ok(), error_of(r));
    REQUIRE(rec.reports.size() == 2);
    CHECK(rec.reports[0].first == 3);
    CHECK(rec.reports[1].first == 4);
    CHECK(same_bits(final_checkpoint(dir.path).params, final_checkpoint(full_dir.path).params));
  }
  // (b) The new lr is the one trained with: a vanishing rate leaves A's weights, another moves them.
  for (double lr : {1e-20, 0.2}) {
    CAPTURE(lr);
    auto s = four;
    s["lr"] = lr;
    TempDir dir;
    Recorder rec;
    auto ctx = rec.context(s, dir.path);
    ctx.resume_from = a_dir.path;
    auto r = run_mlp(s, data, ctx);
    REQUIRE_MESSAGE(r.ok(), error_of(r));
    CHECK(rec.reports.front().first == 3);
    CHECK(same_bits(final_checkpoint(dir.path).params, a.params) == (lr < 1e-10));
  }
}

TEST_CASE("resume_from: a link planted below the trial directories after the store's check is refused at open") {
  // The store checks a paused trial's resume_from when it reads the row (under <db>.trials, no
  // link below it); the trainer opens it later. Before, it opened it by its path: a snapshot
  // directory (or a directory on its way) swapped for a link in between was followed, and the
  // trial went on from whatever checkpoint the link led to.
  const auto data = synthetic(500, 80, 8, 4);
  auto settings = small_settings();
  settings["lr_schedule"] = "constant";
  settings["epochs"] = 2;
  TempDir elsewhere;
  REQUIRE(run_mlp(settings, data, Recorder().context(settings, elsewhere.path)).ok());
  TempDir trials;  // <db>.trials: trial 1 paused with a snapshot, trial 2 resumes from it
  const std::string snapshot = trials.path + "/1/pbt/000-step-2";
  std::filesystem::create_directories(snapshot);
  std::filesystem::copy_file(checkpoint_path(elsewhere.path, 0), checkpoint_path(snapshot, 0));
  std::filesystem::create_directories(trials.path + "/2");
  auto four = settings;
  four["epochs"] = 4;
  auto resume = [&](const std::string& from) {
    Recorder rec;
    auto ctx = rec.context(four, trials.path + "/2");
    ctx.resume_from = from;
    return run_mlp(four, data, ctx);
  };
  {
    auto r = resume(snapshot);
    REQUIRE_MESSAGE(r.ok(), error_of(r));
    std::filesystem::remove_all(trials.path + "/2");
    std::filesystem::create_directories(trials.path + "/2");
  }
  // The snapshot swapped for a link to another checkpoint; then its pbt/ directory.
  std::filesystem::rename(snapshot, trials.path + "/1/pbt/kept");
  std::filesystem::create_directory_symlink(elsewhere.path, snapshot);
  auto linked = resume(snapshot);
  REQUIRE_FALSE(linked.ok());
  CHECK(linked.error().code() == Errc::kInvalidArgument);
  CHECK_MESSAGE(linked.error().message().find("'000-step-2' is a symbolic link or not a directory: not followed") !=
                    std::string::npos,
                linked.error().message());
  std::filesystem::remove(snapshot);
  std::filesystem::rename(trials.path + "/1/pbt", trials.path + "/1/pbt-real");
  std::filesystem::rename(trials.path + "/1/pbt-real/kept", trials.path + "/1/pbt-real/000-step-2");
  std::filesystem::create_directory_symlink(trials.path + "/1/pbt-real", trials.path + "/1/pbt");
  auto on_the_way = resume(snapshot);
  REQUIRE_FALSE(on_the_way.ok());
  CHECK_MESSAGE(on_the_way.error().message().find("'pbt' is a symbolic link or not a directory: not followed") !=
                    std::string::npos,
                on_the_way.error().message());
}

TEST_CASE("resume_from: crash resume keeps its own progress, a new source always wins, a bad one fails") {
  Recorder sink;  // outlives the contexts that report to it
  const auto data = synthetic(400, 60, 8, 4);
  auto settings = small_settings();
  settings["lr_schedule"] = "constant";
  TempDir a1_dir, a2_dir;
  REQUIRE(run_mlp(settings, data, Recorder().context(settings, a1_dir.path, 1)).ok());
  REQUIRE(run_mlp(settings, data, Recorder().context(settings, a2_dir.path, 2)).ok());
  const Checkpoint a1 = final_checkpoint(a1_dir.path), a2 = final_checkpoint(a2_dir.path);
  REQUIRE_FALSE(same_bits(a1.params, a2.params));

  // A crash in the middle of an interval: the second attempt resumes the trial's own epoch 3.
  auto four = settings;
  four["epochs"] = 4;
  TempDir snap, dir, clean_dir;
  const std::string snapshot = snap.file("member.bin");
  std::filesystem::copy_file(checkpoint_path(a1_dir.path, 0), snapshot);
  Recorder clean;
  auto clean_ctx = clean.context(four, clean_dir.path, 9);
  clean_ctx.resume_from = snapshot;
  REQUIRE(run_mlp(four, data, clean_ctx).ok());
  Recorder first;
  auto ctx1 = first.context(four, dir.path, 9);
  ctx1.resume_from = snapshot;
  ctx1.stop_requested = [&] { return !first.reports.empty(); };
  auto r1 = run_mlp(four, data, ctx1);
  REQUIRE(r1.ok());
  CHECK(r1->stopped);
  Recorder second;
  auto ctx2 = second.context(four, dir.path, 9);
  ctx2.attempt = 2;
  ctx2.resume_from = snapshot;
  auto r2 = run_mlp(four, data, ctx2);
  REQUIRE(r2.ok());
  REQUIRE(second.reports.size() == 1);
  CHECK(second.reports[0].first == 4);
  CHECK(same_bits(final_checkpoint(dir.path).params, final_checkpoint(clean_dir.path).params));

  // The same path and settings with other contents (the master reuses a snapshot file): the
  // trial's own checkpoint of the earlier source must not win over the new source.
  auto two = settings;  // epochs 2: nothing to train, the checkpoint is the source's state
  TempDir member;
  auto ctx3 = sink.context(two, member.path, 9);
  ctx3.resume_from = snapshot;
  REQUIRE(run_mlp(two, data, ctx3).ok());
  CHECK(same_bits(final_checkpoint(member.path).params, a1.params));
  std::filesystem::copy_file(checkpoint_path(a2_dir.path, 0), snapshot, std::filesystem::copy_options::overwrite_existing);
  REQUIRE(run_mlp(two, data, ctx3).ok());
  CHECK(same_bits(final_checkpoint(member.path).params, a2.params));

  // Nothing readable, another model or a past epoch: the trial fails, never trains from scratch.
  TempDir empty;
  for (const std::string& from : {empty.path, empty.file("missing.bin")}) {
    CAPTURE(from);
    auto ctx = sink.context(four, "", 9);
    ctx.resume_from = from;
    auto r = run_mlp(four, data, ctx);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == Errc::kInvalidArgument);
    CHECK(r.error().message().find(from) != std::string::npos);
  }
  auto wider = four;
  wider["hidden"] = {32};
  auto ctx4 = sink.context(wider, "", 9);
  ctx4.resume_from = a1_dir.path;
  auto w = run_mlp(wider, data, ctx4);
  REQUIRE_FALSE(w.ok());
  CHECK(w.error().message().find("layer 0") != std::string::npos);
  auto one = settings;
  one["epochs"] = 1;
  auto ctx5 = sink.context(one, "", 9);
  ctx5.resume_from = a1_dir.path;
  auto p = run_mlp(one, data, ctx5);
  REQUIRE_FALSE(p.ok());
  CHECK(p.error().message().find("past setting 'epochs'") != std::string::npos);
}

TEST_CASE("resume_from: PBT may move momentum to and from 0 (the velocity starts at 0 or is dropped)") {
  Recorder sink;  // outlives the contexts that report to it
  const auto data = synthetic(300, 40, 8, 4);
  auto settings = small_settings();
  settings["lr_schedule"] = "constant";
  settings["momentum"] = 0.0;
  TempDir a_dir;
  REQUIRE(run_mlp(settings, data, Recorder().context(settings, a_dir.path)).ok());
  auto s = settings;
  s["epochs"] = 3;
  s["momentum"] = 0.5;
  TempDir b_dir;
  auto ctx = sink.context(s, b_dir.path);
  ctx.resume_from = a_dir.path;
  auto r = run_mlp(s, data, ctx);
  REQUIRE_MESSAGE(r.ok(), error_of(r));
  CHECK(final_checkpoint(b_dir.path).optimizer.buffers.size() == 1);
  auto back = s;
  back["epochs"] = 4;
  back["momentum"] = 0.0;
  TempDir c_dir;
  auto ctx2 = sink.context(back, c_dir.path);
  ctx2.resume_from = b_dir.path;
  REQUIRE(run_mlp(back, data, ctx2).ok());
  CHECK(final_checkpoint(c_dir.path).optimizer.buffers.empty());
}

TEST_CASE("device: tf32/bf16 are GPU arithmetic; device: gpu without a usable GPU fails the trial saying why") {
  auto s = small_settings();
  s["precision"] = "tf32";
  auto p = parse_mlp_settings(s);
  REQUIRE_FALSE(p.ok());
  CHECK(p.error().message().find("precision") != std::string::npos);
  CHECK(p.error().message().find("device: cpu") != std::string::npos);
  s["device"] = "tpu";
  CHECK_FALSE(parse_mlp_settings(s).ok());

  // Here (no GPU: CI, or a CUDA build on a machine without a device) the trial fails, naming the
  // reason; it never trains on the CPU instead. On a GPU machine it trains (test_gpu_trainer).
  auto g = small_settings();
  g["device"] = "gpu";
  const auto data = synthetic(200, 40, 8, 4);
  Recorder sink;
  auto r = run_mlp(g, data, sink.context(g));
  if (!r.ok()) {
    MESSAGE("device: gpu here: " << r.error().to_string());
    CHECK(r.error().message().find("device: gpu") != std::string::npos);
    CHECK(sink.reports.empty());
  } else {
    CHECK(r->metrics.at("val_loss") > 0.0);
  }
}
