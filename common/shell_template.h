// Where the `{name}` placeholders of a command template sit in the shell's quoting.
//
// The command trainer substitutes each value single-quoted for /bin/sh ('it'\''s'). That is safe
// only in unquoted text. Inside '...' the value's own quotes close and reopen the string, leaving
// the value itself unquoted; inside "...", `...` or $(...) a quote is an ordinary character or is
// parsed again. In each, a value such as $(touch x) would run. Those places are refused, as is a placeholder right after a backslash or a `$` (the value's first quote would be
// escaped, or glued to `$`). Both the config check (`hpctune validate`) and the trainer itself use
// this, so an old campaign resumed without validation is refused too.
//
// Header-only: hpctune_config (scheduler/) and hpctune_trainers (trainers/) both need it and share
// only hpctune_common.
#pragma once

#include <cctype>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hpctune {

// The names a command template may use besides the space's parameters (the command trainer gives
// their values; the config check refuses any other name).
inline constexpr const char* kTemplateBuiltins[] = {"trial_id", "trial_dir", "attempt", "attempt_dir", "seed", "ranks"};

// nullopt when every placeholder of `tmpl` is in a safe place; otherwise what is wrong with the
// first one that is not, and how to fix it. Malformed placeholders are not judged here (the
// renderer names them).
inline std::optional<std::string> unsafe_placeholder(std::string_view tmpl) {
  enum class Ctx { kTop, kSingle, kDouble, kBacktick, kSubst };
  std::vector<Ctx> stack = {Ctx::kTop};
  std::vector<int> parens;  // open parentheses inside each $( ... ), innermost last
  auto name_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '.' || c == '-'; };
  auto where = [&]() -> std::string {  // the innermost quoting that matters
    for (auto it = stack.rbegin(); it != stack.rend(); ++it) {
      if (*it == Ctx::kSingle) return "inside single quotes";
      if (*it == Ctx::kDouble) return "inside double quotes";
      if (*it == Ctx::kBacktick) return "inside backticks";
      if (*it == Ctx::kSubst) return "inside $(...)";
    }
    return "";
  };
  for (std::size_t i = 0; i < tmpl.size(); ++i) {
    const char c = tmpl[i];
    const Ctx ctx = stack.back();
    if (c == '{' || c == '}') {
      if (i + 1 < tmpl.size() && tmpl[i + 1] == c) {  // {{ and }}: a literal brace
        ++i;
        continue;
      }
      if (c == '}') continue;
      std::size_t end = i + 1;
      while (end < tmpl.size() && name_char(tmpl[end])) ++end;
      if (end == i + 1 || end >= tmpl.size() || tmpl[end] != '}') continue;  // malformed: the renderer says so
      const std::string placeholder(tmpl.substr(i, end - i + 1));
      const std::string at = "the placeholder " + placeholder + " at character " + std::to_string(i + 1);
      const std::string fix =
          ": its value would be read by the shell again there and could run commands. Write it outside "
          "quotes (values are single-quoted for the shell automatically), e.g. --name={v} rather than "
          "\"--name={v}\", or read the parameters from $HPCTUNE_PARAMS";
      const std::string in = where();
      if (!in.empty()) return at + " is " + in + fix;
      const char before = i > 0 ? tmpl[i - 1] : ' ';
      if (before == '\\') return at + " follows a backslash" + fix;
      if (before == '$') return at + " follows a '$'" + fix;
      i = end;
      continue;
    }
    switch (ctx) {
      case Ctx::kSingle:
        if (c == '\'') stack.pop_back();
        break;
      case Ctx::kDouble:
        if (c == '\\') ++i;
        else if (c == '"') stack.pop_back();
        else if (c == '`') stack.push_back(Ctx::kBacktick);
        else if (c == '$' && i + 1 < tmpl.size() && tmpl[i + 1] == '(') stack.push_back(Ctx::kSubst), parens.push_back(0), ++i;
        break;
      case Ctx::kBacktick:
        if (c == '\\') ++i;
        else if (c == '`') stack.pop_back();
        break;
      case Ctx::kTop:
      case Ctx::kSubst:
        if (c == '\\') {
          // An escaped placeholder brace is judged above; skip any other escaped character.
          if (i + 1 < tmpl.size() && tmpl[i + 1] != '{') ++i;
        } else if (c == '\'') {
          stack.push_back(Ctx::kSingle);
        } else if (c == '"') {
          stack.push_back(Ctx::kDouble);
        } else if (c == '`') {
          stack.push_back(Ctx::kBacktick);
        } else if (c == '$' && i + 1 < tmpl.size() && tmpl[i + 1] == '(') {
          stack.push_back(Ctx::kSubst);
          parens.push_back(0);
          ++i;
        } else if (ctx == Ctx::kSubst && c == '(') {
          ++parens.back();
        } else if (ctx == Ctx::kSubst && c == ')') {
          if (parens.back() == 0) {
            parens.pop_back();
            stack.pop_back();
          } else {
            --parens.back();
          }
        }
        break;
    }
  }
  return std::nullopt;
}

}  // namespace hpctune
