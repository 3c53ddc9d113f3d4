// Small text helpers shared by the config, the CLI and the search: joining lists, printing numbers.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <system_error>
#include <vector>

namespace hpctune {

// "a, b, c" from {"a", "b", "c"} and ", ".
inline std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : sep) + i;
  return out;
}

// The shortest text that reads back as the same double ("0.05", "1e-06", "3"); whole numbers
// without a fraction, and YAML's spelling of the non-finite ones (.nan, .inf, -.inf), because the
// same text goes into configs/reference.yaml and into messages about config values.
inline std::string format_number(double value) {
  if (std::isnan(value)) return ".nan";
  if (std::isinf(value)) return value > 0 ? ".inf" : "-.inf";
  if (std::floor(value) == value && std::fabs(value) < 1e15) return std::to_string(static_cast<int64_t>(value));
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  if (ec != std::errc()) return "?";
  return std::string(buf, end);
}

}  // namespace hpctune
