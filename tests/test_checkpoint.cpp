// Checkpoints as model files (nn/checkpoint.h) and network surgery (nn/network.h): the layer
// manifest, model identity versus run identity, another trial's checkpoint loading bit-identically,
// a different model refused naming its first mismatching layer, layout independence (pipeline stage
// files joined into one model and cut back into stages), frozen layers under every optimizer, and a
// replaced output layer. (The file format's damage cases and resume are in
// test_classifier_training.cpp.)
#include <doctest/doctest.h>

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/rng.h"
#include "nn/checkpoint.h"
#include "nn/network.h"
#include "nn/optimizer.h"
#include "tests/synthetic_images.h"
#include "tests/temp_dir.h"
#include "trainers/classifier_training.h"
#include "trainers/mlp_trainer.h"
#include "trainers/pipeline_partition.h"

using namespace hpctune;
using namespace hpctune::nn;
using hpctune::testing::synthetic;
using hpctune::testing::TempDir;

namespace {

LayerSpec dense(int64_t units, const std::string& act = "relu") { return LayerSpec{.kind = "dense", .units = units, .activation = act}; }
LayerSpec conv(int64_t filters, int64_t kernel) { return LayerSpec{.kind = "conv", .filters = filters, .kernel = kernel}; }
LayerSpec pool() { return LayerSpec{.kind = "maxpool", .size = 2}; }
LayerSpec dropout(double rate) { return LayerSpec{.kind = "dropout", .rate = rate}; }

Network make_net(Shape input, const std::vector<LayerSpec>& specs, int64_t classes, uint64_t seed) {
  auto created = Network::create(input, specs, classes);
  REQUIRE_MESSAGE(created.ok(), created.error().message());
  Network net = std::move(created).value();
  Rng rng(seed);
  net.init(rng);
  return net;
}

// A small CNN on 8x8 images: conv, maxpool, conv, dense, dropout, output.
std::vector<LayerSpec> cnn_specs(double rate = 0.2) { return {conv(8, 3), pool(), conv(8, 3), dense(16), dropout(rate)}; }
constexpr Shape kImage{1, 8, 8};

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<float> pattern(size_t n, float base) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = base + static_cast<float>(i) * 0.001f;
  return v;
}

Result<trainers::TrialResult> run_mlp(const nlohmann::json& settings, const trainers::ImageClassificationData& data,
                                      const std::string& dir, uint64_t seed) {
  trainers::TrialContext ctx;
  ctx.trial_id = static_cast<int64_t>(seed);
  ctx.seed = seed;
  ctx.trainer = settings;
  ctx.trial_dir = dir;
  ctx.report = [](int64_t, const protocol::Metrics&) {};
  auto s = trainers::parse_mlp_settings(settings);
  if (!s.ok()) return std::move(s).error();
  return trainers::train_mlp(*s, data, ctx);
}

// zlib's CRC-32, for hand-made files.
uint32_t crc32_of(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}

}  // namespace

TEST_CASE("checkpoint: a version 1 file (no manifest) still resumes its own run but loads into no other network") {
  TempDir dir;
  const Network net = make_net(kImage, cnn_specs(), 3, 1);
  Checkpoint c;
  c.run_hash = 0xabc;
  c.epoch = 1;
  c.params.assign(net.params().begin(), net.params().end());
  REQUIRE(write_checkpoint(dir.file("v2.bin"), c).ok());
  // The version 2 payload without a manifest ends with u64 model hash 0, u64 2, "{}": drop them.
  std::ifstream in(dir.file("v2.bin"), std::ios::binary);
  std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  bytes.resize(bytes.size() - 18);
  const uint32_t version = 1;
  const uint64_t payload = bytes.size() - 40;
  std::memcpy(bytes.data() + 8, &version, 4);
  std::memcpy(bytes.data() + 24, &payload, 8);
  const uint32_t sum = crc32_of(bytes.data() + 40, bytes.size() - 40);
  std::memcpy(bytes.data() + 32, &sum, 4);
  std::ofstream(dir.file("v1.bin"), std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                           static_cast<std::streamsize>(bytes.size()));
  auto r = read_checkpoint(dir.file("v1.bin"));
  REQUIRE_MESSAGE(r.ok(), r.error().message());
  CHECK(r->run_hash == 0xabc);
  CHECK(r->epoch == 1);
  CHECK(r->manifest.empty());
  CHECK(r->model_hash == 0);
  CHECK(same_bits(r->params, net.params()));
  Network other = make_net(kImage, cnn_specs(), 3, 2);
  Status st = load_model(other, *r);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().message().find("no layer manifest (a version 1 file)") != std::string::npos);
}

