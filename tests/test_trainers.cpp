// The built-in trainers: IDX reading, the mlp and sleep trainers, the factory. (The network math
// the mlp trainer runs on is tested in test_network.cpp, its optimizers in test_classifier_training.cpp.)
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <zlib.h>

#include <atomic>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/npy.h"
#include "common/rng.h"
#include "config/config.h"
#include "config/settings.h"
#include "tests/temp_dir.h"
#include "trainers/trainer_factory.h"
#include "trainers/idx_dataset.h"
#include "trainers/mlp_trainer.h"
#include "trainers/sleep_trainer.h"
#include "trainers/trainer.h"
#include "trainers/trainer_settings.h"

using namespace hpctune;
using namespace hpctune::trainers;
using namespace hpctune::nn;
using namespace hpctune::collectives;
namespace fs = std::filesystem;

namespace {

using hpctune::testing::TempDir;

void put_be32(std::vector<uint8_t>& out, uint32_t v) {
  out.push_back(static_cast<uint8_t>(v >> 24));
  out.push_back(static_cast<uint8_t>(v >> 16));
  out.push_back(static_cast<uint8_t>(v >> 8));
  out.push_back(static_cast<uint8_t>(v));
}

std::vector<uint8_t> idx_images_bytes(uint32_t count, uint32_t rows, uint32_t cols, const std::vector<uint8_t>& pixels) {
  std::vector<uint8_t> out{0, 0, 0x08, 3};
  put_be32(out, count);
  put_be32(out, rows);
  put_be32(out, cols);
  out.insert(out.end(), pixels.begin(), pixels.end());
  return out;
}

std::vector<uint8_t> idx_labels_bytes(const std::vector<uint8_t>& labels) {
  std::vector<uint8_t> out{0, 0, 0x08, 1};
  put_be32(out, static_cast<uint32_t>(labels.size()));
  out.insert(out.end(), labels.begin(), labels.end());
  return out;
}

void write_plain(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(f.good());
}

void write_gz(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// A learnable synthetic problem: each class has a random 6x6 prototype; samples are the
// prototype plus noise. Written as a gzipped IDX directory like Fashion-MNIST's.
struct Synthetic {
  static constexpr uint32_t kSide = 6;
  static constexpr int kClasses = 4;
  TempDir dir;

  Synthetic(uint32_t train_count = 800, uint32_t test_count = 200, uint64_t seed = 7) {
    Rng rng(seed);
    std::vector<std::vector<double>> proto(kClasses, std::vector<double>(kSide * kSide));
    for (auto& p : proto)
      for (auto& v : p) v = rng.uniform(0.0, 255.0);
    auto make = [&](uint32_t count, const std::string& prefix) {
      std::vector<uint8_t> pixels, labels;
      for (uint32_t i = 0; i < count; ++i) {
        const int c = static_cast<int>(rng.below(kClasses));
        labels.push_back(static_cast<uint8_t>(c));
        for (double v : proto[static_cast<size_t>(c)]) {
          const double x = v + rng.normal(0.0, 60.0);
          pixels.push_back(static_cast<uint8_t>(std::clamp(x, 0.0, 255.0)));
        }
      }
      write_gz(dir.file(prefix + "-images-idx3-ubyte.gz"), idx_images_bytes(count, kSide, kSide, pixels));
      write_gz(dir.file(prefix + "-labels-idx1-ubyte.gz"), idx_labels_bytes(labels));
    };
    make(train_count, "train");
    make(test_count, "t10k");
  }
};

struct Recorder {
  std::vector<std::pair<int64_t, protocol::Metrics>> reports;
  TrialContext context(nlohmann::json trainer, uint64_t seed = 1) {
    TrialContext ctx;
    ctx.seed = seed;
    ctx.trainer = std::move(trainer);
    ctx.report = [this](int64_t step, const protocol::Metrics& m) { reports.emplace_back(step, m); };
    return ctx;
  }
};

// The message names the setting in quotes (the message is the feature here).
bool names_setting(const Error& e, const std::string& key) {
  std::string quoted(1, '\'');
  quoted.append(key).push_back('\'');
  return e.message().find(quoted) != std::string::npos;
}

nlohmann::json small_mlp(const Synthetic& data) {
  return {{"kind", "mlp"}, {"data", data.dir.path}, {"hidden", {16}}, {"lr", 0.05}, {"batch_size", 32}, {"epochs", 4}};
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// IDX reader

TEST_CASE("idx: plain and gzipped files read back exactly") {
  TempDir dir;
  std::vector<uint8_t> pixels(5 * 3 * 4);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 7);
  const std::vector<uint8_t> labels{0, 3, 1, 2, 3};
  for (bool gz : {false, true}) {
    CAPTURE(gz);
    const std::string img = dir.file(gz ? "i.gz" : "i"), lab = dir.file(gz ? "l.gz" : "l");
    (gz ? write_gz : write_plain)(img, idx_images_bytes(5, 3, 4, pixels));
    (gz ? write_gz : write_plain)(lab, idx_labels_bytes(labels));
    auto images = read_idx_images(img);
    REQUIRE(images.ok());
    CHECK(images->count == 5);
    CHECK(images->rows == 3);
    CHECK(images->cols == 4);
    CHECK(images->pixels == pixels);
    auto l = read_idx_labels(lab);
    REQUIRE(l.ok());
    CHECK(*l == labels);
    auto d = load_idx_pair(img, lab);
    REQUIRE(d.ok());
    CHECK(d->features() == 12);
    CHECK(d->images[1] == doctest::Approx(7.0 / 255.0).epsilon(1e-6));
    CHECK(d->images[12 * 4 + 11] == doctest::Approx(static_cast<uint8_t>(59 * 7) / 255.0).epsilon(1e-6));
    CHECK(d->labels == std::vector<int32_t>{0, 3, 1, 2, 3});
  }
}

TEST_CASE("idx: malformed files are rejected with the file named") {
  TempDir dir;
  const std::vector<uint8_t> pixels(4 * 2 * 2, 9);
  const auto good = idx_images_bytes(4, 2, 2, pixels);

  SUBCASE("a FIFO is refused, not waited on") {
    REQUIRE(::mkfifo(dir.file("fifo").c_str(), 0600) == 0);
    auto r = read_idx_images(dir.file("fifo"));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message() == "'" + dir.file("fifo") + "': is not a regular file");
  }

  SUBCASE("bad magic") {
    auto bytes = good;
    bytes[2] = 0x09;  // float type, not ubyte
    write_plain(dir.file("magic"), bytes);
    auto r = read_idx_images(dir.file("magic"));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == Errc::kInvalidArgument);
    CHECK(r.error().message().find(dir.file("magic")) != std::string::npos);
    CHECK(r.error().message().find("magic") != std::string::npos);
  }
  SUBCASE("a label file where images are expected") {
    write_plain(dir.file("labels"), idx_labels_bytes({1, 2}));
    auto r = read_idx_images(dir.file("labels"));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == Errc::kInvalidArgument);
  }
  SUBCASE("zero dimension") {
    write_plain(dir.file("zero"), idx_images_bytes(4, 0, 2, {}));
    auto r = read_idx_images(dir.file("zero"));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == Errc::kInvalidArgument);
  }
  SUBCASE("truncated plain file") {
    auto bytes = good;
    bytes.resize(bytes.size() - 3);
    write_plain(dir.file("short"), bytes);
    auto r = read_idx_images(dir.file("short"));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == Errc::kInvalidArgument);
    CHECK(r.error().message().find(dir.file("short")) != std::string::npos);
  }
  SUBCASE("truncated header") {
    write_plain(dir.file("hdr"), {0, 0, 8, 3, 0, 0});
    auto r = read_idx_images(dir.file("hdr"));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == Errc::kInvalidArgument);
  }
  SUBCASE("trailing bytes") {
    auto bytes = good;
    bytes.push_back(1);
    write_plain(dir.file("long"), bytes);
    auto r = read_idx_images(dir.file("long"));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == Errc::kInvalidArgument);
  }
  SUBCASE("labels: truncated") {
    auto bytes = idx_labels_bytes({1, 2, 3});
    bytes.pop_back();
    write_plain(dir.file("lab"), bytes);
    auto r = read_idx_labels(dir.file("lab"));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == Errc::kInvalidArgument);
  }
  SUBCASE("missing file") {
    auto r = read_idx_images(dir.file("nope.gz"));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == Errc::kNotFound);
    CHECK(r.error().message().find(dir.file("nope.gz")) != std::string::npos);
  }
  SUBCASE("image and label counts differ") {
    write_plain(dir.file("i"), good);
    write_plain(dir.file("l"), idx_labels_bytes({1, 2, 3}));
    auto r = load_idx_pair(dir.file("i"), dir.file("l"));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == Errc::kInvalidArgument);
  }
}

