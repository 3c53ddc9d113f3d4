// 1-bit gradient compression with error feedback (CNTK's 1-bit SGD: Seide, Fu, Droppo, Li and Yu,
// "1-Bit Stochastic Gradient Descent and its Application to Data-Parallel Distributed Training of
// Speech DNNs", Interspeech 2014).
//
// Each rank keeps a OneBitCompressor for one gradient buffer. compress() adds the residual (the
// quantization error of the previous step) to the gradient, sends one bit per value (its sign,
// value >= 0 is 1) and, per chunk of `chunk_size` consecutive values, two reconstruction values:
// the mean of the chunk's values that got a 1 and the mean of those that got a 0. The receiver puts
// back the chunk's positive mean for a 1 and its negative mean for a 0. What was lost
// (value + old residual - reconstruction) becomes the new residual, so no gradient is dropped, only
// delayed: that is the "error feedback" that lets 1-bit SGD converge where plain sign quantization
// stalls. With error_feedback = false the residual is dropped (kept at zero): only for comparison.
//
// A packet of n values is 12 + ceil(n / 8) + 8 * ceil(n / chunk_size) bytes on the wire (a 12-byte
// header: magic, value count, chunk size; then the sign bits; then the (positive, negative) float
// pairs, all little-endian): 1,000,000 values with chunks of 2048 are 128,924 bytes, 1/31.03 of
// their 4,000,000 fp32 bytes.
//
// An "allreduce" of compressed gradients is every rank's packet delivered to every rank, each rank
// summing the decompressed packets (sum_decompressed); the ranks then all hold the same sum.
//
// deserialize() is for bytes from another rank: a truncated, oversized or malformed packet is a
// kProtocol error, never a crash, and every size is bounded (kOneBitMaxValues, kOneBitMaxChunkSize).
// Pure code: no MPI, no threads; a compressor is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/result.h"

namespace hpctune::collectives {

inline constexpr size_t kOneBitMaxValues = size_t{1} << 28;     // 1 GiB of fp32 gradient
inline constexpr size_t kOneBitMaxChunkSize = size_t{1} << 20;
inline constexpr size_t kOneBitDefaultChunkSize = 2048;
inline constexpr uint32_t kOneBitMagic = 0x31424831;            // "1HB1" little-endian
inline constexpr size_t kOneBitHeaderBytes = 12;

// One compressed gradient: sign bits and per-chunk reconstruction values.
struct OneBitPacket {
  uint32_t values = 0;             // how many gradient values it stands for
  uint32_t chunk_size = 0;         // values per chunk (the last chunk may be shorter)
  std::vector<uint8_t> signs;      // ceil(values / 8) bytes; bit i % 8 of byte i / 8 is value i >= 0
  std::vector<float> positive;     // per chunk: the mean of its values >= 0 (0 if none)
  std::vector<float> negative;     // per chunk: the mean of its values < 0 (0 if none)

  size_t chunks() const noexcept { return positive.size(); }
  // The size of serialize()'s output.
  size_t bytes() const noexcept;
  bool operator==(const OneBitPacket&) const = default;
};

// The wire size of a packet of `values` values in chunks of `chunk_size` (chunk_size >= 1).
size_t onebit_packet_bytes(size_t values, size_t chunk_size) noexcept;

struct OneBitOptions {
  size_t chunk_size = kOneBitDefaultChunkSize;
  bool error_feedback = true;  // false: the quantization error is dropped (comparison only)
};

// The compressing side of one gradient buffer of a fixed size on one rank; holds the residual.
class OneBitCompressor {
 public:
  // kInvalidArgument if values is 0 or above kOneBitMaxValues, or chunk_size is 0 or above
  // kOneBitMaxChunkSize.
  static Result<OneBitCompressor> create(size_t values, OneBitOptions options = {});

  // Quantizes gradient + residual and stores the new residual. kInvalidArgument if the gradient's
  // size is not values() or a value, or a value plus its residual, is not finite (the residual
  // is then unchanged).
  Result<OneBitPacket> compress(std::span<const float> gradient);

  size_t values() const noexcept { return residual_.size(); }
  const OneBitOptions& options() const noexcept { return options_; }
  // The quantization error carried to the next compress() (all zero without error feedback).
  std::span<const float> residual() const noexcept { return residual_; }
  void reset_residual() noexcept;

 private:
  OneBitCompressor(size_t values, OneBitOptions options);
  OneBitOptions options_;
  std::vector<float> residual_;
  std::vector<float> work_;  // gradient + residual of the step being compressed
};

// Writes the reconstruction into out (out.size() must be packet.values: kInvalidArgument).
Status decompress(const OneBitPacket& packet, std::span<float> out);

// out = the sum of the decompressed packets (what an allreduce of compressed gradients gives each
// rank). Every packet must stand for out.size() values; kInvalidArgument otherwise or if empty.
Status sum_decompressed(std::span<const OneBitPacket> packets, std::span<float> out);

// The wire encoding (see the top of this file).
std::vector<uint8_t> serialize(const OneBitPacket& packet);
// Decodes bytes from another rank that must stand for expected_values values: kProtocol for a
// wrong magic, a value count other than expected_values, a chunk size of 0 or above
// kOneBitMaxChunkSize, a length other than the exact size, set padding bits, or a reconstruction
// value that is not finite or has the wrong sign.
Result<OneBitPacket> deserialize(std::span<const uint8_t> bytes, size_t expected_values);

}  // namespace hpctune::collectives