TEST_CASE("checkpoint: a manifest that does not fit, or is not the model its hash names, is refused") {
  TempDir dir;
  const Network net = make_net(kImage, cnn_specs(), 3, 1);
  REQUIRE(write_checkpoint(dir.file("good.bin"), checkpoint_of(net, 0, net.num_layers())).ok());
  std::ifstream in(dir.file("good.bin"), std::ios::binary);
  const std::vector<uint8_t> good{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  // Edits the manifest's JSON in place (same length) and re-seals the checksum, as a hand-made
  // file would be: only the manifest checks can catch it.
  auto edited = [&](const std::string& from, const std::string& to) {
    REQUIRE(from.size() == to.size());
    std::string text(good.begin(), good.end());
    const size_t at = text.find(from);
    REQUIRE(at != std::string::npos);
    text.replace(at, from.size(), to);
    std::vector<uint8_t> bytes(text.begin(), text.end());
    const uint32_t sum = crc32_of(bytes.data() + 40, bytes.size() - 40);
    std::memcpy(bytes.data() + 32, &sum, 4);
    std::ofstream(dir.file("bad.bin"), std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    auto r = read_checkpoint(dir.file("bad.bin"));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == Errc::kInvalidArgument);
    return r.error().message();
  };
  REQUIRE(read_checkpoint(dir.file("good.bin")).ok());
  CHECK(edited("\"last\":6", "\"last\":9").find("malformed layer manifest") != std::string::npos);
  CHECK(edited("\"last\":6", "\"last\":5").find("parameters where the manifest's layers [0, 5) have") != std::string::npos);
  CHECK(edited("[8,1,3,3]", "[8,1,3,5]").find("its model hash is not its manifest's") != std::string::npos);
  CHECK(edited("[8,1,3,3]", "[8,1,3,0]").find("malformed layer manifest") != std::string::npos);
  CHECK(edited("\"input\":[1,", "\"input\":[-1").find("malformed layer manifest") != std::string::npos);
}

TEST_CASE("checkpoint: the layer manifest names every layer's kind and parameter shapes, and round-trips") {
  const Network net = make_net(kImage, cnn_specs(), 3, 1);
  const Manifest m = manifest_of(net);
  REQUIRE(m.layers.size() == 6);
  CHECK(m.input == kImage);
  CHECK(m.layers[0].kind == "conv");
  CHECK(m.layers[0].name == "conv 3x3 8 same relu");
  CHECK(m.layers[0].shapes == std::vector<std::vector<int64_t>>{{8, 1, 3, 3}, {8}});
  CHECK(m.layers[1].kind == "maxpool");
  CHECK(m.layers[1].shapes.empty());
  CHECK(m.layers[2].shapes == std::vector<std::vector<int64_t>>{{8, 8, 3, 3}, {8}});
  CHECK(m.layers[3].shapes == std::vector<std::vector<int64_t>>{{8 * 4 * 4, 16}, {16}});
  CHECK(m.layers[4].kind == "dropout");
  CHECK(m.layers[5].name == "dense 3 none");
  CHECK(m.layers[5].shapes == std::vector<std::vector<int64_t>>{{16, 3}, {3}});
  CHECK(m.num_params(0, 6) == net.num_params());
  for (size_t i = 0; i < 6; ++i) CHECK(m.layers[i].num_params() == net.layer(i).num_params());

  TempDir dir;
  Checkpoint c = checkpoint_of(net, 0, net.num_layers());
  c.run_hash = 77;
  c.epoch = 2;
  c.optimizer.buffers = {pattern(net.num_params(), 0.5f)};
  REQUIRE(write_checkpoint(dir.file("model.bin"), c).ok());
  auto r = read_checkpoint(dir.file("model.bin"));
  REQUIRE_MESSAGE(r.ok(), r.error().message());
  CHECK(r->manifest.layers == m.layers);
  CHECK(r->manifest.input == kImage);
  CHECK(r->first_layer == 0);
  CHECK(r->last_layer == 6);
  CHECK(r->run_hash == 77);
  CHECK(r->model_hash == model_identity(m));
  CHECK(same_bits(r->params, net.params()));
  CHECK(r->optimizer.buffers == c.optimizer.buffers);

  // Parameters that do not fit the manifest are never written.
  Checkpoint bad = c;
  bad.params.pop_back();
  auto st = write_checkpoint(dir.file("bad.bin"), bad);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code() == Errc::kInvalidArgument);
  CHECK_FALSE(std::filesystem::exists(dir.file("bad.bin")));
}

