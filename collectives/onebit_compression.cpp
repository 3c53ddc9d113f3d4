// 1-bit gradient compression with error feedback (see onebit_compression.h).
#include "collectives/onebit_compression.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <string>

namespace hpctune::collectives {
namespace {

size_t chunk_count(size_t values, size_t chunk_size) noexcept {
  return (values + chunk_size - 1) / chunk_size;
}

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

uint32_t get_u32(const uint8_t* p) noexcept {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

Error malformed(const std::string& what) {
  return err(Errc::kProtocol, "malformed 1-bit gradient packet: " + what);
}

}  // namespace

size_t onebit_packet_bytes(size_t values, size_t chunk_size) noexcept {
  return kOneBitHeaderBytes + (values + 7) / 8 + 2 * sizeof(float) * chunk_count(values, chunk_size);
}

size_t OneBitPacket::bytes() const noexcept {
  return kOneBitHeaderBytes + signs.size() + sizeof(float) * (positive.size() + negative.size());
}

OneBitCompressor::OneBitCompressor(size_t values, OneBitOptions options)
    : options_(options), residual_(values, 0.0f), work_(values, 0.0f) {}

Result<OneBitCompressor> OneBitCompressor::create(size_t values, OneBitOptions options) {
  if (values == 0 || values > kOneBitMaxValues)
    return err(Errc::kInvalidArgument, "1-bit compression of " + std::to_string(values) +
                                           " values: must be 1 to " + std::to_string(kOneBitMaxValues));
  if (options.chunk_size == 0 || options.chunk_size > kOneBitMaxChunkSize)
    return err(Errc::kInvalidArgument, "1-bit compression chunk size " +
                                           std::to_string(options.chunk_size) + ": must be 1 to " +
                                           std::to_string(kOneBitMaxChunkSize));
  return OneBitCompressor(values, options);
}

void OneBitCompressor::reset_residual() noexcept { std::fill(residual_.begin(), residual_.end(), 0.0f); }

Result<OneBitPacket> OneBitCompressor::compress(std::span<const float> gradient) {
  const size_t n = residual_.size();
  if (gradient.size() != n)
    return err(Errc::kInvalidArgument, "1-bit compression: gradient of " +
                                           std::to_string(gradient.size()) + " values, expected " +
                                           std::to_string(n));
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(gradient[i]))
      return err(Errc::kInvalidArgument,
                 "1-bit compression: gradient value " + std::to_string(i) + " is not finite");
    work_[i] = gradient[i] + residual_[i];
    if (!std::isfinite(work_[i]))
      return err(Errc::kInvalidArgument, "1-bit compression: gradient value " + std::to_string(i) +
                                             " plus its residual overflows fp32");
  }
  const size_t chunk = options_.chunk_size;
  const size_t chunks = chunk_count(n, chunk);
  OneBitPacket packet;
  packet.values = static_cast<uint32_t>(n);
  packet.chunk_size = static_cast<uint32_t>(chunk);
  packet.signs.assign((n + 7) / 8, 0);
  packet.positive.assign(chunks, 0.0f);
  packet.negative.assign(chunks, 0.0f);
  for (size_t c = 0; c < chunks; ++c) {
    const size_t begin = c * chunk, end = std::min(n, begin + chunk);
    double pos_sum = 0.0, neg_sum = 0.0;
    size_t pos_count = 0;
    for (size_t i = begin; i < end; ++i) {
      const float v = work_[i];
      if (v >= 0.0f) {
        pos_sum += v;
        ++pos_count;
        packet.signs[i / 8] = static_cast<uint8_t>(packet.signs[i / 8] | (1u << (i % 8)));
      } else {
        neg_sum += v;
      }
    }
    const size_t neg_count = (end - begin) - pos_count;
    const float pos = pos_count ? static_cast<float>(pos_sum / static_cast<double>(pos_count)) : 0.0f;
    const float neg = neg_count ? static_cast<float>(neg_sum / static_cast<double>(neg_count)) : 0.0f;
    packet.positive[c] = pos;
    packet.negative[c] = neg;
    for (size_t i = begin; i < end; ++i) {
      const float reconstructed = work_[i] >= 0.0f ? pos : neg;
      residual_[i] = options_.error_feedback ? work_[i] - reconstructed : 0.0f;
    }
  }
  return packet;
}

