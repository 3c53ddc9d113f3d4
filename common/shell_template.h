// Where the `{name}` placeholders of a command template may stand, judged as /bin/sh reads it.
//
// The command trainer substitutes each value single-quoted for /bin/sh ('it'\''s). That is safe
// only where the shell reads the word once, as an argument. Refused, because the value would be
// read again or would end what holds it:
//   - inside '...', "...", `...`, $(...) or ${...}, or right after `\` or `$`;
//   - inside a comment (a value holding a line break ends it) or a here-document (its end word or
//     a $(...) in the value would act), or in a here-document's end word;
//   - in the program word (the value would choose what runs; the built-in names such as
//     {trial_dir} may stand there);
//   - in an argument of a command that runs its arguments as code: eval, `.`, source, trap, alias,
//     ssh, rsh, su, runuser, watch (every argument); a shell or interpreter (sh, bash, zsh, ...,
//     python, perl, ruby, node, awk, ...) in an option or in its code: the -c/-e text, or the
//     script when there is none (an option's argument is fine: awk -v x={v}); after the code a
//     placeholder is an argument of the script (sh -c 'prog "$1"' sh {v}). Found behind wrappers
//     too (env, exec, nice, timeout, xargs, sudo, srun, mpirun, find, ...); a program named by an
//     expansion ($PY) is judged as an interpreter;
//   - anywhere after $'...' or a ' inside "${...}" (shells read these differently).
// A value piped into an interpreter (`echo {v} | sh`) is data the lexer cannot follow: that stays
// the template author's responsibility. Both the config check (`hpctune validate`) and the trainer
// use this, so an old campaign resumed without validation is refused too.
//
// Header-only: hpctune_config (config/) and hpctune_trainers (trainers/) both need it and share
// only hpctune_common.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hpctune {

// The names a command template may use besides the space's parameters (the command trainer gives
// their values; the config check refuses any other name).
inline constexpr const char* kTemplateBuiltins[] = {"trial_id", "trial_dir", "attempt", "attempt_dir", "seed",
                                                   "ranks",    "max_step",  "checkpoint_dir"};

// The names a persistent program's command may use (trainer.persistent): its values stay fixed for
// the program's life; the trial's own come through the helper (hp.params(), HPCTUNE_PARAMS).
inline constexpr const char* kProgramPlaceholders[] = {"ranks"};

// The first placeholder of `tmpl` that a persistent program's command may not hold, as a message;
// nullopt when there is none. Malformed placeholders are left to the other checks.
inline std::optional<std::string> per_trial_placeholder(std::string_view tmpl) {
  auto name_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '.' || c == '-'; };
  for (std::size_t i = 0; i < tmpl.size(); ++i) {
    if (tmpl[i] != '{') continue;
    if (i + 1 < tmpl.size() && tmpl[i + 1] == '{') {
      ++i;
      continue;
    }
    std::size_t end = i + 1;
    while (end < tmpl.size() && name_char(tmpl[end])) ++end;
    if (end >= tmpl.size() || tmpl[end] != '}') continue;
    const std::string_view name = tmpl.substr(i + 1, end - i - 1);
    bool fixed = false;
    for (const char* p : kProgramPlaceholders) fixed = fixed || name == p;
    if (!fixed)
      return "'{" + std::string(name) + "}' changes from trial to trial, and a persistent program (persistent: true) "
             "is started once for many trials: its command may hold only {ranks}; read the trial's values in the "
             "program with hp.params() (tools/python/hpctune_report.py) or from HPCTUNE_PARAMS and the other "
             "HPCTUNE_ variables";
    i = end;
  }
  return std::nullopt;
}

// A placeholder in a place the check refuses.
struct TemplateProblem {
  std::size_t offset = 0;  // of the placeholder's '{' in the template (0-based)
  int line = 1, column = 1;  // the same, 1-based lines and columns of the template
  std::string what;        // "the placeholder {v} at character 12 is inside ...: ... (how to fix it)"
};