TEST_CASE("checkpoint: the model identity is the architecture, not the seed, the dropout rate or the layout") {
  const uint64_t id = model_identity(manifest_of(make_net(kImage, cnn_specs(0.2), 3, 1)));
  CHECK(model_identity(manifest_of(make_net(kImage, cnn_specs(0.2), 3, 99))) == id);  // another seed
  CHECK(model_identity(manifest_of(make_net(kImage, cnn_specs(0.5), 3, 1))) == id);   // another dropout rate
  CHECK(model_identity(manifest_of(make_net(kImage, cnn_specs(), 4, 1))) != id);      // another head
  CHECK(model_identity(manifest_of(make_net(Shape{1, 9, 9}, cnn_specs(), 3, 1))) != id);
  auto other = cnn_specs();
  other[3].activation = "tanh";
  CHECK(model_identity(manifest_of(make_net(kImage, other, 3, 1))) != id);
  other = cnn_specs();
  other[2].filters = 16;
  CHECK(model_identity(manifest_of(make_net(kImage, other, 3, 1))) != id);
}

TEST_CASE("checkpoint: another trial's checkpoint of the same model loads bit-identically; another model is refused "
          "naming its first mismatching layer") {
  const auto data = synthetic(300, 40);  // 8x8 images, 4 classes
  const nlohmann::json settings = {{"kind", "mlp"}, {"hidden", {24}}, {"dropout", 0.1}, {"lr", 0.05},
                                   {"batch_size", 32}, {"epochs", 1}, {"save_predictions", false}};
  TempDir a_dir, b_dir;
  REQUIRE(run_mlp(settings, data, a_dir.path, 11).ok());
  REQUIRE(run_mlp(settings, data, b_dir.path, 12).ok());
  auto a = read_trial_checkpoint(a_dir.path);
  auto b = read_trial_checkpoint(b_dir.path);
  REQUIRE_MESSAGE(a.ok(), a.error().message());
  REQUIRE_MESSAGE(b.ok(), b.error().message());
  CHECK(a->run_hash == 0);  // exports resume nothing ...
  CHECK(read_checkpoint(checkpoint_path(a_dir.path, 0))->run_hash !=
        read_checkpoint(checkpoint_path(b_dir.path, 0))->run_hash);  // ... and the two runs differ,
  CHECK(a->model_hash == b->model_hash);                            // their model does not
  TempDir empty;
  CHECK(read_trial_checkpoint(empty.path).error().code() == Errc::kNotFound);
  CHECK_FALSE(same_bits(a->params, b->params));

  // Trial A's network (as trial A builds it) takes trial B's weights, bit for bit.
  const std::vector<LayerSpec> specs = {dense(24), dropout(0.1)};
  Network net = make_net(Shape{1, 8, 8}, specs, 4, 11);
  Status st = load_model(net, *b);
  REQUIRE_MESSAGE(st.ok(), st.error().message());
  CHECK(same_bits(net.params(), b->params));
  // A dropout rate is no part of the model.
  Network other_rate = make_net(Shape{1, 8, 8}, {dense(24), dropout(0.4)}, 4, 5);
  CHECK(load_model(other_rate, *b).ok());

  SUBCASE("another width at layer 0") {
    Network wide = make_net(Shape{1, 8, 8}, {dense(32), dropout(0.1)}, 4, 5);
    const std::vector<float> before(wide.params().begin(), wide.params().end());
    st = load_model(wide, *b);
    REQUIRE_FALSE(st.ok());
    CHECK(st.error().code() == Errc::kInvalidArgument);
    CHECK(st.error().message() ==
          "checkpoint of another model: layer 0 'dense 32 relu': expected [64x32, 32], found 'dense 24 relu' [64x24, 24]");
    CHECK(same_bits(wide.params(), before));  // nothing loaded
  }
  SUBCASE("an extra hidden layer: the first difference is layer 2") {
    Network deeper = make_net(Shape{1, 8, 8}, {dense(24), dropout(0.1), dense(10)}, 4, 5);
    st = load_model(deeper, *b);
    REQUIRE_FALSE(st.ok());
    CHECK(st.error().message() ==
          "checkpoint of another model: layer 2 'dense 10 relu': expected [24x10, 10], found 'dense 4 none' [24x4, 4]");
  }
  SUBCASE("another input shape") {
    Network bigger = make_net(Shape{1, 9, 9}, specs, 4, 5);
    st = load_model(bigger, *b);
    REQUIRE_FALSE(st.ok());
    CHECK(st.error().message() == "checkpoint of another model: the input shape: expected 1x9x9, found 1x8x8");
  }
  SUBCASE("fewer layers in the checkpoint") {
    Network deeper = make_net(Shape{1, 8, 8}, {dense(24), dropout(0.1), dense(4, "none"), dense(8)}, 4, 5);
    st = load_model(deeper, *b);
    REQUIRE_FALSE(st.ok());
    CHECK(st.error().message().find("layer 3 'dense 8 relu': expected [4x8, 8], found no layer (the checkpoint's "
                                    "model has 3 layers)") != std::string::npos);
  }
}

