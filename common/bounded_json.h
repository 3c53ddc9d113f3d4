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

// Calls f(c) for every character of `text` outside its strings (brackets, separators, scalars). One
// pass without recursion, so it is safe on any input; f returns false to stop early.
template <typename F>
inline void for_each_structural_char(std::string_view text, F&& f) {
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (!f(c)) {
      return;
    }
  }
}

// Whether `text` nests arrays and objects deeper than `max_depth` (brackets inside strings do not
// count).
inline bool json_deeper_than(std::string_view text, int max_depth) {
  int depth = 0;
  bool deeper = false;
  for_each_structural_char(text, [&](char c) {
    if (c == '[' || c == '{') deeper = ++depth > max_depth;
    else if (c == ']' || c == '}') --depth;
    return !deeper;
  });
  return deeper;
}

// The memory that JSON read back from a database may take in all, per command (`hpctune status`,
// `trials`, `export`, ...) or per dashboard request: a budget on the stack of the thread that reads,
// charged by parse_bounded_json with an estimate of each value's size in memory (json_memory).
// Without one (the master, reading its own database) nothing is charged. Each value is bounded by
// kMaxStoredJsonBytes; a crafted database of many such values is refused here, naming the value,
// rather than running the machine out of memory.
class JsonReadBudget {
 public:
  explicit JsonReadBudget(int64_t bytes) : limit_(bytes), left_(bytes), outer_(current()) { current() = this; }
  ~JsonReadBudget() { current() = outer_; }
  JsonReadBudget(const JsonReadBudget&) = delete;
  JsonReadBudget& operator=(const JsonReadBudget&) = delete;
  static JsonReadBudget*& current() {
    thread_local JsonReadBudget* innermost = nullptr;
    return innermost;
  }
  bool charge(int64_t bytes) {
    if (bytes > left_) return false;
    left_ -= bytes;
    return true;
  }
  int64_t limit() const { return limit_; }

 private:
  int64_t limit_, left_;
  JsonReadBudget* outer_;
};
inline constexpr int64_t kJsonReadBudgetBytes = int64_t{1} << 30;  // 1 GiB per command or request

// An estimate of the memory `text` takes once parsed: a value (16 bytes in nlohmann::json, and as
// much again in its container) per separator, bracket or scalar, plus the text itself (strings).
inline int64_t json_memory(std::string_view text) {
  int64_t values = 1;
  for_each_structural_char(text, [&](char c) {
    if (c == ',' || c == ':' || c == '[' || c == '{') ++values;
    return true;
  });
  return values * 32 + static_cast<int64_t>(text.size());
}

// Parses `text`, refusing (kIo, naming `what`) more than kMaxStoredJsonBytes, more than the reading
// thread's JsonReadBudget has left, nesting deeper than kMaxJsonDepth, and text that is not JSON.
// Never throws.
inline Result<nlohmann::json> parse_bounded_json(std::string_view text, const std::string& what) {
  if (static_cast<int64_t>(text.size()) > kMaxStoredJsonBytes) {
    return err(Errc::kIo, what + " holds " + std::to_string(text.size()) + " bytes of JSON, more than the " +
                              std::to_string(kMaxStoredJsonBytes) + " hpctune reads");
  }
  if (JsonReadBudget* budget = JsonReadBudget::current()) {
    if (!budget->charge(json_memory(text)))
      return err(Errc::kIo, what + " holds " + std::to_string(text.size()) + " bytes of JSON, and reading it would take " +
                                "this command past the " + std::to_string(budget->limit() >> 20) +
                                " MiB that hpctune gives JSON read back from a database (a damaged or crafted store)");
  }
  if (json_deeper_than(text, kMaxJsonDepth)) {
    return err(Errc::kIo, what + " holds JSON nested more than " + std::to_string(kMaxJsonDepth) + " levels deep");
  }
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return err(Errc::kIo, "corrupt JSON in " + what);
  return j;
}

}  // namespace hpctune