TEST_CASE("idx: corrupted and truncated gzip streams are I/O errors") {
  TempDir dir;
  std::vector<uint8_t> pixels(50 * 8 * 8);
  Rng rng(3);
  for (auto& p : pixels) p = static_cast<uint8_t>(rng.below(256));
  write_gz(dir.file("ok.gz"), idx_images_bytes(50, 8, 8, pixels));
  const auto compressed = read_all(dir.file("ok.gz"));
  REQUIRE(compressed.size() > 100);
  REQUIRE(read_idx_images(dir.file("ok.gz")).ok());

  SUBCASE("flipped bytes inside the deflate stream") {
    auto bad = compressed;
    for (size_t i = bad.size() / 2; i < bad.size() / 2 + 8; ++i) bad[i] ^= 0x5a;
    write_plain(dir.file("bad.gz"), bad);
    auto r = read_idx_images(dir.file("bad.gz"));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == Errc::kIo);
    CHECK(r.error().message().find(dir.file("bad.gz")) != std::string::npos);
  }
  SUBCASE("a wrong CRC in the gzip trailer") {
    auto bad = compressed;
    bad[bad.size() - 6] ^= 0xff;
    write_plain(dir.file("crc.gz"), bad);
    auto r = read_idx_images(dir.file("crc.gz"));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == Errc::kIo);
  }
  SUBCASE("cut short") {
    auto bad = compressed;
    bad.resize(bad.size() / 2);
    write_plain(dir.file("cut.gz"), bad);
    auto r = read_idx_images(dir.file("cut.gz"));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == Errc::kIo);
  }
}