TEST_CASE("checkpoint: stage files of a pipeline join into one model and a model file cuts into stages, "
          "whatever the layout") {
  const Network net = make_net(kImage, cnn_specs(), 3, 1);
  const std::vector<float> momentum = pattern(net.num_params(), 0.25f);
  for (int stages : {1, 2, 3}) {
    CAPTURE(stages);
    auto bounds = trainers::pipeline_stage_bounds(net, stages);
    REQUIRE(bounds.ok());
    TempDir dir;
    // What the ranks of a pipeline write: each stage its own layers (checkpoint_of) and optimizer state.
    for (int s = 0; s < stages; ++s) {
      Checkpoint c = checkpoint_of(net, (*bounds)[s], (*bounds)[s + 1]);
      c.run_hash = 100 + static_cast<uint64_t>(s);  // the stage is part of the run identity
      c.epoch = 3;
      c.step = 30;
      c.optimizer.steps = 30;
      const auto [offset, count] = net.param_range((*bounds)[s], (*bounds)[s + 1]);
      c.optimizer.buffers = {std::vector<float>(momentum.begin() + static_cast<long>(offset),
                                                momentum.begin() + static_cast<long>(offset + count))};
      REQUIRE(write_checkpoint(checkpoint_path(dir.path, s), c).ok());
    }
    auto whole = read_trial_checkpoint(dir.path);
    REQUIRE_MESSAGE(whole.ok(), whole.error().message());
    CHECK(whole->first_layer == 0);
    CHECK(whole->last_layer == net.num_layers());
    CHECK(whole->epoch == 3);
    CHECK(same_bits(whole->params, net.params()));
    REQUIRE(whole->optimizer.buffers.size() == 1);
    CHECK(same_bits(whole->optimizer.buffers[0], momentum));

    // The single-file export loads into a one-rank network.
    REQUIRE(export_checkpoint(dir.path, dir.file("model.bin")).ok());
    Network one = make_net(kImage, cnn_specs(), 3, 42);
    REQUIRE(load_model(one, *read_checkpoint(dir.file("model.bin"))).ok());
    CHECK(same_bits(one.params(), net.params()));

    // And back: the model file cut into another pipeline's stages, each loaded by its rank.
    const int other = stages == 1 ? 2 : 1;
    auto to = trainers::pipeline_stage_bounds(net, other);
    REQUIRE(to.ok());
    Network rank = make_net(kImage, cnn_specs(), 3, 43);
    for (int s = 0; s < other; ++s) {
      const size_t first = (*to)[s], last = (*to)[s + 1];
      auto part = slice_checkpoint(*whole, first, last);
      REQUIRE(part.ok());
      REQUIRE(write_checkpoint(dir.file("stage.bin"), *part).ok());
      auto read = read_checkpoint(dir.file("stage.bin"));
      REQUIRE(read.ok());
      REQUIRE(load_layers(rank, *read, first, last - first).ok());
      const auto [offset, count] = net.param_range(first, last);
      CHECK(same_bits(rank.params().subspan(offset, count), net.params().subspan(offset, count)));
      CHECK(same_bits(read->optimizer.buffers[0], std::span<const float>(momentum).subspan(offset, count)));
      if (first > 0) {
        // A stage's file holds its own layers only.
        auto st = load_layers(rank, *read, 0, 1);
        REQUIRE_FALSE(st.ok());
        CHECK(st.error().message().find("checkpoint holds layers [" + std::to_string(first)) == 0);
      }
    }
    CHECK(same_bits(rank.params(), net.params()));
  }

  SUBCASE("stage files that do not tile the model, or are of different epochs, are refused") {
    auto bounds = trainers::pipeline_stage_bounds(net, 3);
    REQUIRE(bounds.ok());
    std::vector<Checkpoint> parts;
    for (int s = 0; s < 3; ++s) parts.push_back(checkpoint_of(net, (*bounds)[s], (*bounds)[s + 1]));
    auto gap = merge_checkpoints({parts[0], parts[2]});
    REQUIRE_FALSE(gap.ok());
    CHECK(gap.error().message().find("does not start at layer " + std::to_string((*bounds)[1])) != std::string::npos);
    auto short_of = merge_checkpoints({parts[0], parts[1]});
    REQUIRE_FALSE(short_of.ok());
    CHECK(short_of.error().message().find("cover layers [0, " + std::to_string((*bounds)[2]) + ")") != std::string::npos);
    parts[1].epoch = 5;
    auto epochs = merge_checkpoints(parts);
    REQUIRE_FALSE(epochs.ok());
    CHECK(epochs.error().message().find("epoch 5") != std::string::npos);
    parts[1].epoch = 0;
    CHECK(merge_checkpoints({parts[2], parts[0], parts[1]}).ok());  // any order
  }
}