Status decompress(const OneBitPacket& packet, std::span<float> out) {
  if (out.size() != packet.values)
    return err(Errc::kInvalidArgument, "1-bit decompression: packet of " +
                                           std::to_string(packet.values) + " values into " +
                                           std::to_string(out.size()));
  if (packet.chunk_size == 0 || packet.signs.size() != (size_t{packet.values} + 7) / 8 ||
      packet.positive.size() != chunk_count(packet.values, packet.chunk_size) ||
      packet.negative.size() != packet.positive.size())
    return err(Errc::kInvalidArgument, "1-bit decompression: inconsistent packet sizes");
  const size_t chunk = packet.chunk_size;
  for (size_t i = 0; i < out.size(); ++i) {
    const bool bit = (packet.signs[i / 8] >> (i % 8)) & 1u;
    out[i] = bit ? packet.positive[i / chunk] : packet.negative[i / chunk];
  }
  return Status::Ok();
}

Status sum_decompressed(std::span<const OneBitPacket> packets, std::span<float> out) {
  if (packets.empty()) return err(Errc::kInvalidArgument, "1-bit sum of no packets");
  std::vector<float> one(out.size());
  std::fill(out.begin(), out.end(), 0.0f);
  for (const auto& packet : packets) {
    HPCTUNE_TRY(decompress(packet, one));
    for (size_t i = 0; i < out.size(); ++i) out[i] += one[i];
  }
  return Status::Ok();
}

std::vector<uint8_t> serialize(const OneBitPacket& packet) {
  std::vector<uint8_t> out;
  out.reserve(packet.bytes());
  put_u32(out, kOneBitMagic);
  put_u32(out, packet.values);
  put_u32(out, packet.chunk_size);
  out.insert(out.end(), packet.signs.begin(), packet.signs.end());
  for (size_t c = 0; c < packet.positive.size(); ++c) {
    put_u32(out, std::bit_cast<uint32_t>(packet.positive[c]));
    put_u32(out, std::bit_cast<uint32_t>(c < packet.negative.size() ? packet.negative[c] : 0.0f));
  }
  return out;
}

Result<OneBitPacket> deserialize(std::span<const uint8_t> bytes, size_t expected_values) {
  if (bytes.size() < kOneBitHeaderBytes)
    return malformed(std::to_string(bytes.size()) + " bytes, shorter than its header");
  if (get_u32(bytes.data()) != kOneBitMagic) return malformed("wrong magic number");
  const size_t values = get_u32(bytes.data() + 4);
  const size_t chunk = get_u32(bytes.data() + 8);
  if (values != expected_values || values == 0 || values > kOneBitMaxValues)
    return malformed("stands for " + std::to_string(values) + " values, expected " +
                     std::to_string(expected_values));
  if (chunk == 0 || chunk > kOneBitMaxChunkSize)
    return malformed("chunk size " + std::to_string(chunk) + " is not 1 to " +
                     std::to_string(kOneBitMaxChunkSize));
  const size_t expected_bytes = onebit_packet_bytes(values, chunk);  // bounded: no overflow
  if (bytes.size() != expected_bytes)
    return malformed(std::to_string(bytes.size()) + " bytes, expected " +
                     std::to_string(expected_bytes));
  OneBitPacket packet;
  packet.values = static_cast<uint32_t>(values);
  packet.chunk_size = static_cast<uint32_t>(chunk);
  const size_t sign_bytes = (values + 7) / 8;
  const uint8_t* p = bytes.data() + kOneBitHeaderBytes;
  packet.signs.assign(p, p + sign_bytes);
  if (values % 8 != 0 && (packet.signs.back() >> (values % 8)) != 0)
    return malformed("padding bits after the last value are set");
  p += sign_bytes;
  const size_t chunks = chunk_count(values, chunk);
  packet.positive.resize(chunks);
  packet.negative.resize(chunks);
  for (size_t c = 0; c < chunks; ++c, p += 8) {
    const float pos = std::bit_cast<float>(get_u32(p));
    const float neg = std::bit_cast<float>(get_u32(p + 4));
    if (!std::isfinite(pos) || !std::isfinite(neg) || pos < 0.0f || neg > 0.0f)
      return malformed("chunk " + std::to_string(c) + " has reconstruction values " +
                       std::to_string(pos) + ", " + std::to_string(neg) +
                       " (must be finite, >= 0 and <= 0)");
    packet.positive[c] = pos;
    packet.negative[c] = neg;
  }
  return packet;
}

}  // namespace hpctune::collectives
