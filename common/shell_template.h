// Where the `{name}` placeholders of a command template may stand, judged as /bin/sh reads it.
//
// By allowing, not forbidding (issue 35, R1: a list of forbidden forms lost to 28 more). A
// placeholder of a parameter (the built-in names, {trial_dir} ..., hold hpctune's own values) may
// stand only as a plain argument, outside quotes, of a literal program that is known not to run its
// arguments as code:
//   - an interpreter (python, perl, ruby, node, Rscript, julia, lua, php, awk, ...) after its script
//     (or awk's code), with no code option (-c, -e, -m, --eval, ...) anywhere before it; a shell
//     after its script file, or as `sh -c 'CODE' NAME {v}` with -c alone;
//   - a program named by its path (./train, /opt/app/bin/train): the user's own;
//   - echo, printf, test, [, true, false, which print or compare their arguments; what they print
//     into a pipe may only go to filters that never run it (cat, tee, grep, head, sort, ...).
// Refused, with the place and the list form to use instead: any other program (a bare name the
// check does not know: aprun, conda, sed, ...), a wrapper (env, nice, timeout, srun, mpirun, find,
// xargs, sudo, ...), eval, source, ssh and the like, a program named by an expansion ($PY), the
// value as the program, an assignment before the program (BASH_ENV=, PERL5OPT=, PATH=), a
// redirection's target, and inside quotes, backticks, $(...), ${...}, $((...)), a comment, a
// here-document or its end word, or after $'...'. The list form (trainer.command as a list) runs
// without any shell: each placeholder is one argument, whatever it holds.
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