TEST_CASE("idx: a dataset directory loads, standardizes and is cached") {
  Synthetic data(120, 40);
  auto loaded = load_idx_dataset(data.dir.path);
  REQUIRE(loaded.ok());
  const auto& d = **loaded;
  CHECK(d.train.count == 120);
  CHECK(d.test.count == 40);
  CHECK(d.train.features() == 36);
  CHECK(d.num_classes == Synthetic::kClasses);
  for (float v : d.train.images) {
    REQUIRE(v >= 0.0f);
    REQUIRE(v <= 1.0f);
  }

  DatasetOptions standardize;
  standardize.standardize = true;
  auto s = load_idx_dataset(data.dir.path, standardize);
  REQUIRE(s.ok());
  double sum = 0.0, sum_sq = 0.0;
  for (float v : (*s)->train.images) sum += v, sum_sq += static_cast<double>(v) * v;
  const double n = static_cast<double>((*s)->train.images.size());
  CHECK(sum / n == doctest::Approx(0.0).epsilon(1e-5).scale(1.0));
  CHECK(sum_sq / n == doctest::Approx(1.0).epsilon(1e-4));
  // The test set goes through the training set's transform.
  CHECK((*s)->test.images[0] == doctest::Approx((d.test.images[0] - (*s)->mean) / (*s)->stddev).epsilon(1e-5));

  DatasetCache cache;
  auto a = cache.get(data.dir.path);
  auto b = cache.get(data.dir.path + "/.");
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->get() == b->get());
  CHECK(cache.loads() == 1);
  auto c = cache.get(data.dir.path, standardize);
  REQUIRE(c.ok());
  CHECK(c->get() != a->get());
  CHECK(cache.loads() == 2);
  CHECK(cache.size() == 2);

  auto missing = cache.get(data.dir.file("nowhere"));
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code() == Errc::kNotFound);
  CHECK(cache.size() == 2);

  fs::remove(data.dir.file("t10k-labels-idx1-ubyte.gz"));
  auto incomplete = load_idx_dataset(data.dir.path);
  REQUIRE_FALSE(incomplete.ok());
  CHECK(incomplete.error().code() == Errc::kNotFound);
  CHECK(incomplete.error().message().find("t10k-labels-idx1-ubyte") != std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// The mlp trainer

TEST_CASE("mlp trainer: learns the synthetic dataset and reports every epoch") {
  Synthetic data;
  Recorder rec;
  auto trainer = make_trainer("mlp");
  REQUIRE(trainer.ok());
  auto r = (*trainer)->run(rec.context(small_mlp(data)));
  REQUIRE(r.ok());
  CHECK_FALSE(r->stopped);
  CHECK(r->step == 4);
  REQUIRE(rec.reports.size() == 4);
  for (size_t i = 0; i < rec.reports.size(); ++i) {
    CHECK(rec.reports[i].first == static_cast<int64_t>(i + 1));
    for (const char* key : {"val_loss", "val_accuracy", "train_loss", "epoch_seconds"}) {
      CAPTURE(key);
      CHECK(rec.reports[i].second.count(key) == 1);
    }
  }
  CHECK(rec.reports.back().second.at("val_loss") < rec.reports.front().second.at("val_loss"));
  CHECK(rec.reports.back().second.at("train_loss") < rec.reports.front().second.at("train_loss"));
  for (const char* key : {"val_loss", "val_accuracy", "test_loss", "test_accuracy", "train_seconds", "images_per_second"}) {
    CAPTURE(key);
    CHECK(r->metrics.count(key) == 1);
  }
  MESSAGE("synthetic: val_accuracy " << r->metrics.at("val_accuracy") << ", test_accuracy " << r->metrics.at("test_accuracy")
                                     << ", val_loss " << rec.reports.front().second.at("val_loss") << " -> "
                                     << rec.reports.back().second.at("val_loss"));
  CHECK(r->metrics.at("val_accuracy") == rec.reports.back().second.at("val_accuracy"));
  CHECK(r->metrics.at("val_accuracy") > 0.9);
  CHECK(r->metrics.at("test_accuracy") > 0.9);
  CHECK(r->metrics.at("images_per_second") > 0.0);
}

TEST_CASE("mlp trainer: the same seed gives bit-identical metrics, another seed does not") {
  Synthetic data;
  auto settings = small_mlp(data);
  settings["hidden"] = {12, 8};
  settings["dropout"] = 0.2;
  settings["nesterov"] = true;
  settings["weight_decay"] = 1e-4;
  settings["epochs"] = 2;
  auto run = [&](uint64_t seed) {
    Recorder rec;
    MlpTrainer trainer;
    auto r = trainer.run(rec.context(settings, seed));
    REQUIRE(r.ok());
    return std::make_pair(r.value(), rec.reports);
  };
  auto [a, ra] = run(42);
  auto [b, rb] = run(42);
  auto [c, rc] = run(43);
  for (const char* key : {"val_loss", "val_accuracy", "test_loss", "test_accuracy", "train_loss"}) {
    CAPTURE(key);
    CHECK(a.metrics.at(key) == b.metrics.at(key));
  }
  REQUIRE(ra.size() == rb.size());
  for (size_t i = 0; i < ra.size(); ++i) {
    CHECK(ra[i].second.at("val_loss") == rb[i].second.at("val_loss"));
    CHECK(ra[i].second.at("train_loss") == rb[i].second.at("train_loss"));
  }
  CHECK(a.metrics.at("val_loss") != c.metrics.at("val_loss"));
}

TEST_CASE("mlp trainer: stop requests are honoured between epochs and inside one") {
  Synthetic data;
  SUBCASE("after the first report") {
    Recorder rec;
    auto ctx = rec.context(small_mlp(data));
    ctx.stop_requested = [&] { return !rec.reports.empty(); };
    auto r = MlpTrainer().run(ctx);
    REQUIRE(r.ok());
    CHECK(r->stopped);
    CHECK(r->step == 1);
    REQUIRE(rec.reports.size() == 1);
    CHECK(r->metrics.at("val_loss") == rec.reports[0].second.at("val_loss"));
    CHECK(r->metrics.count("test_accuracy") == 0);
  }
  SUBCASE("inside the first epoch") {
    Recorder rec;
    auto settings = small_mlp(data);
    settings["batch_size"] = 4;  // 180 batches per epoch
    auto ctx = rec.context(settings);
    int polls = 0;
    ctx.stop_requested = [&] { return ++polls >= 3; };
    auto r = MlpTrainer().run(ctx);
    REQUIRE(r.ok());
    CHECK(r->stopped);
    CHECK(r->step == 0);
    CHECK(rec.reports.empty());
    CHECK(polls == 3);
    CHECK(r->metrics.count("train_seconds") == 1);
  }
}

TEST_CASE("mlp trainer: max_train_samples, val_fraction and max_test_samples bound the data") {
  Synthetic data;
  auto settings = small_mlp(data);
  settings["max_train_samples"] = 1;
  auto r = MlpTrainer().run(Recorder().context(settings));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == Errc::kInvalidArgument);

  // 100 images in the pool, 10 of them validation: accuracies are multiples of 1/10.
  settings["max_train_samples"] = 100;
  settings["max_test_samples"] = 8;
  settings["epochs"] = 1;
  auto ok = MlpTrainer().run(Recorder().context(settings));
  REQUIRE(ok.ok());
  const double val10 = ok->metrics.at("val_accuracy") * 10.0;
  CHECK(val10 == doctest::Approx(std::round(val10)));
  const double test8 = ok->metrics.at("test_accuracy") * 8.0;
  CHECK(test8 == doctest::Approx(std::round(test8)));
}