TEST_CASE("network surgery: frozen layers stay bit-for-bit, optimizer state included, under every optimizer") {
  const std::vector<LayerSpec> specs = {dense(12), dense(8, "tanh")};
  OptimizerOptions sgd{.kind = OptimizerKind::kSgd, .momentum = 0.9, .weight_decay = 1e-2};
  OptimizerOptions nesterov = sgd;
  nesterov.nesterov = true;
  OptimizerOptions plain{.kind = OptimizerKind::kSgd};
  OptimizerOptions adam{.kind = OptimizerKind::kAdam, .weight_decay = 1e-2};
  OptimizerOptions adamw{.kind = OptimizerKind::kAdamW, .weight_decay = 1e-2};
  for (const OptimizerOptions& o : {sgd, nesterov, plain, adam, adamw}) {
    CAPTURE(optimizer_kind_name(o.kind));
    CAPTURE(o.nesterov);
    Network net = make_net(Shape{1, 8, 8}, specs, 3, 2);
    REQUIRE(net.freeze(2).ok());
    CHECK(net.frozen_layers() == 2);
    const auto [frozen_offset, frozen_count] = net.param_range(0, 2);
    REQUIRE(frozen_offset == 0);
    const std::vector<float> before(net.params().begin(), net.params().end());
    Optimizer opt(net.num_params(), o);
    Rng grad_rng(7);
    for (int step = 0; step < 4; ++step) {
      // Gradients everywhere, frozen layers included: the optimizer alone must leave them be.
      for (float& g : net.grads()) g = static_cast<float>(grad_rng.normal() * 0.1);
      opt.step(net.params(), net.grads(), net.blocks(), 0.05f);
    }
    CHECK(same_bits(net.params().subspan(0, frozen_count), std::span<const float>(before).subspan(0, frozen_count)));
    for (const auto& buffer : opt.state().buffers) {
      CHECK(std::all_of(buffer.begin(), buffer.begin() + static_cast<long>(frozen_count), [](float v) { return v == 0.0f; }));
      CHECK(std::any_of(buffer.begin() + static_cast<long>(frozen_count), buffer.end(), [](float v) { return v != 0.0f; }));
    }
    // The output layer trained: every one of its parameters moved.
    const auto [head_offset, head_count] = net.param_range(2, 3);
    for (size_t i = head_offset; i < head_offset + head_count; ++i) CHECK(net.params()[i] != before[i]);
  }

  Network net = make_net(Shape{1, 8, 8}, specs, 3, 2);
  CHECK(net.freeze(4).error().code() == Errc::kInvalidArgument);
  REQUIRE(net.freeze(1).ok());
  size_t frozen_blocks = 0;
  for (const ParamBlock& b : net.blocks()) frozen_blocks += b.frozen;
  CHECK(frozen_blocks == 2);  // the first layer's weights and biases
  REQUIRE(net.freeze(0).ok());
  for (const ParamBlock& b : net.blocks()) CHECK_FALSE(b.frozen);
}

