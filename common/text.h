// Small text helpers shared by the config, the CLI, the search and the trainers: joining lists,
// printing numbers, and the "did you mean" of every unknown name (config keys, enum values,
// trainer settings).
#pragma once

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
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

// Optimal-string-alignment distance (insertions, deletions, substitutions, adjacent swaps).
inline std::size_t edit_distance(std::string_view a, std::string_view b) {
  const std::size_t n = a.size(), m = b.size();
  std::vector<std::vector<std::size_t>> d(n + 1, std::vector<std::size_t>(m + 1));
  for (std::size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= n; ++i) {
    for (std::size_t j = 1; j <= m; ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);  // an adjacent swap
    }
  }
  return d[n][m];
}

// A name to suggest for a misspelled word.
struct Candidate {
  std::string match;       // compared with the word (a key name or one of its aliases)
  std::string suggestion;  // what to print ("lr" for the alias "learning_rate")
};

// The closest candidate: case-insensitive, '-' equal to '_'; a distance of at most a quarter of
// the longer name (at least 1), or `word` (3+ characters) a prefix of the candidate. Ties go to
// the earlier candidate. nullopt when nothing is close.
inline std::optional<std::string> did_you_mean(std::string_view word, const std::vector<Candidate>& candidates) {
  auto lower_key = [](std::string_view s) {
    std::string out(s);
    for (auto& c : out) c = c == '-' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
  };
  const std::string w = lower_key(word);
  if (w.empty()) return std::nullopt;
  std::optional<std::string> best;
  std::size_t best_score = std::numeric_limits<std::size_t>::max();
  for (const auto& c : candidates) {
    const std::string m = lower_key(c.match);
    const std::size_t d = edit_distance(w, m);
    const std::size_t limit = std::max<std::size_t>(1, std::max(w.size(), m.size()) / 4);
    std::size_t score = std::numeric_limits<std::size_t>::max();
    if (d <= limit) score = d;
    else if (w.size() >= 3 && m.rfind(w, 0) == 0) score = limit + 1;  // a prefix: ranked after typos
    if (score < best_score) {
      best_score = score;
      best = c.suggestion;
    }
  }
  return best;
}

// Single-quotes `text` for /bin/sh unless every character is in [A-Za-z0-9_.,:/=+@%-] (then it is
// left as it is, so that commands stay readable): the command trainer's commands and the SLURM
// batch script.
inline std::string shell_quote(std::string_view text) {
  auto safe = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || std::string_view("_.,:/=+@%-").find(c) != std::string_view::npos;
  };
  if (!text.empty() && std::all_of(text.begin(), text.end(), safe)) return std::string(text);
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  return out + "'";
}

// --- UTF-8 ---------------------------------------------------------------------------------------

// Whether `s` is valid UTF-8 (no overlong forms, surrogates or values past U+10FFFF).
inline bool valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;  // the sequence runs past the end
    for (std::size_t k = 1; k <= n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += n + 1;
  }
  return true;
}

// Text the sender cannot vouch for (a program's stderr): every byte that is not part of a valid
// UTF-8 sequence becomes U+FFFD, so that the receiver (and the store's JSON) can take it.
inline std::string sanitize_utf8(const std::string& s) {
  if (valid_utf8(s)) return s;
  std::string out;
  out.reserve(s.size() + 16);
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t n = c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (c >= 0x80 && (i + n > s.size() || !valid_utf8(std::string_view(s).substr(i, n)))) {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    out.append(s, i, n);
    i += n;
  }
  return out;
}

}  // namespace hpctune