// Programs that print their arguments and never run them (a value they print into a pipe is data
// for the next command, judged there).
inline bool is_printer(std::string_view p) {
  static const std::string_view kPrinters[] = {"echo", "printf", "test", "[", "true", "false"};
  return std::find(std::begin(kPrinters), std::end(kPrinters), p) != std::end(kPrinters);
}
// Filters that may read a value from a pipe: they never run what they read.
inline bool is_pipe_filter(std::string_view p) {
  static const std::string_view kFilters[] = {"cat", "tee", "grep", "egrep", "fgrep", "head", "tail", "sort", "uniq",
                                              "wc", "cut", "tr", "rev", "nl", "fold", "fmt", "column", "less", "more"};
  return std::find(std::begin(kFilters), std::end(kFilters), p) != std::end(kFilters) || is_printer(p);
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
    std::size_t piped_in = std::string_view::npos;  // a placeholder whose value this command may read
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
  const std::string_view kList =
      ". Write the command as a list (command: [python3, train.py, --lr, \"{lr}\"]): hpctune runs it without a "
      "shell, each placeholder one argument; or read the values from $HPCTUNE_PARAMS";

  // An interpreter or shell (reader_of): options without any code option (their arguments literal),
  // then the script (or awk's code) as a literal word; parameters only after it, as the script's
  // arguments. A shell also takes `-c CODE NAME` with -c alone and CODE and NAME literal.
  auto judge_interpreter = [&](const std::vector<Word>& words, std::size_t k, const std::string& program,
                               const Reader& r, std::size_t first) {
    auto has_user = [](const Word& w) { return !w.placeholders.empty() && !w.builtin_only; };
    const bool shell = r.plus_options;
    const std::string code_first = ", before its script: only a script's arguments may hold values";
    bool options_done = false;
    for (std::size_t m = k + 1; m < words.size(); ++m) {
      const Word& w = words[m];
      const std::string& t = w.text;
      if (has_user(w)) {
        refuse(w.placeholders.front(), "is in an option of " + program + code_first, kList);
        return;
      }
      if (shell && t == "-c" && !options_done) {
        // sh -c 'CODE' NAME args: the code and $0 literal, the values only in "$1" ...
        if (m + 2 < words.size() && !has_user(words[m + 1]) && !has_user(words[m + 2]) && !words[m + 1].text.empty() &&
            words[m + 1].text[0] != '-' && words[m + 2].text[0] != '-')
          return;
        refuse(first, "follows " + program + " -c without a literal code word and a name before it (sh -c 'CODE' NAME {v})",
               kList);
        return;
      }
      const bool option = !options_done && t.size() > 1 && (t[0] == '-' || (t[0] == '+' && shell));
      if (!option) {
        if (!options_done && t == "--") {
          options_done = true;
          continue;
        }
        return;  // the script (or awk's code): every later word is an argument of it
      }
      if (t.rfind("--", 0) == 0) {
        const auto eq = t.find('=');
        const std::string name = t.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
        if (std::find(r.code_long.begin(), r.code_long.end(), name) != r.code_long.end()) {
          refuse(first, "is in a command where " + program + " runs code given with --" + name, kList);
          return;
        }
        if (eq == std::string::npos && std::find(r.arg_long.begin(), r.arg_long.end(), name) != r.arg_long.end()) ++m;
        continue;
      }
      for (std::size_t c = 1; c < t.size(); ++c) {
        if (r.code_short.find(t[c]) != std::string_view::npos) {
          refuse(first, "is in a command where " + program + " runs code given with -" + std::string(1, t[c]), kList);
          return;
        }
        if (r.arg_short.find(t[c]) != std::string_view::npos) {
          if (c + 1 == t.size()) ++m;  // the option's argument is the next word
          break;
        }
      }
    }
  };

  // Judges one simple command once its words are known: a placeholder (of a parameter; the
  // built-in names hold hpctune's own values) is allowed only as a plain argument of a literal
  // program that is known not to run its arguments as code (the allowlist below); anything else is
  // refused, pointing to the list form, which runs without a shell. `piped_in`: the offset of a
  // placeholder whose value may arrive on this command's standard input (an earlier command of the
  // pipeline printed it), npos when none. Returns the offset of a placeholder this command's output
  // may carry on into a pipe (npos when none).
  auto judge = [&](std::vector<Word> words, std::size_t piped_in) -> std::size_t {
    constexpr std::size_t npos = std::string_view::npos;
    auto user_placeholder = [](const Word& w) -> std::size_t {
      return w.placeholders.empty() || w.builtin_only ? npos : w.placeholders.front();
    };
    for (const Word& w : words) {
      if (w.redirect && user_placeholder(w) != npos) {
        refuse(user_placeholder(w), "is the target of a redirection (< or >)", kList);
        return npos;
      }
    }
    words.erase(std::remove_if(words.begin(), words.end(), [](const Word& w) { return w.redirect; }), words.end());
    std::size_t first = npos;  // the command's first parameter placeholder
    for (const Word& w : words)
      if (first == npos) first = user_placeholder(w);
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
    std::size_t k = 0;
    bool assigns = false;
    while (k < words.size() && (assignment(words[k]) || keyword(words[k].text))) assigns = assigns || assignment(words[k]), ++k;
    auto program_of = [](const Word& w) -> std::string {
      const auto slash = w.text.find_last_of('/');
      std::string base = slash == std::string::npos ? w.text : w.text.substr(slash + 1);
      if (w.expansion || base.find('$') != std::string::npos || base.find('\x01') != std::string::npos) return "$";
      return base;
    };
    const std::string program = k < words.size() ? program_of(words[k]) : std::string();
    // A value printed into this command's standard input: only filters that never run it may read it.
    if (piped_in != npos && k < words.size() && !is_pipe_filter(program)) {
      refuse(piped_in, "is printed into a pipe to " + (program == "$" ? std::string("a program named by an expansion") : program) +
                           ", which may run what it reads",
             kList);
      return npos;
    }
    if (first == npos) return piped_in != npos && is_pipe_filter(program) ? piped_in : npos;
    if (assigns) {
      refuse(first, "is in a command with an assignment before its program (VAR=value prog): variables such as "
                    "BASH_ENV, PERL5OPT or PATH change what runs", kList);
      return npos;
    }
    if (k >= words.size()) return npos;
    if (user_placeholder(words[k]) != npos) {
      refuse(user_placeholder(words[k]), "is the program word: the value would choose the command that runs", kList);
      return npos;
    }
    if (program == "$") {
      refuse(first, "is an argument of a program named by an expansion ($X): what runs cannot be judged", kList);
      return npos;
    }
    const Reader r = reader_of(program);
    if (is_wrapper(program) || r.kind == Reader::Kind::kAll) {
      refuse(first, "is an argument of " + program + ", which runs other commands or code", kList);
      return npos;
    }
    if (r.kind == Reader::Kind::kCode) {
      judge_interpreter(words, k, program, r, first);
      return npos;
    }
    if (is_printer(program)) return first;  // it prints the value: a pipe after it carries it
    if (words[k].text.find('/') != std::string::npos) return npos;  // a program of yours, by its path
    refuse(first, "is an argument of '" + program + "', which hpctune does not know not to run its arguments as code",
           kList);
    return npos;
  };

  auto level = [&]() -> Level& { return levels.back(); };
  // The index of the second ')' closing the arithmetic $(( at `i` (nested parentheses counted), or npos.
  auto arithmetic_end = [&](std::size_t i) -> std::size_t {
    int depth = 0;
    for (std::size_t k = i + 3; k < tmpl.size(); ++k) {
      if (tmpl[k] == '(') ++depth;
      else if (tmpl[k] == ')') {
        if (depth > 0) --depth;
        else if (k + 1 < tmpl.size() && tmpl[k + 1] == ')') return k + 1;
      }
    }
    return std::string_view::npos;
  };
  auto end_word = [&]() {
    Level& l = level();
    if (!l.in_word) return;
    l.cur.redirect = l.redirect_next;
    l.redirect_next = false;
    l.words.push_back(std::move(l.cur));
    l.cur = Word{};
    l.in_word = false;
  };
  // `pipe`: the command is followed by a single `|` (its output is the next one's input).
  auto end_command = [&](bool pipe = false) {
    end_word();
    Level& l = level();
    const std::size_t carried = judge(std::move(l.words), l.piped_in);
    l.words.clear();
    l.piped_in = pipe ? carried : std::string_view::npos;
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
        } else if (c == '$' && tmpl.substr(i, 3) == "$((") {
          add_expansion();  // arithmetic in quotes: no placeholder can be in it (inside quotes)
          const std::size_t close = arithmetic_end(i);
          i = close == std::string_view::npos ? tmpl.size() : close;
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
        } else if (c == '$' && tmpl.substr(i, 3) == "$((") {
          // Arithmetic: read to its "))" (<< in it is a shift, not a here-document); a value inside
          // would be evaluated.
          add_expansion();
          if (const std::size_t close = arithmetic_end(i); close == std::string_view::npos) {
            i = tmpl.size();
          } else {
            if (const std::size_t k = first_placeholder(i + 3, close); k != std::string_view::npos) {
              refuse(k, "is inside $((...))", ": the shell would evaluate the value there. Pass it as an argument");
              return found;
            }
            i = close + 1;
          }
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
          const bool pipe = c == '|' && (i + 1 >= tmpl.size() || tmpl[i + 1] != '|') && (i == 0 || tmpl[i - 1] != '|');
          end_command(pipe);
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
