// 1-bit gradient compression with error feedback (collectives/onebit_compression.h): the bytes on
// the wire, the wire encoding and its refusals, the residual, and convergence on a convex problem
// with 4 simulated data-parallel workers with and without error feedback (issue 26, acceptance 1).
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <limits>
#include <numeric>
#include <cmath>
#include <cstdint>
#include <vector>

#include "collectives/onebit_compression.h"
#include "common/rng.h"

using namespace hpctune;
using namespace hpctune::collectives;

namespace {

std::vector<float> random_gradient(size_t n, uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  std::vector<float> g(n);
  for (auto& v : g) v = static_cast<float>(rng.normal(0.0, scale));
  return g;
}

OneBitCompressor make_compressor(size_t n, size_t chunk, bool error_feedback = true) {
  auto c = OneBitCompressor::create(n, OneBitOptions{chunk, error_feedback});
  REQUIRE(c.ok());
  return std::move(c).value();
}

}  // namespace

TEST_CASE("a 1,000,000-value gradient compresses to 1/31 of its fp32 bytes (chunks of 2048)") {
  const size_t n = 1'000'000;
  auto compressor = make_compressor(n, 2048);
  const auto grad = random_gradient(n, 7);
  auto packet = compressor.compress(grad);
  REQUIRE(packet.ok());
  const size_t fp32_bytes = n * sizeof(float);
  // 12 header + 125,000 sign bytes + 489 chunks x 8 bytes of reconstruction values.
  CHECK(packet->bytes() == 128'924);
  CHECK(serialize(*packet).size() == packet->bytes());
  CHECK(onebit_packet_bytes(n, 2048) == packet->bytes());
  const double ratio = static_cast<double>(packet->bytes()) / static_cast<double>(fp32_bytes);
  MESSAGE("1-bit bytes ratio (2048-value chunks): " << packet->bytes() << " / " << fp32_bytes
                                                    << " = " << ratio << " = 1/" << 1.0 / ratio);
  CHECK(ratio <= 1.0 / 25.0);
  CHECK(ratio == doctest::Approx(0.032231).epsilon(1e-4));
  // Chunks of 256 values still meet the 1/25: 12 + 125,000 + 3,907 x 8 = 156,268 bytes.
  CHECK(onebit_packet_bytes(n, 256) == 156'268);
  CHECK(static_cast<double>(onebit_packet_bytes(n, 256)) <= static_cast<double>(fp32_bytes) / 25.0);
}

TEST_CASE("bad sizes are refused when creating a compressor and compressing") {
  CHECK(OneBitCompressor::create(0).error().code() == Errc::kInvalidArgument);
  CHECK(OneBitCompressor::create(kOneBitMaxValues + 1).error().code() == Errc::kInvalidArgument);
  CHECK(OneBitCompressor::create(10, {0, true}).error().code() == Errc::kInvalidArgument);
  CHECK(OneBitCompressor::create(10, {kOneBitMaxChunkSize + 1, true}).error().code() ==
        Errc::kInvalidArgument);
  auto compressor = make_compressor(10, 4);
  std::vector<float> short_grad(9, 1.0f);
  CHECK(compressor.compress(short_grad).error().code() == Errc::kInvalidArgument);
  std::vector<float> nan_grad(10, 1.0f);
  nan_grad[3] = std::nanf("");
  CHECK(compressor.compress(nan_grad).error().code() == Errc::kInvalidArgument);
  // A value that overflows fp32 once its residual is added: refused, the residual unchanged.
  constexpr float kMax = std::numeric_limits<float>::max();
  auto pair = make_compressor(2, 2);
  REQUIRE(pair.compress(std::vector<float>{kMax, 0.0f}).ok());  // both sent as max/2
  const std::vector<float> before(pair.residual().begin(), pair.residual().end());
  CHECK(before == std::vector<float>{kMax / 2, -kMax / 2});
  CHECK(pair.compress(std::vector<float>{kMax, -kMax}).error().code() == Errc::kInvalidArgument);
  CHECK(std::equal(before.begin(), before.end(), pair.residual().begin()));
  std::vector<float> out(11);
  auto packet = compressor.compress(std::vector<float>(10, 1.0f));
  REQUIRE(packet.ok());
  CHECK(decompress(*packet, out).error().code() == Errc::kInvalidArgument);
  CHECK(sum_decompressed({}, std::span<float>(out).first(10)).error().code() == Errc::kInvalidArgument);
}

TEST_CASE("serialize and deserialize give the same packet; truncated, oversized and garbage bytes are refused") {
  const size_t n = 1003;  // not a multiple of 8 nor of the chunk size: padding bits and a short last chunk
  auto compressor = make_compressor(n, 64);
  auto packet = compressor.compress(random_gradient(n, 11));
  REQUIRE(packet.ok());
  const auto bytes = serialize(*packet);
  REQUIRE(bytes.size() == onebit_packet_bytes(n, 64));
  auto back = deserialize(bytes, n);
  REQUIRE(back.ok());
  CHECK(*back == *packet);

  // Every truncation, including an empty buffer.
  for (size_t len = 0; len < bytes.size(); ++len) {
    auto r = deserialize(std::span<const uint8_t>(bytes).first(len), n);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == Errc::kProtocol);
  }
  // One byte too many.
  auto longer = bytes;
  longer.push_back(0);
  CHECK(deserialize(longer, n).error().code() == Errc::kProtocol);
  // A packet for another gradient size, and one claiming more values than any gradient may have.
  CHECK(deserialize(bytes, n + 1).error().code() == Errc::kProtocol);
  auto huge = bytes;
  huge[4] = huge[5] = huge[6] = huge[7] = 0xff;
  CHECK(deserialize(huge, n).error().code() == Errc::kProtocol);
  CHECK(deserialize(huge, 0xffffffffu).error().code() == Errc::kProtocol);
  // A wrong magic, a zero or huge chunk size.
  auto bad_magic = bytes;
  bad_magic[0] ^= 0x5a;
  CHECK(deserialize(bad_magic, n).error().code() == Errc::kProtocol);
  auto zero_chunk = bytes;
  zero_chunk[8] = zero_chunk[9] = zero_chunk[10] = zero_chunk[11] = 0;
  CHECK(deserialize(zero_chunk, n).error().code() == Errc::kProtocol);
  auto huge_chunk = bytes;
  huge_chunk[11] = 0x7f;
  CHECK(deserialize(huge_chunk, n).error().code() == Errc::kProtocol);
  // A padding bit set after the last value (1003 = 125 * 8 + 3).
  auto padding = bytes;
  padding[kOneBitHeaderBytes + 125] |= 0x80;
  CHECK(deserialize(padding, n).error().code() == Errc::kProtocol);
  // A reconstruction value that is NaN, infinite or of the wrong sign.
  const size_t recon = kOneBitHeaderBytes + (n + 7) / 8;
  for (const float bad : {std::nanf(""), INFINITY, -1.0f}) {
    auto garbage = bytes;
    const auto word = std::bit_cast<uint32_t>(bad);
    for (int i = 0; i < 4; ++i) garbage[recon + i] = static_cast<uint8_t>(word >> (8 * i));
    CHECK(deserialize(garbage, n).error().code() == Errc::kProtocol);
  }
  // Random garbage of the right length (deterministic): refused or a well-formed packet, never a crash.
  Rng rng(5);
  size_t refused = 0;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<uint8_t> junk(bytes.size());
    for (auto& b : junk) b = static_cast<uint8_t>(rng.next());
    if (trial % 2) std::copy(bytes.begin(), bytes.begin() + kOneBitHeaderBytes, junk.begin());
    auto r = deserialize(junk, n);
    if (!r.ok()) {
      CHECK(r.error().code() == Errc::kProtocol);
      ++refused;
    } else {
      std::vector<float> out(n);
      CHECK(decompress(*r, out).ok());
    }
  }
  CHECK(refused == 200);  // random reconstruction words are almost surely refused (a sign or NaN)
}