TEST_CASE("network surgery: backward computes no gradients for frozen layers unless an input gradient is asked for") {
  const std::vector<LayerSpec> specs = {conv(8, 3), pool(), dense(12), dense(8, "tanh")};
  Rng data_rng(5);
  std::vector<float> x(6 * 64);
  for (auto& v : x) v = static_cast<float>(data_rng.normal());
  const std::vector<int32_t> y = {0, 1, 2, 0, 1, 2};
  Network all = make_net(kImage, specs, 3, 2);
  Network some = make_net(kImage, specs, 3, 2);
  REQUIRE(some.freeze(3).ok());
  Rng r1(1), r2(1);
  const BatchStats a = all.forward_backward(x.data(), y.data(), 6, 1.0f / 6, r1);
  const BatchStats b = some.forward_backward(x.data(), y.data(), 6, 1.0f / 6, r2);
  CHECK(a.loss_sum == b.loss_sum);
  const size_t frozen = some.param_range(0, 3).second;
  CHECK(std::all_of(some.grads().begin(), some.grads().begin() + static_cast<long>(frozen), [](float g) { return g == 0.0f; }));
  CHECK(std::any_of(all.grads().begin(), all.grads().begin() + static_cast<long>(frozen), [](float g) { return g != 0.0f; }));
  CHECK(same_bits(some.grads().subspan(frozen), all.grads().subspan(frozen)));

  // A later pipeline stage's caller asks for dx: the frozen layers are run through, as before.
  Network::Pass pa, pb;
  std::vector<float> dy(6 * 3, 0.1f), dxa(6 * 64), dxb(6 * 64);
  all.zero_grads();
  some.zero_grads();
  Rng r3(1), r4(1);
  all.forward(0, 5, x.data(), 6, true, &r3, pa);  // training mode: pooling keeps its workspace
  some.forward(0, 5, x.data(), 6, true, &r4, pb);
  all.backward(dy.data(), dxa.data(), pa);
  some.backward(dy.data(), dxb.data(), pb);
  CHECK(same_bits(dxa, dxb));
  CHECK(same_bits(some.grads(), all.grads()));
}

TEST_CASE("network surgery: a source model's layers under a new output layer of another size (transfer)") {
  const std::vector<LayerSpec> specs = {dense(12), dropout(0.1), dense(8)};
  const Network source = make_net(Shape{1, 8, 8}, specs, 5, 3);
  const Checkpoint c = checkpoint_of(source, 0, source.num_layers());
  const auto [body_offset, body_count] = source.param_range(0, 3);
  REQUIRE(body_offset == 0);

  SUBCASE("a network built for the target's classes loads every layer but the output") {
    Network target = make_net(Shape{1, 8, 8}, specs, 3, 4);
    const auto [head_offset, head_count] = target.param_range(3, 4);
    const std::vector<float> head(target.params().begin() + static_cast<long>(head_offset), target.params().end());
    Status st = load_model(target, c);
    REQUIRE_FALSE(st.ok());
    CHECK(st.error().message().find("layer 3 'dense 3 none'") != std::string::npos);
    REQUIRE(load_model(target, c, /*skip_output=*/true).ok());
    CHECK(same_bits(target.params().subspan(0, body_count), source.params().subspan(0, body_count)));
    CHECK(same_bits(target.params().subspan(head_offset, head_count), head));  // its own head
  }
  SUBCASE("a loaded network whose output layer is replaced") {
    Network net = make_net(Shape{1, 8, 8}, specs, 5, 9);
    REQUIRE(load_model(net, c).ok());
    REQUIRE(net.freeze(2).ok());
    Rng head_rng(77);
    REQUIRE(net.replace_output_layer(7, head_rng).ok());
    CHECK(net.classes() == 7);
    CHECK(net.num_layers() == 4);
    CHECK(net.layer(3).output_shape().c == 7);
    CHECK(net.layer(3).describe() == "dense 7 none");
    CHECK(net.num_params() == body_count + 8 * 7 + 7);
    CHECK(net.grads().size() == net.num_params());
    CHECK(same_bits(net.params().subspan(0, body_count), source.params().subspan(0, body_count)));
    CHECK(net.frozen_layers() == 2);
    for (const ParamBlock& b : net.blocks()) CHECK(b.frozen == (b.offset < net.param_range(2, 2).first));
    // The new head is init()'s, from the given seed: the same seed gives the same head.
    Network again = make_net(Shape{1, 8, 8}, specs, 5, 10);
    Rng same_rng(77);
    REQUIRE(again.replace_output_layer(7, same_rng).ok());
    CHECK(same_bits(net.params().subspan(body_count), again.params().subspan(body_count)));
    const std::vector<float> head(net.params().begin() + static_cast<long>(body_count), net.params().end());
    CHECK(std::any_of(head.begin(), head.end() - 7, [](float v) { return v != 0.0f; }));
    CHECK(std::all_of(head.end() - 7, head.end(), [](float v) { return v == 0.0f; }));  // biases 0
    // It trains and predicts 7 classes; its manifest is the new model's.
    std::vector<float> x(4 * 64, 0.5f);
    std::vector<int32_t> y = {0, 6, 3, 5};
    std::vector<float> probs(4 * 7);
    Rng dropout_rng(1);
    const BatchStats s = net.forward_backward(x.data(), y.data(), 4, 0.25f, dropout_rng);
    CHECK(std::isfinite(s.loss_sum));
    net.evaluate(x.data(), y.data(), 4, probs.data());
    CHECK(probs[0] + probs[1] + probs[2] + probs[3] + probs[4] + probs[5] + probs[6] == doctest::Approx(1.0));
    CHECK(manifest_of(net).layers[3].shapes == std::vector<std::vector<int64_t>>{{8, 7}, {7}});
    CHECK(net.replace_output_layer(1, head_rng).error().code() == Errc::kInvalidArgument);
  }
}

