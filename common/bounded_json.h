// Parsing JSON text that someone else may have written (a database file), within the depth and
// size limits of common/limits.h, so that a crafted value is an error, not a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/limits.h"
#include "common/result.h"

namespace hpctune {

// Whether `text` nests arrays and objects deeper than `max_depth` (brackets inside strings do not
// count). One pass without recursion, so it is safe on any input.
inline bool json_deeper_than(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

// Parses `text`, refusing (kIo, naming `what`) more than kMaxStoredJsonBytes, nesting deeper than
// kMaxJsonDepth, and text that is not JSON. Never throws.
inline Result<nlohmann::json> parse_bounded_json(std::string_view text, const std::string& what) {
  if (static_cast<int64_t>(text.size()) > kMaxStoredJsonBytes) {
    return err(Errc::kIo, what + " holds " + std::to_string(text.size()) + " bytes of JSON, more than the " +
                              std::to_string(kMaxStoredJsonBytes) + " hpctune reads");
  }
  if (json_deeper_than(text, kMaxJsonDepth)) {
    return err(Errc::kIo, what + " holds JSON nested more than " + std::to_string(kMaxJsonDepth) + " levels deep");
  }
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return err(Errc::kIo, "corrupt JSON in " + what);
  return j;
}

}  // namespace hpctune
