// Text for people: numbers to 4 significant digits, durations, local times, terminal widths and
// aligned tables. (common/text.h's format_number is the other one: every digit, for configs.)
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace hpctune::report {

// 4 significant digits ("0.8712", "1.235e+06", "12"); nan, inf, -inf spelled out.
std::string format_number(double value);
// "m:ss", or "h:mm:ss" from an hour; "?" for a negative or non-finite time.
std::string format_duration(double seconds);
// A time in seconds since the epoch as local "YYYY-MM-DD HH:MM:SS"; "-" for 0 (not yet).
std::string time_text(double t);
// Columns `text` takes on a terminal (one per UTF-8 code point).
size_t display_width(const std::string& text);
// `text` cut to at most `width` columns, never inside a UTF-8 sequence.
std::string truncate_display(const std::string& text, size_t width);
// The first line of `text`.
std::string first_line(const std::string& text);

// A table with a header row, columns aligned; numeric-looking cells right-aligned.
std::string format_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);

}  // namespace hpctune::report
