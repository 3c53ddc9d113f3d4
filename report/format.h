// Text for people: numbers to 4 significant digits, durations, local times, terminal widths and
// aligned tables. (common/text.h's format_number is the other one: every digit, for configs.)
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
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

// `text` as it may be printed on a terminal: what a trainer wrote (its errors, its stderr, names it
// reported) must not clear the screen, move the cursor or rewrite earlier lines. Control
// characters are shown escaped (ESC as \x1b, CR as \r, any other as \xNN), as are DEL, the C1
// controls U+0080..U+009F and bytes that are not UTF-8; line feeds and tabs stay as they are, or
// are shown as \n and \t with `one_line` (a table's cell). common/terminal_safe.h's, which the
// store's messages use too.
std::string terminal_safe(std::string_view text, bool one_line = false);

// A table with a header row, columns aligned; numeric-looking cells right-aligned. Cells are shown
// on one line with control characters escaped (terminal_safe, common/text.h).
std::string format_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);

}  // namespace hpctune::report
