// Multi-rank gradient engines against the one-rank engine, run under mpirun (tests/mpirun-test) on
// 2, 3 and 4 ranks: every layout the world size allows (data x model) trains a few SGD steps on the
// same global batches as a LocalEngine on every rank, and gradients, stats, parameters and
// evaluation probabilities must match to fp32 tolerance. Also the MpiTrainerGroup calls themselves
// and their deadline. Its own main initialises MPI.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "collectives/collectives.h"
#include "collectives/trainer_group_mpi.h"
#include "common/rng.h"
#include "nn/network.h"
#include "tests/mpi_test_main.h"
#include "trainers/gradient_engine.h"
#include "trainers/pipeline_partition.h"

using namespace hpctune;
using namespace hpctune::trainers;
using namespace hpctune::nn;
using namespace hpctune::collectives;

namespace {

using hpctune::testing::world_rank;
using hpctune::testing::world_size;


// A small CNN without dropout: conv, maxpool, dense, dense (+ output): 5 layers.
std::vector<LayerSpec> cnn_specs() {
  LayerSpec conv;
  conv.kind = "conv", conv.filters = 4, conv.kernel = 3;
  LayerSpec pool;
  pool.kind = "maxpool", pool.size = 2;
  LayerSpec d1;
  d1.kind = "dense", d1.units = 24, d1.activation = "relu";
  LayerSpec d2;
  d2.kind = "dense", d2.units = 16, d2.activation = "tanh";
  return {conv, pool, d1, d2};
}

Network make_net(uint64_t seed) {
  auto net = Network::create(Shape{1, 8, 8}, cnn_specs(), 10);
  REQUIRE(net.ok());
  Rng rng(seed);
  net->init(rng);
  return std::move(net).value();
}

struct Batch {
  std::vector<float> x;
  std::vector<int32_t> y;
};
Batch make_batch(uint64_t seed, int64_t rows) {
  Rng rng(seed);
  Batch b;
  b.x.resize(static_cast<size_t>(rows * 64));
  for (auto& v : b.x) v = static_cast<float>(rng.uniform(-1.0, 1.0));
  for (int64_t i = 0; i < rows; ++i) b.y.push_back(static_cast<int32_t>(rng.next() % 10));
  return b;
}

float max_abs_diff(const float* a, const float* b, size_t n) {
  float d = 0;
  for (size_t i = 0; i < n; ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

// Trains `steps` SGD steps with the layout's engine and with a LocalEngine on the same batches and
// compares everything this rank can see.
void check_layout(int data, int model, int64_t global_batch, int64_t micro_batches, AllreduceAlgorithm algorithm) {
  CAPTURE(data);
  CAPTURE(model);
  CAPTURE(global_batch);
  MpiGroupOptions go;
  go.data = data, go.model = model, go.algorithm = algorithm;
  go.timeout = std::chrono::seconds(60);
  auto group = MpiTrainerGroup::create(MPI_COMM_WORLD, go);
  REQUIRE(group.ok());
  Network net = make_net(7), ref = make_net(7);
  EngineOptions eo;
  eo.micro_batches = micro_batches;
  auto engine = make_gradient_engine(net, group->get(), eo);
  REQUIRE(engine.ok());
  LocalEngine local(ref);
  const size_t offset = static_cast<size_t>((*engine)->params().data() - net.params().data());
  const size_t count = (*engine)->params().size();
  if (model == 1) CHECK(count == net.num_params());
  CHECK(count == (*engine)->grads().size());
  // A stage may own no parameters (a pooling layer alone); the whole network has some.
  CHECK(net.num_params() > 0);
  size_t block_total = 0;
  for (const ParamBlock& b : (*engine)->blocks()) {
    CHECK(b.offset + b.size <= count);
    block_total += b.size;
  }
  CHECK(block_total == count);

  const float lr = 0.1f;
  for (int step = 0; step < 4; ++step) {
    CAPTURE(step);
    Batch b = make_batch(100 + static_cast<uint64_t>(step), global_batch);
    Rng r1(5), r2(5);
    auto got = (*engine)->train_batch(b.x.data(), b.y.data(), global_batch, r1);
    REQUIRE(got.ok());
    auto want = local.train_batch(b.x.data(), b.y.data(), global_batch, r2);
    REQUIRE(want.ok());
    CHECK(got->count == want->count);
    CHECK(got->correct == want->correct);
    CHECK(got->loss_sum == doctest::Approx(want->loss_sum).epsilon(1e-5));
    const float* g = (*engine)->grads().data();
    const float* gr = ref.grads().data() + offset;
    float scale = 0;
    for (size_t i = 0; i < count; ++i) scale = std::max(scale, std::fabs(gr[i]));
    if (count > 0) CHECK(scale > 0.0f);
    CHECK(max_abs_diff(g, gr, count) <= 1e-5f * std::max(1.0f, scale));
    // SGD on this rank's parameters, and on the whole reference.
    auto p = (*engine)->params();
    for (size_t i = 0; i < count; ++i) p[i] -= lr * g[i];
    auto pr = ref.params();
    auto grr = ref.grads();
    for (size_t i = 0; i < pr.size(); ++i) pr[i] -= lr * grr[i];
  }
  CHECK(max_abs_diff((*engine)->params().data(), ref.params().data() + offset, count) <= 1e-5f);

  // Evaluation. Only the stage that owns layers sees its own parameters updated, so the whole
  // network is compared through the group: the reference evaluates with its updated weights, the
  // group with each stage's (a model rank's other layers are stale, but it never runs them).
  Batch e = make_batch(999, global_batch + 3);
  std::vector<float> probs(static_cast<size_t>((global_batch + 3) * 10), -1.0f);
  std::vector<float> want_probs(probs.size());
  auto got = (*engine)->evaluate(e.x.data(), e.y.data(), global_batch + 3, world_rank() == 0 ? probs.data() : nullptr);
  REQUIRE(got.ok());
  auto want = local.evaluate(e.x.data(), e.y.data(), global_batch + 3, want_probs.data());
  REQUIRE(want.ok());
  CHECK(got->count == want->count);
  CHECK(got->correct == want->correct);
  CHECK(got->loss_sum == doctest::Approx(want->loss_sum).epsilon(1e-5));
  if (world_rank() == 0) CHECK(max_abs_diff(probs.data(), want_probs.data(), probs.size()) <= 1e-5f);
}

}  // namespace

TEST_CASE("pipeline stages are contiguous, non-empty and balanced") {
  Network net = make_net(1);
  REQUIRE(net.num_layers() == 5);
  for (int stages = 1; stages <= 5; ++stages) {
    auto b = pipeline_stage_bounds(net, stages);
    REQUIRE(b.ok());
    REQUIRE(b->size() == static_cast<size_t>(stages) + 1);
    CHECK(b->front() == 0);
    CHECK(b->back() == 5);
    for (int s = 0; s < stages; ++s) CHECK((*b)[s] < (*b)[s + 1]);
  }
  // Two stages: the split minimises the larger half; no other cut does better.
  auto b = pipeline_stage_bounds(net, 2);
  REQUIRE(b.ok());
  std::vector<double> cost;
  for (size_t i = 0; i < 5; ++i) cost.push_back(layer_cost(net.layer(i)));
  auto worst = [&](size_t cut) {
    double a = 0, c = 0;
    for (size_t i = 0; i < 5; ++i) (i < cut ? a : c) += cost[i];
    return std::max(a, c);
  };
  for (size_t cut = 1; cut < 5; ++cut) CHECK(worst((*b)[1]) <= worst(cut));
  CHECK(pipeline_stage_bounds(net, 6).error().code() == Errc::kInvalidArgument);
  CHECK(pipeline_stage_bounds(net, 0).error().code() == Errc::kInvalidArgument);
}

TEST_CASE("a group's collectives: sum, flags, bytes, ranks") {
  const int size = world_size();
  MpiGroupOptions go;
  go.data = size;
  auto group = MpiTrainerGroup::create(MPI_COMM_WORLD, go);
  REQUIRE(group.ok());
  MpiTrainerGroup& g = **group;
  CHECK(g.rank() == world_rank());
  CHECK(g.data_rank() == world_rank());
  std::vector<double> v = {1.0, static_cast<double>(g.rank())};
  REQUIRE(g.sum(v).ok());
  CHECK(v[0] == size);
  CHECK(v[1] == size * (size - 1) / 2);
  auto flag = g.broadcast_flag(g.rank() == 0);
  REQUIRE(flag.ok());
  CHECK(*flag);
  flag = g.broadcast_flag(g.rank() != 0);
  REQUIRE(flag.ok());
  CHECK(!*flag);
  std::vector<uint8_t> bytes;
  if (g.rank() == 0) bytes = {1, 2, 3, 250};
  REQUIRE(g.broadcast_bytes(bytes).ok());
  CHECK(bytes == std::vector<uint8_t>{1, 2, 3, 250});
  std::vector<float> grads(1000, static_cast<float>(g.rank()));
  REQUIRE(g.sum_gradients(grads).ok());
  CHECK(grads[999] == doctest::Approx(size * (size - 1) / 2.0));  // 0 + 1 + ... + (size - 1)
  CHECK(!g.collective_started().has_value());
  MpiGroupOptions bad;
  bad.data = size + 1;
  CHECK(MpiTrainerGroup::create(MPI_COMM_WORLD, bad).error().code() == Errc::kInvalidArgument);
}

TEST_CASE("a receive nobody answers times out and breaks the group") {
  const int size = world_size();
  MpiGroupOptions go;
  go.model = size;
  go.timeout = std::chrono::milliseconds(300);
  auto group = MpiTrainerGroup::create(MPI_COMM_WORLD, go);
  REQUIRE(group.ok());
  MpiTrainerGroup& g = **group;
  if (g.model_rank() == 1) {
    std::vector<float> data(16);
    const auto t0 = std::chrono::steady_clock::now();
    Status s = g.recv_from_model_rank(0, data, 77);
    CHECK(s.error().code() == Errc::kTimeout);
    CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(300));
    CHECK(g.broken());
    CHECK(g.recv_from_model_rank(0, data, 77).error().code() == Errc::kFailed);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("every layout trains like one rank") {
  const int size = world_size();
  for (int data = 1; data <= size; ++data) {
    if (size % data != 0) continue;
    const int model = size / data;
    if (model > 5) continue;
    // Batches not divisible by the replicas or micro-batches; default and explicit micro-batches.
    check_layout(data, model, 22, 0, AllreduceAlgorithm::kRing);
    check_layout(data, model, 13, 3, data > 1 ? AllreduceAlgorithm::kRecursiveDoubling : AllreduceAlgorithm::kRing);
  }
  if (size > 1) check_layout(size, 1, 16, 0, AllreduceAlgorithm::kMpi);
  // Gradients computed in the node's shared memory and summed there (data parallel), and a 2-D
  // layout whose stages use the copying path.
  if (size > 1) check_layout(size, 1, 22, 0, AllreduceAlgorithm::kHierarchical);
  if (size == 4) check_layout(2, 2, 22, 0, AllreduceAlgorithm::kHierarchical);
}

int main(int argc, char** argv) { return hpctune::testing::mpi_test_main(argc, argv, "test_group_engines"); }