TEST_CASE("mlp trainer: a diverging learning rate fails the trial") {
  Synthetic data;
  auto settings = small_mlp(data);
  settings["lr"] = 1e30;
  auto r = MlpTrainer().run(Recorder().context(settings));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == Errc::kFailed);
}

TEST_CASE("mlp trainer: bad settings are errors naming the setting") {
  Synthetic data;
  struct Case {
    const char* key;
    nlohmann::json value;
  };
  const Case cases[] = {
      {"activation", "swish"}, {"hidden", 0},        {"hidden", {256, 0}},      {"hidden", "wide"},
      {"batch_size", 0},       {"lr", -0.1},         {"lr", "fast"},            {"dropout", 1.0},
      {"momentum", 1.5},       {"val_fraction", 0.0}, {"epochs", 0},             {"epochs", 2.5},
      {"weight_decay", -1},    {"nesterov", "yes"},  {"data", data.dir.file("missing")}, {"layers", 3},
  };
  for (const auto& c : cases) {
    auto settings = small_mlp(data);
    settings[c.key] = c.value;
    if (std::string(c.key) == "layers") settings["hidden"] = {8, 8};  // a list of 2 with layers 3
    CAPTURE(settings.dump());
    auto r = MlpTrainer().run(Recorder().context(settings));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == Errc::kInvalidArgument);
    CHECK(names_setting(r.error(), c.key));
  }
  // A misspelled key is refused with a suggestion.
  auto settings = small_mlp(data);
  settings["lrr"] = 0.1;
  auto r = MlpTrainer().run(Recorder().context(settings));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == Errc::kInvalidArgument);
  CHECK(r.error().message().find("did you mean 'lr'") != std::string::npos);
}

TEST_CASE("mlp trainer: settings parse with defaults, int hidden and layers") {
  auto s = parse_mlp_settings({{"kind", "mlp"}});
  REQUIRE(s.ok());
  CHECK(s->hidden == std::vector<int64_t>{256});
  CHECK(s->data == kDefaultDataDir);
  CHECK(s->batch_size == 128);
  auto deep = parse_mlp_settings({{"hidden", 64}, {"layers", 3}, {"activation", "tanh"}, {"epochs", 2.0}});
  REQUIRE(deep.ok());
  CHECK(deep->hidden == std::vector<int64_t>{64, 64, 64});
  CHECK(deep->activation == "tanh");
  CHECK(deep->epochs == 2);
  auto none = parse_mlp_settings({{"hidden", nlohmann::json::array()}});
  REQUIRE(none.ok());
  CHECK(none->hidden.empty());
}

TEST_CASE("mlp trainer: a shared DatasetCache decodes the data once across trials") {
  Synthetic data;
  TrainerServices services;
  services.datasets = std::make_shared<DatasetCache>();
  auto trainer = make_trainer("mlp", services);
  REQUIRE(trainer.ok());
  auto settings = small_mlp(data);
  settings["epochs"] = 1;
  for (int i = 0; i < 3; ++i) {
    auto r = (*trainer)->run(Recorder().context(settings, static_cast<uint64_t>(i)));
    REQUIRE(r.ok());
  }
  CHECK(services.datasets->loads() == 1);
}

// ---------------------------------------------------------------------------------------------
// The sleep trainer

TEST_CASE("sleep trainer: zero seconds returns at once with every report") {
  SleepTrainer trainer;
  Recorder rec;
  auto ctx = rec.context({{"kind", "sleep"}, {"steps", 3}, {"metric", "loss"}, {"value", 2.5}});
  auto r = trainer.run(ctx);
  REQUIRE(r.ok());
  CHECK_FALSE(r->stopped);
  CHECK(r->step == 3);
  CHECK(r->metrics == protocol::Metrics{{"loss", 2.5}});
  REQUIRE(rec.reports.size() == 3);
  for (int i = 0; i < 3; ++i) {
    CHECK(rec.reports[static_cast<size_t>(i)].first == i + 1);
    CHECK(rec.reports[static_cast<size_t>(i)].second == protocol::Metrics{{"loss", 2.5}});
  }
  // Defaults: one step of {"value": 0}; thousands per second.
  TrialContext plain;
  plain.trainer = {{"kind", "sleep"}};
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 10000; ++i) {
    auto q = trainer.run(plain);
    REQUIRE(q.ok());
    REQUIRE(q->metrics.at("value") == 0.0);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE("10000 zero-second sleep trials in " << seconds << " s");
  CHECK(seconds < 1.0);
}

TEST_CASE("sleep trainer: waits the given time, spread over the steps") {
  Recorder rec;
  std::vector<double> at;
  auto ctx = rec.context({{"kind", "sleep"}, {"seconds", 0.2}, {"steps", 4}});
  const auto t0 = std::chrono::steady_clock::now();
  ctx.report = [&](int64_t, const protocol::Metrics&) {
    at.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  };
  auto r = SleepTrainer().run(ctx);
  REQUIRE(r.ok());
  REQUIRE(at.size() == 4);
  for (size_t i = 0; i < 4; ++i) CHECK(at[i] >= 0.05 * static_cast<double>(i + 1));
  CHECK(at.back() < 0.6);
}

