// Secrets shared by every listener: random tokens from the system's random source and their
// comparison in constant time. The master's campaign secret and launch tokens (protocol/,
// scheduler/) and the dashboard's token (dashboard/) use these; header-only, common/ only.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>

#include "common/result.h"
#include "common/system.h"

namespace hpctune {

// `bytes` random bytes from the system's random source (random_bytes: getrandom, else
// /dev/urandom), as lower-case hex. For secrets: never a search choice, never from the config seed.
// kIo when no source works.
inline Result<std::string> random_hex(std::size_t bytes = 16) {
  std::string raw(bytes, '\0');
  if (!random_bytes(raw.data(), bytes))
    return err(Errc::kIo, "no random source for a secret (getrandom and /dev/urandom failed)");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes * 2);
  for (unsigned char c : raw) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 0x0f]);
  }
  return out;
}

// Compares two secrets in time that depends only on their lengths, not on where they differ.
inline bool secrets_equal(std::string_view a, std::string_view b) noexcept {
  // Every byte of the longer string is looked at, whatever matches: no early exit to time.
  const std::size_t n = std::max(a.size(), b.size());
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned>(x ^ y);
  }
  return diff == 0;
}

}  // namespace hpctune