TEST_CASE("decompressed values plus the new residual equal the gradient plus the old residual") {
  const size_t n = 5000, chunk = 256;
  auto compressor = make_compressor(n, chunk);
  std::vector<float> out(n);
  for (int step = 0; step < 5; ++step) {
    const std::vector<float> old_residual(compressor.residual().begin(), compressor.residual().end());
    const auto grad = random_gradient(n, 100 + step, 0.1 * (step + 1));
    auto packet = compressor.compress(grad);
    REQUIRE(packet.ok());
    REQUIRE(decompress(*packet, out).ok());
    const auto residual = compressor.residual();
    double max_residual = 0.0;
    for (size_t i = 0; i < n; ++i) {
      const float input = grad[i] + old_residual[i];  // what was quantized, in fp32
      const float tolerance = 2.0f * std::nextafter(std::abs(input) + std::abs(out[i]), INFINITY) *
                              std::numeric_limits<float>::epsilon();
      REQUIRE(std::abs((out[i] + residual[i]) - input) <= tolerance);
      // The sign is kept: a 1 is sent for input >= 0 and reconstructed as the chunk's positive mean.
      CHECK((input >= 0.0f) == (out[i] >= 0.0f));
      max_residual = std::max(max_residual, static_cast<double>(std::abs(residual[i])));
    }
    CHECK(max_residual > 0.0);  // not trivially exact
    // The reconstruction values are the chunk means of the positive and the negative inputs.
    double pos = 0.0, neg = 0.0;
    size_t pos_n = 0, neg_n = 0;
    for (size_t i = 0; i < chunk; ++i) {
      const float input = grad[i] + old_residual[i];
      if (input >= 0.0f) { pos += input; ++pos_n; } else { neg += input; ++neg_n; }
    }
    CHECK(packet->positive[0] == doctest::Approx(pos / pos_n).epsilon(1e-6));
    CHECK(packet->negative[0] == doctest::Approx(neg / neg_n).epsilon(1e-6));
  }
  // Without error feedback the residual is dropped.
  auto plain = make_compressor(n, chunk, false);
  REQUIRE(plain.compress(random_gradient(n, 3)).ok());
  CHECK(std::all_of(plain.residual().begin(), plain.residual().end(), [](float v) { return v == 0.0f; }));
}