namespace shell_template_detail {

inline bool name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '.' || c == '-'; }
inline bool blank(char c) { return c == ' ' || c == '\t'; }
inline bool builtin_name(std::string_view n) {
  for (const char* b : kTemplateBuiltins) if (n == b) return true;
  return false;
}

// How a program reads its arguments as code.
struct Reader {
  enum class Kind { kNone, kAll, kCode } kind = Kind::kNone;
  std::string_view code_short, arg_short;  // option letters: the code follows; an argument follows
  std::vector<std::string_view> code_long, arg_long;
  bool plus_options = false;  // +o as well as -o (the shells)
};

inline bool is_wrapper(std::string_view p) {
  static const std::string_view kWrappers[] = {
      "env", "exec", "command", "builtin", "nohup", "nice", "ionice", "chrt", "taskset", "numactl", "time", "timeout",
      "stdbuf", "setsid", "sudo", "doas", "xargs", "flock", "chroot", "unshare", "nsenter", "srun", "mpirun", "mpiexec",
      "strace", "ltrace", "valgrind", "busybox", "singularity", "apptainer", "prlimit", "systemd-run", "find", "script",
      "parallel"};
  return std::find(std::begin(kWrappers), std::end(kWrappers), p) != std::end(kWrappers);
}

inline Reader reader_of(std::string_view p) {
  using K = Reader::Kind;
  static const std::string_view kAll[] = {"eval", ".", "source", "trap", "alias", "ssh", "rsh", "slogin", "su", "runuser", "watch"};
  if (std::find(std::begin(kAll), std::end(kAll), p) != std::end(kAll)) return {K::kAll, "", "", {}, {}};
  static const std::string_view kShells[] = {"sh", "bash", "dash", "zsh", "ksh", "ksh93", "mksh", "pdksh", "yash", "posh",
                                             "ash", "rbash", "fish", "csh", "tcsh"};
  if (std::find(std::begin(kShells), std::end(kShells), p) != std::end(kShells))
    return {K::kCode, "c", "oO", {"command"}, {"rcfile", "init-file"}, true};
  const bool python = p.substr(0, 6) == "python" &&
                      std::all_of(p.begin() + 6, p.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)) || c == '.'; });
  if (python || p == "pypy" || p == "pypy3") return {K::kCode, "cm", "WXQ", {}, {"check-hash-based-pycs"}};
  if (p == "perl") return {K::kCode, "eE", "IMmx", {}, {}};
  if (p == "ruby") return {K::kCode, "e", "IrCEx", {}, {}};
  if (p == "node" || p == "nodejs" || p == "deno" || p == "bun") return {K::kCode, "ep", "r", {"eval", "print"}, {"require", "import", "loader"}};
  if (p == "php") return {K::kCode, "rBRFE", "cdz", {}, {}};
  if (p == "Rscript" || p == "R" || p == "julia" || p == "lua" || p == "luajit" || p == "tclsh" || p == "wish")
    return {K::kCode, "eE", "l", {"eval", "expr"}, {}};
  if (p == "awk" || p == "gawk" || p == "mawk" || p == "nawk") return {K::kCode, "", "fvF", {"source"}, {"file", "assign", "field-separator"}};
  return {};
}

// One word of a simple command, as the shell will see it once quotes are removed.
struct Word {
  std::string text;                      // quote-removed; '$' stands for any expansion, '\x01' for a placeholder
  bool expansion = false;
  std::vector<std::size_t> placeholders;  // offsets of its placeholders' '{'
  bool builtin_only = true;              // every placeholder in it is a built-in name
  bool redirect = false;                 // the target of < or >
};

}  // namespace shell_template_detail