TEST_CASE("checkpoint: a trial's stage file that is a symbolic link or a FIFO is refused, not followed nor waited on") {
  // What a trainer reads of init_from / resume_from: another trial's directory, where a link to a
  // file outside could have been planted (issue 21).
  Network net = make_net(Shape{1, 4, 4}, {dense(8)}, 3, 1);
  TempDir outside, trial;
  REQUIRE(write_checkpoint(outside.file("model.bin"), checkpoint_of(net, 0, net.num_layers())).ok());
  const std::string stage0 = checkpoint_path(trial.path, 0);
  SUBCASE("a link to a valid checkpoint outside") {
    std::filesystem::create_symlink(outside.file("model.bin"), stage0);
    auto r = read_trial_checkpoint(trial.path);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == Errc::kInvalidArgument);
    CHECK(r.error().message() == "checkpoint " + stage0 + " is unusable: a symbolic link: not followed");
  }
  SUBCASE("a FIFO") {
    REQUIRE(::mkfifo(stage0.c_str(), 0600) == 0);
    auto r = read_trial_checkpoint(trial.path);  // returns at once: a FIFO is opened O_NONBLOCK
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message() == "checkpoint " + stage0 + " is unusable: not a regular file");
  }
  SUBCASE("the same file copied in is read") {
    std::filesystem::copy_file(outside.file("model.bin"), stage0);
    CHECK(read_trial_checkpoint(trial.path).ok());
  }
}

TEST_CASE("checkpoint: read below a trial directory root, a link swapped in after a check is refused at open") {
  // A paused trial's resume_from: checked by the store when the row is read (below <db>.trials, no
  // link below it), opened later by the trainer. read_checkpoint_under opens it from the root one
  // component at a time without following a link, so a link planted in between is refused.
  Network net = make_net(Shape{1, 4, 4}, {dense(8)}, 3, 1);
  TempDir outside, trials;
  REQUIRE(write_checkpoint(checkpoint_path(outside.path, 0), checkpoint_of(net, 0, net.num_layers())).ok());
  const std::string snapshot = trials.path + "/1/pbt/000-step-2";
  std::filesystem::create_directories(snapshot);
  std::filesystem::copy_file(checkpoint_path(outside.path, 0), checkpoint_path(snapshot, 0));
  CHECK(read_checkpoint_under(trials.path, snapshot).ok());
  CHECK(read_checkpoint_under(trials.path, checkpoint_path(snapshot, 0)).ok());  // a file, too
  CHECK(read_checkpoint_under(trials.path, trials.path + "/2/pbt/000-step-2").error().code() == Errc::kNotFound);
  auto refused = [&](const std::string& path, const std::string& why) {
    CAPTURE(path);
    auto r = read_checkpoint_under(trials.path, path);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == Errc::kInvalidArgument);
    CHECK_MESSAGE(r.error().message() == "checkpoint " + path + " is unusable: " + why, r.error().message());
  };
  refused(outside.path, "not below " + trials.path);
  refused(trials.path, "not below " + trials.path);
  refused(trials.path + "/1/../../x", "not below " + trials.path);
  // The snapshot, then a directory on its way, swapped for a link after the check.
  std::filesystem::rename(snapshot, trials.path + "/1/pbt/kept");
  std::filesystem::create_directory_symlink(outside.path, snapshot);
  CHECK(read_trial_checkpoint(snapshot).ok());  // followed by its path
  refused(snapshot, "'000-step-2' is a symbolic link or not a directory: not followed");
  std::filesystem::remove(snapshot);
  std::filesystem::rename(trials.path + "/1/pbt", trials.path + "/pbt-elsewhere");
  std::filesystem::rename(trials.path + "/pbt-elsewhere/kept", trials.path + "/pbt-elsewhere/000-step-2");
  std::filesystem::create_directory_symlink(trials.path + "/pbt-elsewhere", trials.path + "/1/pbt");
  refused(snapshot, "'pbt' is a symbolic link or not a directory: not followed");
}