TEST_CASE("sum_decompressed is the sum of each packet's reconstruction") {
  const size_t n = 300;
  std::vector<OneBitPacket> packets;
  std::vector<float> expected(n, 0.0f), one(n);
  for (int rank = 0; rank < 3; ++rank) {
    auto compressor = make_compressor(n, 32);
    auto packet = compressor.compress(random_gradient(n, 40 + rank));
    REQUIRE(packet.ok());
    REQUIRE(decompress(*packet, one).ok());
    for (size_t i = 0; i < n; ++i) expected[i] += one[i];
    packets.push_back(std::move(packet).value());
  }
  std::vector<float> sum(n);
  REQUIRE(sum_decompressed(packets, sum).ok());
  CHECK(sum == expected);
  packets[1].values = n - 1;
  CHECK(sum_decompressed(packets, sum).error().code() == Errc::kInvalidArgument);
}

namespace {

// Least squares on synthetic data split across 4 workers whose features are distributed
// differently (a per-worker shift), so that each worker's gradient at the optimum is far from zero
// although their sum is zero: what makes plain sign quantization biased.
struct LeastSquares {
  static constexpr size_t kWorkers = 4, kPerWorker = 64, kDims = 32;
  std::vector<std::vector<double>> x;  // kWorkers * kPerWorker rows of kDims
  std::vector<double> y;
  std::vector<double> optimum;

  explicit LeastSquares(uint64_t seed) {
    Rng rng(seed);
    std::vector<double> truth(kDims);
    for (auto& v : truth) v = rng.normal();
    for (size_t k = 0; k < kWorkers; ++k) {
      std::vector<double> shift(kDims);
      for (auto& v : shift) v = rng.normal(0.0, 1.0);
      for (size_t i = 0; i < kPerWorker; ++i) {
        std::vector<double> row(kDims);
        for (size_t j = 0; j < kDims; ++j) row[j] = rng.normal() + shift[j];
        double target = rng.normal(0.0, 0.5);
        for (size_t j = 0; j < kDims; ++j) target += row[j] * truth[j];
        x.push_back(std::move(row));
        y.push_back(target);
      }
    }
    optimum = solve_normal_equations();
  }

  size_t rows() const { return x.size(); }

  // Worker k's share of the full gradient (1/N) sum_i x_i (x_i . w - y_i) over its rows.
  std::vector<float> shard_gradient(size_t k, const std::vector<double>& w) const {
    std::vector<double> g(kDims, 0.0);
    for (size_t i = k * kPerWorker; i < (k + 1) * kPerWorker; ++i) {
      double r = -y[i];
      for (size_t j = 0; j < kDims; ++j) r += x[i][j] * w[j];
      for (size_t j = 0; j < kDims; ++j) g[j] += x[i][j] * r;
    }
    std::vector<float> out(kDims);
    for (size_t j = 0; j < kDims; ++j) out[j] = static_cast<float>(g[j] / static_cast<double>(rows()));
    return out;
  }

  double loss(const std::vector<double>& w) const {
    double sum = 0.0;
    for (size_t i = 0; i < rows(); ++i) {
      double r = -y[i];
      for (size_t j = 0; j < kDims; ++j) r += x[i][j] * w[j];
      sum += r * r;
    }
    return sum / (2.0 * static_cast<double>(rows()));
  }