TEST_CASE("sleep trainer: a stop request ends the wait promptly") {
  Recorder rec;
  auto ctx = rec.context({{"kind", "sleep"}, {"seconds", 20}, {"steps", 2}});
  std::atomic<bool> stop{false};
  ctx.stop_requested = [&] { return stop.load(); };
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    stop = true;
  });
  const auto t0 = std::chrono::steady_clock::now();
  auto r = SleepTrainer().run(ctx);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stopper.join();
  REQUIRE(r.ok());
  CHECK(r->stopped);
  CHECK(r->step == 0);
  CHECK(rec.reports.empty());
  CHECK(seconds < 1.0);
}

TEST_CASE("sleep trainer: bad settings are errors naming the setting") {
  const std::pair<const char*, nlohmann::json> cases[] = {
      {"seconds", -1}, {"seconds", "long"}, {"steps", 0}, {"steps", 1.5}, {"metric", ""}, {"metric", 3}, {"value", "x"},
  };
  for (const auto& [key, value] : cases) {
    TrialContext ctx;
    ctx.trainer = {{"kind", "sleep"}, {key, value}};
    CAPTURE(ctx.trainer.dump());
    auto r = SleepTrainer().run(ctx);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == Errc::kInvalidArgument);
    CHECK(names_setting(r.error(), key));
  }
  TrialContext ctx;
  ctx.trainer = {{"kind", "sleep"}, {"secnds", 1}};
  auto r = SleepTrainer().run(ctx);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message().find("did you mean 'seconds'") != std::string::npos);
}

TEST_CASE("sleep trainer: searched parameters override fixed settings") {
  Recorder rec;
  auto ctx = rec.context({{"kind", "sleep"}, {"value", 1.0}});
  ctx.params = {{"value", 4.0}};
  auto r = SleepTrainer().run(ctx);
  REQUIRE(r.ok());
  CHECK(r->metrics.at("value") == 4.0);
}

// ---------------------------------------------------------------------------------------------
// The factory

