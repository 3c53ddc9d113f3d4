// Text for people: numbers, durations, times, widths and aligned tables (format.h).
#include "report/format.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <sstream>

#include "common/terminal_safe.h"

namespace hpctune::report {

std::string format_number(double value) {
  if (!std::isfinite(value)) return std::isnan(value) ? "nan" : (value > 0 ? "inf" : "-inf");
  char buf[64];
  const double a = std::fabs(value);
  if (a != 0 && (a < 1e-3 || a >= 1e6)) {
    std::snprintf(buf, sizeof(buf), "%.4g", value);
  } else if (value == std::floor(value) && a < 1e6) {
    std::snprintf(buf, sizeof(buf), "%.0f", value);
  } else {
    std::snprintf(buf, sizeof(buf), "%.4f", value);
  }
  return buf;
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  auto total = static_cast<int64_t>(std::llround(seconds));
  char buf[32];
  if (total >= 3600) {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld:%02lld", static_cast<long long>(total / 3600),
                  static_cast<long long>((total / 60) % 60), static_cast<long long>(total % 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld", static_cast<long long>(total / 60), static_cast<long long>(total % 60));
  }
  return buf;
}

std::string time_text(double t) {
  if (t <= 0) return "-";
  const std::time_t secs = static_cast<std::time_t>(t);
  std::tm local{};
  localtime_r(&secs, &local);  // not std::localtime: report functions may run on several threads
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &local);
  return buf;
}

size_t display_width(const std::string& text) {
  size_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;  // one column per code point (no wide glyphs here)
  return n;
}

std::string truncate_display(const std::string& text, size_t width) {
  if (display_width(text) <= width) return text;
  size_t cols = 0, i = 0;
  for (; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c & 0xC0) != 0x80) {
      if (cols == width) break;  // the next code point would not fit
      ++cols;
    }
  }
  return text.substr(0, i);
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

namespace {

bool numeric(const std::string& s) {
  if (s.empty()) return false;
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  return end && *end == '\0';
}

}  // namespace

std::string terminal_safe(std::string_view text, bool one_line) { return hpctune::terminal_safe(text, one_line); }

std::string format_table(const std::vector<std::string>& header_in, const std::vector<std::vector<std::string>>& rows_in) {
  // Cells may hold what a trainer wrote: shown on one line, control characters escaped.
  std::vector<std::string> header;
  for (const auto& h : header_in) header.push_back(terminal_safe(h, true));
  std::vector<std::vector<std::string>> rows;
  rows.reserve(rows_in.size());
  for (const auto& r : rows_in) {
    std::vector<std::string> safe;
    safe.reserve(r.size());
    for (const auto& cell : r) safe.push_back(terminal_safe(cell, true));
    rows.push_back(std::move(safe));
  }
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) width[c] = header[c].size();
  for (const auto& r : rows) {
    for (size_t c = 0; c < r.size() && c < width.size(); ++c) width[c] = std::max(width[c], r[c].size());
  }
  std::ostringstream out;
  auto line = [&](const std::vector<std::string>& r, bool is_header) {
    for (size_t c = 0; c < width.size(); ++c) {
      const std::string v = c < r.size() ? r[c] : "";
      const size_t pad = width[c] - v.size();
      const bool right = !is_header && numeric(v);
      if (c) out << "  ";
      if (right) out << std::string(pad, ' ') << v;
      else out << v << (c + 1 < width.size() ? std::string(pad, ' ') : "");
    }
    out << "\n";
  };
  line(header, true);
  std::vector<std::string> rule;
  for (size_t w : width) rule.push_back(std::string(w, '-'));
  line(rule, true);
  for (const auto& r : rows) line(r, false);
  return out.str();
}

}  // namespace hpctune::report