namespace {

// Caps this process's address space at what it uses now plus `headroom` while alive: an
// allocation of a planted file's size fails (std::bad_alloc) instead of taking the machine's memory.
class AddressSpaceCap {
 public:
  explicit AddressSpaceCap(size_t headroom) {
    REQUIRE(::getrlimit(RLIMIT_AS, &old_) == 0);
    std::ifstream statm("/proc/self/statm");
    size_t pages = 0;
    statm >> pages;
    REQUIRE(pages > 0);
    rlimit cap = old_;
    cap.rlim_cur = pages * static_cast<size_t>(::sysconf(_SC_PAGESIZE)) + headroom;
    if (old_.rlim_max != RLIM_INFINITY) cap.rlim_cur = std::min<rlim_t>(cap.rlim_cur, old_.rlim_max);
    REQUIRE(::setrlimit(RLIMIT_AS, &cap) == 0);
  }
  ~AddressSpaceCap() { ::setrlimit(RLIMIT_AS, &old_); }
  AddressSpaceCap(const AddressSpaceCap&) = delete;
  AddressSpaceCap& operator=(const AddressSpaceCap&) = delete;

 private:
  rlimit old_{};
};

}  // namespace

TEST_CASE("checkpoint: a huge sparse file is refused by its header's size, before anything of its size is allocated") {
  // A sparse file of tens of gigabytes costs no disk; planted as a trial's checkpoint, reading it
  // whole used to allocate its size first.
  Network net = make_net(Shape{1, 4, 4}, {dense(8)}, 3, 1);
  TempDir dir;
  const std::string path = dir.file("checkpoint-stage0.bin");
  REQUIRE(write_checkpoint(path, checkpoint_of(net, 0, net.num_layers())).ok());
  const auto real_size = std::filesystem::file_size(path);
  constexpr uint64_t kHuge = uint64_t{64} << 30;  // 64 GiB
  SUBCASE("a valid checkpoint grown to 64 GiB: larger than its header says") {
    std::filesystem::resize_file(path, kHuge);
    AddressSpaceCap cap(size_t{1} << 30);
    auto r = read_checkpoint(path);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == Errc::kInvalidArgument);
    CHECK(r.error().message() == "checkpoint " + path + " is unusable: truncated or padded (" +
                                     std::to_string(kHuge - 40) + " payload bytes, header says " +
                                     std::to_string(real_size - 40) + ")");
  }
  SUBCASE("a header that says 64 GiB, in a file of that size: over the cap") {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    const uint64_t payload = kHuge - 40;
    f.seekp(24);
    f.write(reinterpret_cast<const char*>(&payload), sizeof payload);
    f.close();
    std::filesystem::resize_file(path, kHuge);
    AddressSpaceCap cap(size_t{1} << 30);
    auto r = read_checkpoint(path);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message() == "checkpoint " + path + " is unusable: its header says " + std::to_string(payload) +
                                     " payload bytes, more than the " + std::to_string(kMaxCheckpointPayloadBytes) +
                                     " a checkpoint may hold");
  }
  SUBCASE("a file shorter than its header says") {
    std::filesystem::resize_file(path, real_size - 1);
    auto r = read_checkpoint(path);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message() == "checkpoint " + path + " is unusable: truncated or padded (" +
                                     std::to_string(real_size - 41) + " payload bytes, header says " +
                                     std::to_string(real_size - 40) + ")");
  }
  SUBCASE("the file as written is read") { CHECK(read_checkpoint(path).ok()); }
}