TEST_CASE("factory: known kinds are made, unknown kinds are listed in the error") {
  const auto kinds = trainer_kinds();
  CHECK(kinds == std::vector<std::string>{"cnn", "command", "function", "mlp", "sleep"});
  for (const auto& kind : kinds) {
    auto t = make_trainer(kind);
    REQUIRE(t.ok());
    CHECK((*t)->kind() == kind);
    auto specs = trainer_setting_specs(kind);
    REQUIRE(specs.ok());
    CHECK_FALSE((*specs)->empty());
  }
  auto bad = make_trainer("resnet");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code() == Errc::kInvalidArgument);
  CHECK(bad.error().message().find("mlp") != std::string::npos);
  CHECK(bad.error().message().find("sleep") != std::string::npos);
  CHECK(trainer_setting_specs("resnet").error().code() == Errc::kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------
// One declaration per setting (issue 10): the config table imports the kinds' declarations
// (trainer_settings.h), and the trainers read through the same ones.

TEST_CASE("settings: the factory makes every kind of the catalog, and the config knows exactly their settings") {
  std::vector<std::string> catalog;
  for (const auto& k : trainer_catalog()) catalog.push_back(k.kind);
  std::sort(catalog.begin(), catalog.end());
  CHECK(catalog == trainer_kinds());
  const auto kind_setting = config::find_settings("trainer.kind");
  REQUIRE(kind_setting.size() == 1);
  for (const auto& k : trainer_catalog()) {
    CAPTURE(k.kind);
    CHECK(std::count(kind_setting[0]->choices.begin(), kind_setting[0]->choices.end(), k.kind) == 1);
    std::set<std::string> declared, in_config;
    for (const auto& d : *k.settings) declared.insert(d.key);
    for (const auto* s : config::children("trainer"))
      if (s->scope.contains(k.kind)) in_config.insert(std::string(config::leaf_name(s->path)));
    CHECK(declared == in_config);
  }
}

TEST_CASE("capabilities: every setting a kind's capabilities name is one of its own declared settings") {
  // What config/, scheduler/ and workflow/ read through the catalog (the step setting a pbt stage
  // sets, the switches a stage turns on, the list a command declares) must be a setting of that
  // kind, of the type they read it as.
  auto declared = [](const TrainerKindDecl& k, const char* key) -> const SettingDecl* {
    for (const auto& d : *k.settings)
      if (d.key == key) return &d;
    return nullptr;
  };
  int steps = 0, predictions = 0, checkpoints = 0, own_ranks = 0;
  for (const auto& k : trainer_catalog()) {
    CAPTURE(k.kind);
    CHECK(trainer_capabilities(k.kind) == &k.can);
    const TrainerCapabilities& can = k.can;
    if (can.step_setting != nullptr) {
      const SettingDecl* d = declared(k, can.step_setting);
      REQUIRE(d != nullptr);
      CHECK(d->type == SettingType::kInt);
      ++steps;
    }
    for (const TrainerOutput* out : {&can.predictions, &can.checkpoints}) {
      if (out->switch_setting == nullptr) continue;
      CHECK(out->written);
      const SettingDecl* d = declared(k, out->switch_setting);
      REQUIRE(d != nullptr);
      CHECK(d->type == SettingType::kBool);
      CHECK(d->default_value == true);
    }
    if (can.provides_setting != nullptr) {
      // A kind declares in the config what it writes, or the catalog does: not both.
      CHECK_FALSE(can.predictions.written);
      CHECK_FALSE(can.checkpoints.written);
      const SettingDecl* d = declared(k, can.provides_setting);
      REQUIRE(d != nullptr);
      CHECK(d->type == SettingType::kValueList);
      CHECK(d->default_value == nlohmann::json::array());
    }
    if (can.command_setting != nullptr) {
      const SettingDecl* d = declared(k, can.command_setting);
      REQUIRE(d != nullptr);
      CHECK(d->type == SettingType::kCommandLine);  // a string, or the list form
    }
    predictions += can.predictions.written ? 1 : 0;
    checkpoints += can.checkpoints.written ? 1 : 0;
    own_ranks += can.starts_own_ranks ? 1 : 0;
  }
  CHECK(trainer_capabilities("no such kind") == nullptr);
  // The table: mlp and cnn count epochs, sleep and function steps, command max_step (the
  // step its program trains to; its steps are its reports').
  CHECK(steps == 5);
  CHECK(predictions == 2);
  CHECK(checkpoints == 2);
  CHECK(own_ranks == 1);
  CHECK(std::string(trainer_capabilities("mlp")->step_setting) == "epochs");
  CHECK(std::string(trainer_capabilities("function")->step_setting) == "steps");
  CHECK(std::string(trainer_capabilities("command")->step_setting) == "max_step");
  CHECK(std::string(trainer_capabilities("command")->checkpoints.directory) == "checkpoint");
  CHECK(trainer_capabilities("mlp")->checkpoints.directory == nullptr);
  CHECK(trainer_capabilities("command")->starts_own_ranks);
  // The command accepts what it declares, and [] (its default), through its own reader too.
  nlohmann::json settings = {{"command", "true"}, {"provides", {"predictions", "checkpoints"}}};
  SettingsReader reader("command", settings, command_setting_specs());
  CHECK(reader.check_known().ok());
  CHECK(reader.value("provides").ok());
  nlohmann::json none = {{"command", "true"}};
  CHECK(SettingsReader("command", none, command_setting_specs()).value("provides").value() == nlohmann::json::array());
}

TEST_CASE("settings: the trainer accepts the settings the config produces") {
  // The normalized trainer section of a config (every default applied, data_seed filled in)
  // passes the trainer's own check of every key and value.
  for (const auto& kind : trainer_kinds()) {
    CAPTURE(kind);
    const std::string required = kind == "command" ? ", command: 'true'" : "";
    // The function trainer takes exactly its x1..xd (branin: 2) from the space.
    const std::string space = kind == "function" ? "space: {x1: 0, x2: 1}\n" : "";
    // An objective the kind reports (the classifiers' val_accuracy, the function's value).
    const std::string metric = kind == "function" ? "value" : "val_accuracy";
    const std::string text = "name: t\nobjective: {metric: " + metric + "}\nsearch: {max_trials: 1}\n" + space +
                             "trainer: {kind: " + kind + required + "}\n";
    auto parsed = config::parse_config(text, "sync.yaml");
    REQUIRE_MESSAGE(parsed.ok(), parsed.error().message());
    auto specs = trainer_setting_specs(kind);
    REQUIRE(specs.ok());
    SettingsReader reader(kind, parsed->trainer, *specs.value());
    const auto known = reader.check_known();
    CHECK_MESSAGE(known.ok(), known.error().message());
    for (const auto& d : *specs.value()) {
      if (d.required || (d.default_value.is_null() && !reader.has(d.key.c_str()))) continue;  // mlp's layers
      auto v = reader.value(d.key.c_str());
      CHECK_MESSAGE(v.ok(), v.error().message());
    }
  }
}

namespace {

// Restores a kind's declarations, and the config table built from them, at the end of a test.
struct DeclarationsRestorer {
  std::vector<SettingDecl>* decls;
  std::vector<SettingDecl> saved;
  explicit DeclarationsRestorer(const std::string& kind)
      : decls(mutable_setting_specs_for_testing(kind)), saved(decls != nullptr ? *decls : std::vector<SettingDecl>{}) {}
  ~DeclarationsRestorer() {
    if (decls == nullptr) return;
    *decls = saved;
    config::reload_settings_for_testing();
  }
  SettingDecl& operator[](const std::string& key) {
    for (auto& d : *decls)
      if (d.key == key) return d;
    throw std::runtime_error("no setting " + key);
  }
};

std::string config_text(const std::string& trainer, const std::string& space = "") {
  return "name: t\nobjective: {metric: val_accuracy}\nsearch: {max_trials: 2}\n" + space + "trainer: " + trainer +
         "\n";
}

}  // namespace

TEST_CASE("settings: a bound and a default changed in the trainer's declaration change validate and the trainer") {
  // The shipped declaration: dropout in [0, 0.95], default 0.
  {
    auto parsed = config::parse_config(config_text("{kind: mlp, dropout: 0.6}"), "t.yaml");
    REQUIRE(parsed.ok());
    auto s = parse_mlp_settings(parsed->trainer);
    REQUIRE(s.ok());
    CHECK(s->dropout == 0.6);
    CHECK(parse_mlp_settings({{"kind", "mlp"}})->dropout == 0.0);
  }
  {
    // One change, in the one declaration (mlp_settings.cpp's entry, here changed in memory).
    DeclarationsRestorer mlp("mlp");
    REQUIRE(mlp.decls != nullptr);
    mlp["dropout"].max = 0.5;
    mlp["dropout"].default_value = 0.25;
    config::reload_settings_for_testing();

    // What validate accepts: the new bound, at the key's file:line:col, in the value and in the space.
    auto above = config::parse_config(config_text("{kind: mlp, dropout: 0.6}"), "t.yaml");
    REQUIRE_FALSE(above.ok());
    CHECK(above.error().message() == "t.yaml:4:22: trainer.dropout: 0.6 is above the maximum 0.5");
    auto searched = config::parse_config(
        config_text("{kind: mlp}", "space: {dropout: {type: float, low: 0.1, high: 0.7}}\n"), "t.yaml");
    REQUIRE_FALSE(searched.ok());
    CHECK(searched.error().message() == "t.yaml:4:42: space.dropout.high: 0.7 is above the maximum 0.5 (trainer.dropout)");
    CHECK(config::parse_config(config_text("{kind: mlp, dropout: 0.5}"), "t.yaml").ok());

    // What the trainer receives: the new default through the config and without it, and the new
    // bound when it reads a value the config never saw.
    auto defaults = config::parse_config(config_text("{kind: mlp}"), "t.yaml");
    REQUIRE(defaults.ok());
    CHECK(defaults->trainer["dropout"] == 0.25);
    auto received = parse_mlp_settings(defaults->trainer);
    REQUIRE(received.ok());
    CHECK(received->dropout == 0.25);
    CHECK(parse_mlp_settings({{"kind", "mlp"}})->dropout == 0.25);
    auto refused = parse_mlp_settings({{"kind", "mlp"}, {"dropout", 0.6}});
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().message() == "mlp trainer: setting 'dropout' = 0.6: must be in [0, 0.5]");
    // The reference documents it.
    CHECK(config::reference_yaml().find("[number 0..0.5, default: 0.25]") != std::string::npos);
  }
  // Restored: the shipped bound again.
  CHECK(config::parse_config(config_text("{kind: mlp, dropout: 0.6}"), "t.yaml").ok());
  CHECK(parse_mlp_settings({{"kind", "mlp"}, {"dropout", 0.6}}).ok());
}