// nullopt when every placeholder of `tmpl` stands where /bin/sh reads its value once, as an
// argument; otherwise the first one that does not, with how to fix it. Malformed placeholders are
// not judged here (the renderer names them).
inline std::optional<TemplateProblem> template_problem(std::string_view tmpl) {
  using namespace shell_template_detail;
  enum class Ctx { kTop, kSingle, kDouble, kBacktick, kSubst, kParam };
  struct Level {  // a command list: the template itself, or one $( ... ) inside it
    std::vector<Word> words;
    Word cur;
    bool in_word = false;
    bool redirect_next = false;
    int parens = 0;
  };
  struct Heredoc {
    std::string end;
    bool strip_tabs = false;
  };
  std::vector<Ctx> stack = {Ctx::kTop};
  std::vector<Level> levels(1);
  std::vector<Heredoc> pending;            // here-documents whose bodies start at the next line
  std::optional<std::size_t> ansi_quote;   // where a $'...' or a ' inside "${...}" was seen
  std::optional<TemplateProblem> found;
  const std::string_view kFix =
      ": its value would be read by the shell again there and could run commands. Write it outside "
      "quotes (values are single-quoted for the shell automatically), e.g. --name={v} rather than "
      "\"--name={v}\", or read the parameters from $HPCTUNE_PARAMS";

  auto place = [&](std::size_t at) {
    TemplateProblem p;
    p.offset = at;
    for (std::size_t k = 0; k < at; ++k) {
      if (tmpl[k] == '\n') ++p.line, p.column = 1;
      else ++p.column;
    }
    return p;
  };
  auto placeholder_end = [&](std::size_t i) -> std::size_t {  // index of its '}', or npos if `i` starts none
    if (tmpl[i] != '{' || (i + 1 < tmpl.size() && tmpl[i + 1] == '{')) return std::string_view::npos;
    std::size_t end = i + 1;
    while (end < tmpl.size() && name_char(tmpl[end])) ++end;
    if (end == i + 1 || end >= tmpl.size() || tmpl[end] != '}') return std::string_view::npos;
    return end;
  };
  // The first placeholder in [from, to) (a doubled "{{" is a literal brace), or npos.
  auto first_placeholder = [&](std::size_t from, std::size_t to) -> std::size_t {
    for (std::size_t k = from; k < to; ++k) {
      if (tmpl[k] == '{' && k + 1 < to && tmpl[k + 1] == '{') {
        ++k;
        continue;
      }
      if (placeholder_end(k) != std::string_view::npos) return k;
    }
    return std::string_view::npos;
  };
  auto refuse = [&](std::size_t at, const std::string& why, std::string_view fix) {
    if (found) return;
    const std::size_t end = placeholder_end(at);
    TemplateProblem p = place(at);
    const std::string name(tmpl.substr(at, end == std::string_view::npos ? 1 : end - at + 1));
    const std::size_t last = tmpl.find_last_not_of('\n');  // a block scalar's final line break is not a line
    const bool one_line = last == std::string_view::npos || tmpl.substr(0, last).find('\n') == std::string_view::npos;
    p.what = "the placeholder " + name +
             (one_line ? " at character " + std::to_string(at + 1)
                       : " at line " + std::to_string(p.line) + ", column " + std::to_string(p.column) + " of the command") +
             " " + why + std::string(fix);
    found = std::move(p);
  };
  const std::string_view kReadAgain =
      ": the value would be read again as code there and could run commands. Pass it where it stays an argument "
      "(sh -c 'prog \"$1\"' sh {v}, or python3 script.py {v}), or read the parameters from $HPCTUNE_PARAMS";

  // Judges one simple command once its words are known.
  auto judge = [&](std::vector<Word> words) {
    words.erase(std::remove_if(words.begin(), words.end(), [](const Word& w) { return w.redirect; }), words.end());
    std::size_t k = 0;
    auto assignment = [](const Word& w) {
      const auto eq = w.text.find('=');
      if (eq == std::string::npos || eq == 0 || std::isdigit(static_cast<unsigned char>(w.text[0]))) return false;
      return std::all_of(w.text.begin(), w.text.begin() + static_cast<std::ptrdiff_t>(eq),
                         [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; });
    };
    auto keyword = [](const std::string& t) {
      static const std::string_view kKeywords[] = {"if", "then", "else", "elif", "while", "until", "do", "!", "{", "}"};
      return std::find(std::begin(kKeywords), std::end(kKeywords), t) != std::end(kKeywords);
    };
    while (k < words.size() && (assignment(words[k]) || keyword(words[k].text))) ++k;
    if (k >= words.size()) return;
    auto program_of = [](const Word& w) -> std::string {
      const auto slash = w.text.find_last_of('/');
      std::string base = slash == std::string::npos ? w.text : w.text.substr(slash + 1);
      if (base.find('$') != std::string::npos || base.find('\x01') != std::string::npos) return "$";  // unknown
      return base;
    };
    // The program word.
    if (!words[k].placeholders.empty() && !words[k].builtin_only) {
      refuse(words[k].placeholders.front(), "is the program word: the value would choose the command that runs",
             ". Name the program in the template and pass the value as an argument");
      return;
    }
    std::string program = program_of(words[k]);
    // Behind wrappers (env, exec, timeout, xargs, ...): the first later word naming a code reader.
    if (is_wrapper(program)) {
      std::size_t next = words.size();
      // Only `command` and `builtin` run a shell builtin (eval, ., source, trap, alias); `find .` is a folder.
      const bool builtins = program == "command" || program == "builtin";
      auto shell_builtin = [](const std::string& p) { return p == "eval" || p == "." || p == "source" || p == "trap" || p == "alias"; };
      for (std::size_t m = k + 1; m < words.size() && next == words.size(); ++m) {
        const std::string p = program_of(words[m]);
        if (words[m].placeholders.empty() && !words[m].expansion && reader_of(p).kind != Reader::Kind::kNone &&
            (builtins || !shell_builtin(p)))
          next = m;
      }
      if (next == words.size()) return;
      k = next;
      program = program_of(words[k]);
    }
    Reader r = program == "$" ? Reader{Reader::Kind::kCode, "ceE", "", {"eval", "command"}, {}} : reader_of(program);
    const std::string shown = program == "$" ? "the program named by an expansion" : program;
    if (r.kind == Reader::Kind::kNone) return;
    if (r.kind == Reader::Kind::kAll) {
      for (std::size_t m = k + 1; m < words.size(); ++m) {
        if (!words[m].placeholders.empty()) {
          refuse(words[m].placeholders.front(), "is an argument of " + shown + ", which reads its arguments as shell code",
                 kReadAgain);
          return;
        }
      }
      return;
    }
    // A shell or interpreter: options, then the code (after a code option, else the first operand).
    bool code_next = false, arg_next = false, options_done = false;
    for (std::size_t m = k + 1; m < words.size(); ++m) {
      const Word& w = words[m];
      const std::string& t = w.text;
      if (arg_next) {
        arg_next = false;
        continue;
      }
      const bool option = !options_done && !code_next && t.size() > 1 && (t[0] == '-' || (t[0] == '+' && r.plus_options));
      if (code_next || !option) {
        if (!code_next && !options_done && t == "--") {
          options_done = true;
          continue;
        }
        if (!w.placeholders.empty())
          refuse(w.placeholders.front(), "is part of the code that " + shown + " runs", kReadAgain);
        return;  // after the code, every word is an argument of the script
      }
      if (!w.placeholders.empty()) {
        refuse(w.placeholders.front(), "is in an option of " + shown + " (before its code; it could be the code)", kReadAgain);
        return;
      }
      if (t.rfind("--", 0) == 0) {
        const auto eq = t.find('=');
        const std::string name = t.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
        if (std::find(r.code_long.begin(), r.code_long.end(), name) != r.code_long.end()) {
          if (eq == std::string::npos) code_next = true;
          else return;  // --eval=CODE: literal code, no placeholder in it
        } else if (eq == std::string::npos && std::find(r.arg_long.begin(), r.arg_long.end(), name) != r.arg_long.end()) {
          arg_next = true;
        }
        continue;
      }
      for (std::size_t c = 1; c < t.size(); ++c) {
        if (r.code_short.find(t[c]) != std::string_view::npos) {
          if (c + 1 == t.size()) code_next = true;
          else return;  // -cCODE, literal
          break;
        }
        if (r.arg_short.find(t[c]) != std::string_view::npos) {
          if (c + 1 == t.size()) arg_next = true;
          if (t[c] == 'f' && program.find("awk") != std::string::npos) return;  // awk -f FILE: the code is a file
          break;
        }
      }
    }
  };

  auto level = [&]() -> Level& { return levels.back(); };
  auto end_word = [&]() {
    Level& l = level();
    if (!l.in_word) return;
    l.cur.redirect = l.redirect_next;
    l.redirect_next = false;
    l.words.push_back(std::move(l.cur));
    l.cur = Word{};
    l.in_word = false;
  };
  auto end_command = [&]() {
    end_word();
    judge(std::move(level().words));
    level().words.clear();
  };
  auto add_char = [&](char c) {
    level().cur.text += c;
    level().in_word = true;
  };
  auto add_expansion = [&]() {
    level().cur.text += '$';
    level().cur.expansion = true;
    level().in_word = true;
  };
  auto where = [&]() -> std::string {  // the innermost quoting that matters
    for (auto it = stack.rbegin(); it != stack.rend(); ++it) {
      if (*it == Ctx::kSingle) return "inside single quotes";
      if (*it == Ctx::kDouble) return "inside double quotes";
      if (*it == Ctx::kBacktick) return "inside backticks";
      if (*it == Ctx::kSubst) return "inside $(...)";
      if (*it == Ctx::kParam) return "inside ${...}";
    }
    return "";
  };
  auto in_double = [&]() { return std::find(stack.begin(), stack.end(), Ctx::kDouble) != stack.end(); };
  // A word starts here: after a blank, a line break, an operator, or at the start.
  auto word_start = [&](std::size_t i) {
    return i == 0 || std::string_view(" \t\n;&|()<>").find(tmpl[i - 1]) != std::string_view::npos;
  };
  // Reads the bodies of the pending here-documents from `i` (the start of a line); returns where
  // the next line after them starts.
  auto read_heredocs = [&](std::size_t i) {
    for (const Heredoc& h : pending) {
      while (i < tmpl.size()) {
        std::size_t eol = tmpl.find('\n', i);
        if (eol == std::string_view::npos) eol = tmpl.size();
        std::string_view line = tmpl.substr(i, eol - i);
        if (h.strip_tabs) while (!line.empty() && line.front() == '\t') line.remove_prefix(1);
        // Literal braces in the end word are doubled in the template.
        std::string shown;
        for (std::size_t k = 0; k < line.size(); ++k) {
          shown += line[k];
          if ((line[k] == '{' || line[k] == '}') && k + 1 < line.size() && line[k + 1] == line[k]) ++k;
        }
        if (shown == h.end) {
          i = eol + (eol < tmpl.size() ? 1 : 0);
          break;
        }
        if (const std::size_t k = first_placeholder(i, eol); k != std::string_view::npos) {
          refuse(k, "is inside a here-document",
                 ": the shell expands $(...) there, and a value holding the end word would end it early and run "
                 "the rest as commands. Pass the value as an argument, or read it from $HPCTUNE_PARAMS");
          return tmpl.size();
        }
        i = eol + (eol < tmpl.size() ? 1 : 0);
        if (eol == tmpl.size()) break;
      }
    }
    pending.clear();
    return i;
  };

  for (std::size_t i = 0; i < tmpl.size() && !found; ++i) {
    const char c = tmpl[i];
    const Ctx ctx = stack.back();
    if (c == '{' || c == '}') {
      if (i + 1 < tmpl.size() && tmpl[i + 1] == c) {  // {{ and }}: a literal brace
        if (c == '}' && ctx == Ctx::kParam) stack.pop_back();
        else if (ctx != Ctx::kBacktick && ctx != Ctx::kParam) add_char(c);
        ++i;
        continue;
      }
      if (c == '}') {
        if (ctx == Ctx::kParam) stack.pop_back();
        else if (ctx != Ctx::kBacktick) add_char(c);
        continue;
      }
      const std::size_t end = placeholder_end(i);
      if (end == std::string_view::npos) continue;  // malformed: the renderer says so
      const std::string_view name = tmpl.substr(i + 1, end - i - 1);
      const std::string in = where();
      if (!in.empty()) return refuse(i, "is " + in, kFix), found;
      const char before = i > 0 ? tmpl[i - 1] : ' ';
      if (before == '\\') return refuse(i, "follows a backslash", kFix), found;
      if (before == '$') return refuse(i, "follows a '$'", kFix), found;
      if (ansi_quote) {
        const bool dollar = tmpl[*ansi_quote] == '$';
        refuse(i, std::string("follows ") + (dollar ? "$'...'" : "a ' inside \"${...}\"") + " at character " +
                      std::to_string(*ansi_quote + 1),
               ", which shells read differently, so where its value lands cannot be judged. Write that text "
               "another way");
        return found;
      }
      Level& l = level();
      l.cur.placeholders.push_back(i);
      if (!builtin_name(name)) l.cur.builtin_only = false;
      l.cur.text += '\x01';
      l.in_word = true;
      i = end;
      continue;
    }
    switch (ctx) {
      case Ctx::kSingle:
        if (c == '\'') stack.pop_back();
        else add_char(c);
        break;
      case Ctx::kDouble:
        if (c == '\\') {
          if (i + 1 < tmpl.size() && tmpl[i + 1] != '{') add_char(tmpl[++i]);
        } else if (c == '"') {
          stack.pop_back();
        } else if (c == '`') {
          stack.push_back(Ctx::kBacktick), add_expansion();
        } else if (c == '$' && i + 1 < tmpl.size() && tmpl[i + 1] == '(') {
          add_expansion();
          stack.push_back(Ctx::kSubst), levels.emplace_back(), ++i;
        } else if (c == '$' && i + 2 < tmpl.size() && tmpl[i + 1] == '{' && tmpl[i + 2] == '{') {
          stack.push_back(Ctx::kParam), add_expansion(), i += 2;
        } else if (c == '$') {
          add_expansion();
        } else {
          add_char(c);
        }
        break;
      case Ctx::kBacktick:
        if (c == '\\' && i + 1 < tmpl.size() && tmpl[i + 1] != '{') ++i;
        else if (c == '`') stack.pop_back();
        break;
      case Ctx::kParam:  // ${...}: its quotes nest; in "...", sh and bash differ on single quotes
        if (c == '\\') {
          if (i + 1 < tmpl.size() && tmpl[i + 1] != '{') ++i;
        }
        else if (c == '\'' && in_double() && !ansi_quote) ansi_quote = i;
        else if (c == '\'' && !in_double()) stack.push_back(Ctx::kSingle);
        else if (c == '"') stack.push_back(Ctx::kDouble);
        else if (c == '`') stack.push_back(Ctx::kBacktick);
        else if (c == '$' && i + 1 < tmpl.size() && tmpl[i + 1] == '(') stack.push_back(Ctx::kSubst), levels.emplace_back(), ++i;
        else if (c == '$' && i + 2 < tmpl.size() && tmpl[i + 1] == '{' && tmpl[i + 2] == '{') stack.push_back(Ctx::kParam), i += 2;
        break;
      case Ctx::kTop:
      case Ctx::kSubst: {
        Level& l = level();
        if (c == '\\') {
          // An escaped placeholder brace is judged above; a line continuation joins the word.
          if (i + 1 < tmpl.size() && tmpl[i + 1] != '{') {
            if (tmpl[i + 1] != '\n') add_char(tmpl[i + 1]);
            ++i;
          }
        } else if (c == '\'') {
          stack.push_back(Ctx::kSingle), l.in_word = true;
        } else if (c == '"') {
          stack.push_back(Ctx::kDouble), l.in_word = true;
        } else if (c == '`') {
          stack.push_back(Ctx::kBacktick), add_expansion();
        } else if (c == '$' && i + 1 < tmpl.size() && tmpl[i + 1] == '\'') {
          if (!ansi_quote) ansi_quote = i;
          add_expansion();
        } else if (c == '$' && i + 1 < tmpl.size() && tmpl[i + 1] == '(') {
          add_expansion();
          stack.push_back(Ctx::kSubst), levels.emplace_back(), ++i;
        } else if (c == '$' && i + 2 < tmpl.size() && tmpl[i + 1] == '{' && tmpl[i + 2] == '{') {
          stack.push_back(Ctx::kParam), add_expansion(), i += 2;
        } else if (c == '$') {
          add_expansion();
        } else if (c == '#' && !l.in_word && word_start(i)) {
          // A comment, to the end of the line: quotes in it are plain text.
          std::size_t eol = tmpl.find('\n', i);
          if (eol == std::string_view::npos) eol = tmpl.size();
          if (const std::size_t k = first_placeholder(i + 1, eol); k != std::string_view::npos) {
            refuse(k, "is inside a comment",
                   ": a value holding a line break would end the comment and run the rest as commands. Remove "
                   "the placeholder from the comment");
            return found;
          }
          i = eol - 1;  // the line break itself ends the command below
        } else if (c == '<' && i + 1 < tmpl.size() && tmpl[i + 1] == '<' && (i + 2 >= tmpl.size() || tmpl[i + 2] != '<')) {
          // A here-document: <<END or <<-END, the end word possibly quoted.
          end_word();
          std::size_t k = i + 2;
          Heredoc h;
          if (k < tmpl.size() && tmpl[k] == '-') h.strip_tabs = true, ++k;
          while (k < tmpl.size() && blank(tmpl[k])) ++k;
          for (; k < tmpl.size() && std::string_view(" \t\n;&|<>()").find(tmpl[k]) == std::string_view::npos; ++k) {
            const char d = tmpl[k];
            if (d == '{' || d == '}') {
              if (placeholder_end(k) != std::string_view::npos) {
                refuse(k, "is a here-document's end word",
                       ": the value would decide where the document ends. Write the end word in the template");
                return found;
              }
              if (k + 1 < tmpl.size() && tmpl[k + 1] == d) ++k;
              h.end += d;
            } else if (d == '\'' || d == '"') {
              const std::size_t close = tmpl.find(d, k + 1);
              if (close == std::string_view::npos) break;
              h.end += std::string(tmpl.substr(k + 1, close - k - 1));
              k = close;
            } else if (d == '\\') {
              if (k + 1 < tmpl.size()) h.end += tmpl[++k];
            } else {
              h.end += d;
            }
          }
          pending.push_back(std::move(h));
          i = k - 1;
        } else if (c == '<' || c == '>') {
          // An io number (2>) is not a word of the command; the next word is the redirection's target.
          if (l.in_word && !l.cur.text.empty() &&
              std::all_of(l.cur.text.begin(), l.cur.text.end(), [](char d) { return std::isdigit(static_cast<unsigned char>(d)); }))
            l.cur = Word{}, l.in_word = false;
          end_word();
          while (i + 1 < tmpl.size() && std::string_view("<>&|").find(tmpl[i + 1]) != std::string_view::npos) ++i;
          l.redirect_next = true;
        } else if (blank(c)) {
          end_word();
        } else if (c == '\n' || c == ';' || c == '&' || c == '|') {
          end_command();
          if (c == '\n' && !pending.empty()) i = read_heredocs(i + 1) - 1;
        } else if (c == '(') {
          end_command();
          if (ctx == Ctx::kSubst) ++l.parens;
        } else if (c == ')') {
          end_command();
          if (ctx == Ctx::kSubst) {
            if (l.parens == 0) {
              levels.pop_back();
              stack.pop_back();
            } else {
              --l.parens;
            }
          }
        } else {
          add_char(c);
        }
        break;
      }
    }
  }
  if (found) return found;
  // The end of the template ends every command still open; unread here-documents are empty.
  while (levels.size() > 1) {
    end_command();
    levels.pop_back();
  }
  end_command();
  return found;
}

// The message of template_problem(tmpl), or nullopt.
inline std::optional<std::string> unsafe_placeholder(std::string_view tmpl) {
  auto p = template_problem(tmpl);
  if (!p) return std::nullopt;
  return p->what;
}

}  // namespace hpctune
