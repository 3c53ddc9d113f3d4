// Text from outside (what a trainer wrote, what a database file holds) made safe to print on a
// terminal. Header-only: the store's messages (store/) and the CLI's output (report/format.h's
// terminal_safe, which is this) share it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace hpctune {

// `text` as it may be printed on a terminal: it must not clear the screen, move the cursor or
// rewrite earlier lines. Control characters are shown escaped (ESC as \x1b, CR as \r, any other as
// \xNN), as are DEL, the C1 controls U+0080..U+009F and bytes that are not UTF-8; line feeds and
// tabs stay as they are, or are shown as \n and \t with `one_line` (a table's cell, a message).
inline std::string terminal_safe(std::string_view text, bool one_line = false) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  auto escape = [&](unsigned char c) {
    if (c == '\r') out += "\\r";
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else out += std::string("\\x") + kHex[c >> 4] + kHex[c & 15];
  };
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      if ((c < 0x20 && !((c == '\n' || c == '\t') && !one_line)) || c == 0x7f) escape(c);
      else out += static_cast<char>(c);
      ++i;
      continue;
    }
    // A UTF-8 sequence: its length, its code point, and whether it is well formed.
    const std::size_t len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    uint32_t cp = len == 2 ? (c & 0x1Fu) : len == 3 ? (c & 0x0Fu) : (c & 0x07u);
    bool ok = len != 0 && i + len <= text.size();
    for (std::size_t k = 1; ok && k < len; ++k) {
      const auto cc = static_cast<unsigned char>(text[i + k]);
      ok = (cc & 0xC0) == 0x80;
      cp = (cp << 6) | (cc & 0x3Fu);
    }
    static const uint32_t kMinOf[] = {0, 0, 0x80, 0x800, 0x10000};
    if (ok) ok = cp >= kMinOf[len] && !(cp >= 0xD800 && cp <= 0xDFFF) && cp <= 0x10FFFF && !(cp >= 0x80 && cp <= 0x9F);
    if (!ok) {
      escape(c);
      ++i;
      continue;
    }
    out.append(text.substr(i, len));
    i += len;
  }
  return out;
}

}  // namespace hpctune