// ---------------------------------------------------------------------------------------------
// .npy files (common/npy.h): the master's ensemble stage reads what trial processes wrote, so a
// damaged or hostile file is an error naming it, never a crash or a huge allocation.

namespace {

// A .npy file of `descr`, `shape` (header text) and `data_bytes` zero bytes, written by hand.
std::string npy_file(const TempDir& dir, const std::string& name, const std::string& dict, size_t data_bytes,
                     char major = 1) {
  std::string header = dict;
  const size_t prefix = major == 1 ? 10 : 12;
  header.append((64 - (prefix + header.size() + 1) % 64) % 64, ' ');
  header.push_back('\n');
  std::string bytes = std::string("\x93NUMPY", 6) + major + '\0';
  const uint32_t len = static_cast<uint32_t>(header.size());
  bytes.push_back(static_cast<char>(len & 0xff));
  bytes.push_back(static_cast<char>((len >> 8) & 0xff));
  if (major != 1) bytes.push_back(static_cast<char>((len >> 16) & 0xff)), bytes.push_back(static_cast<char>(len >> 24));
  bytes += header;
  bytes.append(data_bytes, '\0');
  std::ofstream(dir.file(name), std::ios::binary) << bytes;
  return dir.file(name);
}

}  // namespace

TEST_CASE("npy: float32 and int64 arrays round-trip; numpy's other header versions are read") {
  TempDir dir;
  const std::vector<float> probs = {0.25f, 0.75f, 1.0f, 0.0f, 0.5f, 0.5f};
  REQUIRE(write_npy_f32(dir.file("p.npy"), probs.data(), 3, 2).ok());
  int64_t rows = 0, cols = 0;
  auto back = read_npy_f32(dir.file("p.npy"), rows, cols);
  REQUIRE(back.ok());
  CHECK(*back == probs);
  CHECK(rows == 3);
  CHECK(cols == 2);
  const std::vector<int64_t> labels = {5, -1, 1LL << 40};
  REQUIRE(write_npy_i64(dir.file("l.npy"), labels.data(), 3).ok());
  CHECK(*read_npy_i64(dir.file("l.npy")) == labels);
  REQUIRE(write_npy_i64(dir.file("empty.npy"), nullptr, 0).ok());
  CHECK(read_npy_i64(dir.file("empty.npy"))->empty());
  CHECK_FALSE(fs::exists(dir.file("l.npy.tmp")));

  const std::string v2 = npy_file(dir, "v2.npy", "{'descr': '<i8', 'fortran_order': False, 'shape': (4,), }", 32, 2);
  auto read = read_npy_i64(v2);
  REQUIRE_MESSAGE(read.ok(), (read.ok() ? "" : read.error().message()));
  CHECK(read->size() == 4);
}