  // X^T X w = X^T y by Cholesky, in double.
  std::vector<double> solve_normal_equations() const {
    std::vector<double> a(kDims * kDims, 0.0), b(kDims, 0.0);
    for (size_t i = 0; i < rows(); ++i)
      for (size_t p = 0; p < kDims; ++p) {
        b[p] += x[i][p] * y[i];
        for (size_t q = 0; q < kDims; ++q) a[p * kDims + q] += x[i][p] * x[i][q];
      }
    for (size_t p = 0; p < kDims; ++p) {
      for (size_t q = 0; q <= p; ++q) {
        double s = a[p * kDims + q];
        for (size_t r = 0; r < q; ++r) s -= a[p * kDims + r] * a[q * kDims + r];
        a[p * kDims + q] = (p == q) ? std::sqrt(s) : s / a[q * kDims + q];
      }
    }
    std::vector<double> z(kDims), w(kDims);
    for (size_t p = 0; p < kDims; ++p) {
      double s = b[p];
      for (size_t r = 0; r < p; ++r) s -= a[p * kDims + r] * z[r];
      z[p] = s / a[p * kDims + p];
    }
    for (size_t p = kDims; p-- > 0;) {
      double s = z[p];
      for (size_t r = p + 1; r < kDims; ++r) s -= a[r * kDims + p] * w[r];
      w[p] = s / a[p * kDims + p];
    }
    return w;
  }

  double distance_to_optimum(const std::vector<double>& w) const {
    double s = 0.0;
    for (size_t j = 0; j < kDims; ++j) s += (w[j] - optimum[j]) * (w[j] - optimum[j]);
    return std::sqrt(s);
  }
};

enum class Mode { kUncompressed, kOneBitErrorFeedback, kOneBitNoFeedback };

// Data-parallel gradient descent: each step, every worker computes its shard's gradient, the
// "allreduce" sums them (decompressed when compressed), and every worker applies the same sum.
std::vector<double> train(const LeastSquares& problem, Mode mode, int steps) {
  constexpr size_t kChunk = 8;  // 32 weights: 4 chunks, each with its own reconstruction values
  std::vector<OneBitCompressor> compressors;
  for (size_t k = 0; k < LeastSquares::kWorkers; ++k)
    compressors.push_back(
        make_compressor(LeastSquares::kDims, kChunk, mode == Mode::kOneBitErrorFeedback));
  std::vector<double> w(LeastSquares::kDims, 0.0);
  std::vector<float> sum(LeastSquares::kDims);
  for (int step = 0; step < steps; ++step) {
    std::vector<OneBitPacket> packets;
    std::fill(sum.begin(), sum.end(), 0.0f);
    for (size_t k = 0; k < LeastSquares::kWorkers; ++k) {
      const auto g = problem.shard_gradient(k, w);
      if (mode == Mode::kUncompressed) {
        for (size_t j = 0; j < g.size(); ++j) sum[j] += g[j];
        continue;
      }
      auto packet = compressors[k].compress(g);
      REQUIRE(packet.ok());
      // Through the wire encoding, as between ranks.
      auto received = deserialize(serialize(*packet), LeastSquares::kDims);
      REQUIRE(received.ok());
      packets.push_back(std::move(received).value());
    }
    if (mode != Mode::kUncompressed) REQUIRE(sum_decompressed(packets, sum).ok());
    // A constant rate, then a decaying one so that the compressed runs settle.
    const double lr = step < steps / 2 ? 0.02 : 0.02 * (steps / 2.0) / (step + 1.0);
    for (size_t j = 0; j < w.size(); ++j) w[j] -= lr * sum[j];
  }
  return w;
}

}  // namespace

TEST_CASE("1-bit SGD with error feedback converges to the uncompressed optimum; without it, it does not") {
  const LeastSquares problem(2026);
  const int steps = 4000;
  const double scale = std::sqrt(std::inner_product(problem.optimum.begin(), problem.optimum.end(),
                                                    problem.optimum.begin(), 0.0));
  const auto plain = train(problem, Mode::kUncompressed, steps);
  const auto feedback = train(problem, Mode::kOneBitErrorFeedback, steps);
  const auto no_feedback = train(problem, Mode::kOneBitNoFeedback, steps);
  const double best = problem.loss(problem.optimum);
  const double d_plain = problem.distance_to_optimum(plain);
  const double d_feedback = problem.distance_to_optimum(feedback);
  const double d_no_feedback = problem.distance_to_optimum(no_feedback);
  MESSAGE("|w*| = " << scale << ", optimal loss " << best);
  MESSAGE("uncompressed:              |w - w*| = " << d_plain << ", loss " << problem.loss(plain));
  MESSAGE("1-bit with error feedback: |w - w*| = " << d_feedback << ", loss " << problem.loss(feedback));
  MESSAGE("1-bit without feedback:    |w - w*| = " << d_no_feedback << ", loss " << problem.loss(no_feedback));
  CHECK(d_plain <= 1e-3 * scale);
  CHECK(d_feedback <= 1e-3 * scale);
  CHECK(problem.loss(feedback) - best <= 1e-3 * best);
  CHECK(d_no_feedback >= 10.0 * d_feedback);
  CHECK(problem.loss(no_feedback) - best >= 10.0 * (problem.loss(feedback) - best));
}