// A user's program writes what its framework gives: uint8 labels read from an IDX file, bool labels
// of a binary task, float16 probabilities of a mixed-precision model. They were refused ("dtype
// '|u1', expected '<i8' or '<i4'") and the ensemble stage failed.
TEST_CASE("npy: a program's files of any little-endian float or integer width are read as doubles and int64") {
  TempDir dir;
  auto written = [&](const std::string& name, const char* descr, const std::string& shape, const auto& values) {
    REQUIRE(npy_detail::write(dir.file(name), descr, shape, values.data(), values.size() * sizeof(values[0])).ok());
    return dir.file(name);
  };
  auto ints = [&](const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    auto r = read_npy_int(fd, path);
    ::close(fd);
    return r;
  };
  auto reals = [&](const std::string& path, int64_t& rows, int64_t& cols) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    auto r = read_npy_real(fd, path, rows, cols);
    ::close(fd);
    return r;
  };
  const std::vector<int64_t> expected = {0, 9, 255};
  CHECK(*ints(written("u1.npy", "|u1", "(3,)", std::vector<uint8_t>{0, 9, 255})) == expected);
  CHECK(*ints(written("u2.npy", "<u2", "(3,)", std::vector<uint16_t>{0, 9, 255})) == expected);
  CHECK(*ints(written("u4.npy", "<u4", "(3,)", std::vector<uint32_t>{0, 9, 255})) == expected);
  CHECK(*ints(written("u8.npy", "<u8", "(3,)", std::vector<uint64_t>{0, 9, 255})) == expected);
  CHECK(*ints(written("i1.npy", "|i1", "(2,)", std::vector<int8_t>{-3, 7})) == std::vector<int64_t>{-3, 7});
  CHECK(*ints(written("i2.npy", "<i2", "(2,)", std::vector<int16_t>{-3, 7})) == std::vector<int64_t>{-3, 7});
  CHECK(*ints(written("b1.npy", "|b1", "(3,)", std::vector<uint8_t>{1, 0, 1})) == std::vector<int64_t>{1, 0, 1});
  auto huge = ints(written("u8big.npy", "<u8", "(2,)", std::vector<uint64_t>{1, uint64_t{1} << 63}));
  REQUIRE_FALSE(huge.ok());
  CHECK(huge.error().message().find("element 1 is above 2^63 - 1") != std::string::npos);
  // float16: 1, -0.5, 1/3 to 11 bits, the smallest subnormal, infinity, 65504 (the largest).
  int64_t rows = 0, cols = 0;
  auto half = reals(written("f2.npy", "<f2", "(3, 2)", std::vector<uint16_t>{0x3C00, 0xB800, 0x3555, 0x0001, 0x7C00, 0x7BFF}),
                    rows, cols);
  REQUIRE(half.ok());
  CHECK(rows == 3);
  CHECK(cols == 2);
  CHECK((*half)[0] == 1.0);
  CHECK((*half)[1] == -0.5);
  CHECK((*half)[2] == doctest::Approx(1.0 / 3).epsilon(1e-3));
  CHECK((*half)[3] == std::ldexp(1.0, -24));
  CHECK(std::isinf((*half)[4]));
  CHECK((*half)[5] == 65504.0);
  CHECK(*reals(written("f8.npy", "<f8", "(1, 2)", std::vector<double>{0.25, 0.75}), rows, cols) == std::vector<double>{0.25, 0.75});
  // Still refused: big-endian, complex, strings; floats as labels and integers as probabilities.
  CHECK_FALSE(ints(written("f4l.npy", "<f4", "(1,)", std::vector<float>{1})).ok());
  CHECK_FALSE(reals(written("i8p.npy", "<i8", "(1, 1)", std::vector<int64_t>{1}), rows, cols).ok());
  CHECK_FALSE(ints(written("be.npy", ">i4", "(1,)", std::vector<int32_t>{1})).ok());
}

TEST_CASE("npy: truncated, foreign, wrong-dtype or oversized files are errors naming the file") {
  TempDir dir;
  const std::vector<float> probs(12, 0.5f);
  REQUIRE(write_npy_f32(dir.file("good.npy"), probs.data(), 4, 3).ok());
  std::string good;
  {
    std::ifstream in(dir.file("good.npy"), std::ios::binary);
    good.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(dir.file(name), std::ios::binary) << bytes;
    return dir.file(name);
  };
  int64_t rows = 0, cols = 0;
  auto f32_error = [&](const std::string& path, const std::string& says) {
    CAPTURE(path);
    auto r = read_npy_f32(path, rows, cols);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == Errc::kInvalidArgument);
    CHECK(r.error().message().find(path) != std::string::npos);
    CHECK_MESSAGE(r.error().message().find(says) != std::string::npos, r.error().message());
  };
  f32_error(write("short.npy", good.substr(0, good.size() - 4)), "expected");  // a truncated row
  f32_error(write("long.npy", good + "xx"), "expected");
  f32_error(write("header.npy", good.substr(0, 40)), "truncated header");
  f32_error(write("magic.npy", "\x93NUMPZ" + good.substr(6)), "not a .npy");
  f32_error(write("tiny.npy", "\x93NU"), "not a .npy");
  std::string v9 = good;
  v9[6] = 9;
  f32_error(write("v9.npy", v9), "version 9");
  f32_error(npy_file(dir, "f8.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (4, 3), }", 96), "dtype '<f8'");
  f32_error(npy_file(dir, "big.npy", "{'descr': '>f4', 'fortran_order': False, 'shape': (4, 3), }", 48), "dtype");
  f32_error(npy_file(dir, "fortran.npy", "{'descr': '<f4', 'fortran_order': True, 'shape': (4, 3), }", 48), "C order");
  f32_error(npy_file(dir, "3d.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2, 3), }", 48), "shape");
  f32_error(npy_file(dir, "neg.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (-4, 3), }", 48), "shape");
  f32_error(npy_file(dir, "noshape.npy", "{'descr': '<f4', 'fortran_order': False, }", 48), "shape");
  // An element count that would allocate gigabytes is refused before any allocation.
  f32_error(npy_file(dir, "huge.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (100000, 100000), }", 0),
            "elements");
  f32_error(npy_file(dir, "overflow.npy",
                     "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999, 3), }", 0), "shape");
  f32_error(npy_file(dir, "1d.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (12,), }", 48), "2-D");
  // A header length beyond the bound (version 2's 4-byte length).
  std::string long_header = std::string("\x93NUMPY\x02\x00", 8) + std::string("\xff\xff\xff\x7f", 4) + "{";
  f32_error(write("longheader.npy", long_header), "too long");
  // The int64 reader wants '<i8' and one dimension.
  auto i64 = read_npy_i64(dir.file("good.npy"));
  REQUIRE_FALSE(i64.ok());
  CHECK(i64.error().message().find("dtype '<f4'") != std::string::npos);
  auto missing = read_npy_i64(dir.file("none.npy"));
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code() == Errc::kNotFound);
  CHECK(missing.error().message().find("none.npy") != std::string::npos);
}
