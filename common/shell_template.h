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

// The index of the script an interpreter or shell runs in the words of a command (`python3 -u
// train.py --lr 0.1`: 2), after its options as reader_of() knows them; nullopt when the program is
// not one that runs a script file (awk's first word is its code) or runs code given by an option
// (-c, -m, -e, ...). Scanner::judge_interpreter walks the same options where placeholders stand.
inline std::optional<std::size_t> script_index(const std::vector<std::string>& words) {
  if (words.empty()) return std::nullopt;
  const std::string& path = words[0];
  const Reader r = reader_of(std::string_view(path).substr(path.rfind('/') == std::string::npos ? 0 : path.rfind('/') + 1));
  if (r.kind != Reader::Kind::kCode || r.code_short.empty()) return std::nullopt;
  for (std::size_t k = 1; k < words.size(); ++k) {
    const std::string& w = words[k];
    if (w == "--") return k + 1 < words.size() ? std::optional<std::size_t>(k + 1) : std::nullopt;
    if (w.size() < 2 || (w[0] != '-' && !(w[0] == '+' && r.plus_options))) return k;
    if (w.rfind("--", 0) == 0) {
      const std::size_t eq = w.find('=');
      const std::string name = w.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
      if (std::find(r.code_long.begin(), r.code_long.end(), name) != r.code_long.end()) return std::nullopt;
      if (eq == std::string::npos && std::find(r.arg_long.begin(), r.arg_long.end(), name) != r.arg_long.end()) ++k;
      continue;
    }
    for (std::size_t c = 1; c < w.size(); ++c) {
      if (r.code_short.find(w[c]) != std::string_view::npos) return std::nullopt;
      if (r.arg_short.find(w[c]) != std::string_view::npos) {
        if (c + 1 == w.size()) ++k;  // its argument is the next word
        break;
      }
    }
  }
  return std::nullopt;
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

// Where the scanner stands: the template's own commands, a quoting, or an expansion inside them.
enum class Ctx { kTop, kSingle, kDouble, kBacktick, kSubst, kParam };

// A command list: the template itself, or one $( ... ) inside it.
struct Level {
  std::vector<Word> words;
  Word cur;
  bool in_word = false;
  bool redirect_next = false;
  int parens = 0;
  std::size_t piped_in = std::string_view::npos;  // a placeholder whose value this command may read
};

// A here-document whose body starts at the next line.
struct Heredoc {
  std::string end;
  bool strip_tabs = false;
};

// How to fix a placeholder in quotes or after a backslash or '$'.
inline constexpr std::string_view kFix =
    ": its value would be read by the shell again there and could run commands. Write it outside "
    "quotes (values are single-quoted for the shell automatically), e.g. --name={v} rather than "
    "\"--name={v}\", or read the parameters from $HPCTUNE_PARAMS";
// How to fix a placeholder in a command the check refuses: the list form.
inline constexpr std::string_view kList =
    ". Write the command as a list (command: [python3, train.py, --lr, \"{lr}\"]): hpctune runs it without a "
    "shell, each placeholder one argument; or read the values from $HPCTUNE_PARAMS";

// The offset of the first placeholder in `w` that is not a built-in name, or npos.
inline std::size_t user_placeholder(const Word& w) {
  return w.placeholders.empty() || w.builtin_only ? std::string_view::npos : w.placeholders.front();
}
// NAME=value before a command's program.
inline bool assignment(const Word& w) {
  const auto eq = w.text.find('=');
  if (eq == std::string::npos || eq == 0 || std::isdigit(static_cast<unsigned char>(w.text[0]))) return false;
  return std::all_of(w.text.begin(), w.text.begin() + static_cast<std::ptrdiff_t>(eq),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; });
}
// A reserved word that may stand before a command's program.
inline bool keyword(const std::string& t) {
  static const std::string_view kKeywords[] = {"if", "then", "else", "elif", "while", "until", "do", "!", "{", "}"};
  return std::find(std::begin(kKeywords), std::end(kKeywords), t) != std::end(kKeywords);
}
// The program a command word names (its base name), or "$" when an expansion or a placeholder names it.
inline std::string program_of(const Word& w) {
  const auto slash = w.text.find_last_of('/');
  std::string base = slash == std::string::npos ? w.text : w.text.substr(slash + 1);
  if (w.expansion || base.find('$') != std::string::npos || base.find('\x01') != std::string::npos) return "$";
  return base;
}

// Reads a command template once, left to right, the way /bin/sh does (template_problem runs it): a
// stack of contexts (quotes, backticks, $(...), ${...}), one Level of words per command list (the
// template, each $(...)), the here-documents whose bodies start at the next line, and the first
// placeholder refused. One method per context or construct; a Scanner runs once.
class Scanner {
 public:
  explicit Scanner(std::string_view tmpl) : tmpl_(tmpl) {}

  std::optional<TemplateProblem> run() {
    for (std::size_t i = 0; i < tmpl_.size() && !found_; ++i) step(i);
    if (found_) return found_;
    finish();
    return found_;
  }

 private:
  static constexpr std::size_t npos = std::string_view::npos;

  std::string_view tmpl_;
  std::vector<Ctx> stack_ = {Ctx::kTop};
  std::vector<Level> levels_ = std::vector<Level>(1);
  std::vector<Heredoc> pending_;           // here-documents whose bodies start at the next line
  std::optional<std::size_t> ansi_quote_;  // where a $'...' or a ' inside "${...}" was seen
  std::optional<TemplateProblem> found_;

  // --- The template's text ---

  TemplateProblem place(std::size_t at) const {
    TemplateProblem p;
    p.offset = at;
    for (std::size_t k = 0; k < at; ++k) {
      if (tmpl_[k] == '\n') ++p.line, p.column = 1;
      else ++p.column;
    }
    return p;
  }
  // The index of the placeholder's '}', or npos if `i` starts none.
  std::size_t placeholder_end(std::size_t i) const {
    if (tmpl_[i] != '{' || (i + 1 < tmpl_.size() && tmpl_[i + 1] == '{')) return npos;
    std::size_t end = i + 1;
    while (end < tmpl_.size() && name_char(tmpl_[end])) ++end;
    if (end == i + 1 || end >= tmpl_.size() || tmpl_[end] != '}') return npos;
    return end;
  }
  // The first placeholder in [from, to) (a doubled "{{" is a literal brace), or npos.
  std::size_t first_placeholder(std::size_t from, std::size_t to) const {
    for (std::size_t k = from; k < to; ++k) {
      if (tmpl_[k] == '{' && k + 1 < to && tmpl_[k + 1] == '{') {
        ++k;
        continue;
      }
      if (placeholder_end(k) != npos) return k;
    }
    return npos;
  }
  // The index of the second ')' closing the arithmetic $(( at `i` (nested parentheses counted), or npos.
  std::size_t arithmetic_end(std::size_t i) const {
    int depth = 0;
    for (std::size_t k = i + 3; k < tmpl_.size(); ++k) {
      if (tmpl_[k] == '(') ++depth;
      else if (tmpl_[k] == ')') {
        if (depth > 0) --depth;
        else if (k + 1 < tmpl_.size() && tmpl_[k + 1] == ')') return k + 1;
      }
    }
    return npos;
  }
  // A word starts here: after a blank, a line break, an operator, or at the start.
  bool word_start(std::size_t i) const {
    return i == 0 || std::string_view(" \t\n;&|()<>").find(tmpl_[i - 1]) != std::string_view::npos;
  }
  // The innermost quoting that matters, as a message's words ("" at the top).
  std::string where() const {
    for (auto it = stack_.rbegin(); it != stack_.rend(); ++it) {
      if (*it == Ctx::kSingle) return "inside single quotes";
      if (*it == Ctx::kDouble) return "inside double quotes";
      if (*it == Ctx::kBacktick) return "inside backticks";
      if (*it == Ctx::kSubst) return "inside $(...)";
      if (*it == Ctx::kParam) return "inside ${...}";
    }
    return "";
  }
  bool in_double() const { return std::find(stack_.begin(), stack_.end(), Ctx::kDouble) != stack_.end(); }

  // Records the placeholder at `at` as the problem, unless one is already found.
  void refuse(std::size_t at, const std::string& why, std::string_view fix) {
    if (found_) return;
    const std::size_t end = placeholder_end(at);
    TemplateProblem p = place(at);
    const std::string name(tmpl_.substr(at, end == npos ? 1 : end - at + 1));
    const std::size_t last = tmpl_.find_last_not_of('\n');  // a block scalar's final line break is not a line
    const bool one_line = last == npos || tmpl_.substr(0, last).find('\n') == npos;
    p.what = "the placeholder " + name +
             (one_line ? " at character " + std::to_string(at + 1)
                       : " at line " + std::to_string(p.line) + ", column " + std::to_string(p.column) + " of the command") +
             " " + why + std::string(fix);
    found_ = std::move(p);
  }

  // --- Judging a simple command ---

  // An interpreter or shell (reader_of): options without any code option (their arguments literal),
  // then the script (or awk's code) as a literal word; parameters only after it, as the script's
  // arguments. A shell also takes `-c CODE NAME` with -c alone and CODE and NAME literal.
  void judge_interpreter(const std::vector<Word>& words, std::size_t k, const std::string& program, const Reader& r,
                         std::size_t first) {
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
  }

  // Judges one simple command once its words are known: a placeholder (of a parameter; the
  // built-in names hold hpctune's own values) is allowed only as a plain argument of a literal
  // program that is known not to run its arguments as code (the allowlist below); anything else is
  // refused, pointing to the list form, which runs without a shell. `piped_in`: the offset of a
  // placeholder whose value may arrive on this command's standard input (an earlier command of the
  // pipeline printed it), npos when none. Returns the offset of a placeholder this command's output
  // may carry on into a pipe (npos when none).
  std::size_t judge(std::vector<Word> words, std::size_t piped_in) {
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
    std::size_t k = 0;
    bool assigns = false;
    while (k < words.size() && (assignment(words[k]) || keyword(words[k].text))) assigns = assigns || assignment(words[k]), ++k;
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
  }

  // --- Building words and commands ---

  Level& level() { return levels_.back(); }
  void end_word() {
    Level& l = level();
    if (!l.in_word) return;
    l.cur.redirect = l.redirect_next;
    l.redirect_next = false;
    l.words.push_back(std::move(l.cur));
    l.cur = Word{};
    l.in_word = false;
  }
  // `pipe`: the command is followed by a single `|` (its output is the next one's input).
  void end_command(bool pipe = false) {
    end_word();
    Level& l = level();
    const std::size_t carried = judge(std::move(l.words), l.piped_in);
    l.words.clear();
    l.piped_in = pipe ? carried : npos;
  }
  void add_char(char c) {
    level().cur.text += c;
    level().in_word = true;
  }
  void add_expansion() {
    level().cur.text += '$';
    level().cur.expansion = true;
    level().in_word = true;
  }
  // The end of the template ends every command still open; unread here-documents are empty.
  void finish() {
    while (levels_.size() > 1) {
      end_command();
      levels_.pop_back();
    }
    end_command();
  }

  // --- One character (or construct) at `i`, by context; `i` is left on its last character ---

  void step(std::size_t& i) {
    const Ctx ctx = stack_.back();
    if (tmpl_[i] == '{' || tmpl_[i] == '}') {
      brace(i, ctx);
      return;
    }
    switch (ctx) {
      case Ctx::kSingle:
        if (tmpl_[i] == '\'') stack_.pop_back();
        else add_char(tmpl_[i]);
        break;
      case Ctx::kDouble: double_quoted(i); break;
      case Ctx::kBacktick: backticked(i); break;
      case Ctx::kParam: parameter(i); break;
      case Ctx::kTop:
      case Ctx::kSubst: command(i, ctx); break;
    }
  }

  // A '{' or '}' in any context: a literal brace ({{, }}), the end of a ${...}, or a placeholder.
  void brace(std::size_t& i, Ctx ctx) {
    const char c = tmpl_[i];
    if (i + 1 < tmpl_.size() && tmpl_[i + 1] == c) {  // {{ and }}: a literal brace
      if (c == '}' && ctx == Ctx::kParam) stack_.pop_back();
      else if (ctx != Ctx::kBacktick && ctx != Ctx::kParam) add_char(c);
      ++i;
      return;
    }
    if (c == '}') {
      if (ctx == Ctx::kParam) stack_.pop_back();
      else if (ctx != Ctx::kBacktick) add_char(c);
      return;
    }
    const std::size_t end = placeholder_end(i);
    if (end == npos) return;  // malformed: the renderer says so
    placeholder(i, end);
  }

  // The placeholder {name} at [i, end]: refused unless it stands plainly in a word of a command,
  // which then holds it (judged with its command).
  void placeholder(std::size_t& i, std::size_t end) {
    const std::string in = where();
    if (!in.empty()) return refuse(i, "is " + in, kFix);
    const char before = i > 0 ? tmpl_[i - 1] : ' ';
    if (before == '\\') return refuse(i, "follows a backslash", kFix);
    if (before == '$') return refuse(i, "follows a '$'", kFix);
    if (ansi_quote_) {
      const bool dollar = tmpl_[*ansi_quote_] == '$';
      return refuse(i, std::string("follows ") + (dollar ? "$'...'" : "a ' inside \"${...}\"") + " at character " +
                           std::to_string(*ansi_quote_ + 1),
                    ", which shells read differently, so where its value lands cannot be judged. Write that text "
                    "another way");
    }
    Level& l = level();
    l.cur.placeholders.push_back(i);
    if (!builtin_name(tmpl_.substr(i + 1, end - i - 1))) l.cur.builtin_only = false;
    l.cur.text += '\x01';
    l.in_word = true;
    i = end;
  }

  // Inside "...".
  void double_quoted(std::size_t& i) {
    const char c = tmpl_[i];
    if (c == '\\') {
      if (i + 1 < tmpl_.size() && tmpl_[i + 1] != '{') add_char(tmpl_[++i]);
    } else if (c == '"') {
      stack_.pop_back();
    } else if (c == '`') {
      stack_.push_back(Ctx::kBacktick), add_expansion();
    } else if (c == '$' && tmpl_.substr(i, 3) == "$((") {
      add_expansion();  // arithmetic in quotes: no placeholder can be in it (inside quotes)
      const std::size_t close = arithmetic_end(i);
      i = close == npos ? tmpl_.size() : close;
    } else if (c == '$' && i + 1 < tmpl_.size() && tmpl_[i + 1] == '(') {
      add_expansion();
      stack_.push_back(Ctx::kSubst), levels_.emplace_back(), ++i;
    } else if (c == '$' && i + 2 < tmpl_.size() && tmpl_[i + 1] == '{' && tmpl_[i + 2] == '{') {
      stack_.push_back(Ctx::kParam), add_expansion(), i += 2;
    } else if (c == '$') {
      add_expansion();
    } else {
      add_char(c);
    }
  }

  // Inside `...`: skipped to its end (a placeholder in it is refused by brace()).
  void backticked(std::size_t& i) {
    const char c = tmpl_[i];
    if (c == '\\' && i + 1 < tmpl_.size() && tmpl_[i + 1] != '{') ++i;
    else if (c == '`') stack_.pop_back();
  }

  // Inside ${...}: its quotes nest; in "...", sh and bash differ on single quotes.
  void parameter(std::size_t& i) {
    const char c = tmpl_[i];
    if (c == '\\') {
      if (i + 1 < tmpl_.size() && tmpl_[i + 1] != '{') ++i;
    }
    else if (c == '\'' && in_double() && !ansi_quote_) ansi_quote_ = i;
    else if (c == '\'' && !in_double()) stack_.push_back(Ctx::kSingle);
    else if (c == '"') stack_.push_back(Ctx::kDouble);
    else if (c == '`') stack_.push_back(Ctx::kBacktick);
    else if (c == '$' && i + 1 < tmpl_.size() && tmpl_[i + 1] == '(') stack_.push_back(Ctx::kSubst), levels_.emplace_back(), ++i;
    else if (c == '$' && i + 2 < tmpl_.size() && tmpl_[i + 1] == '{' && tmpl_[i + 2] == '{') stack_.push_back(Ctx::kParam), i += 2;
  }

  // In the commands of the template or of a $(...) (`ctx`): words, operators, quotes, expansions.
  void command(std::size_t& i, Ctx ctx) {
    const char c = tmpl_[i];
    Level& l = level();
    if (c == '\\') {
      // An escaped placeholder brace is judged above; a line continuation joins the word.
      if (i + 1 < tmpl_.size() && tmpl_[i + 1] != '{') {
        if (tmpl_[i + 1] != '\n') add_char(tmpl_[i + 1]);
        ++i;
      }
    } else if (c == '\'') {
      stack_.push_back(Ctx::kSingle), l.in_word = true;
    } else if (c == '"') {
      stack_.push_back(Ctx::kDouble), l.in_word = true;
    } else if (c == '`') {
      stack_.push_back(Ctx::kBacktick), add_expansion();
    } else if (c == '$') {
      dollar(i);
    } else if (c == '#' && !l.in_word && word_start(i)) {
      comment(i);
    } else if (c == '<' && i + 1 < tmpl_.size() && tmpl_[i + 1] == '<' && (i + 2 >= tmpl_.size() || tmpl_[i + 2] != '<')) {
      heredoc(i);
    } else if (c == '<' || c == '>') {
      redirection(i);
    } else if (blank(c)) {
      end_word();
    } else if (c == '\n' || c == ';' || c == '&' || c == '|') {
      const bool pipe = c == '|' && (i + 1 >= tmpl_.size() || tmpl_[i + 1] != '|') && (i == 0 || tmpl_[i - 1] != '|');
      end_command(pipe);
      if (c == '\n' && !pending_.empty()) i = read_heredocs(i + 1) - 1;
    } else if (c == '(') {
      end_command();
      if (ctx == Ctx::kSubst) ++l.parens;
    } else if (c == ')') {
      end_command();
      if (ctx == Ctx::kSubst) {
        if (l.parens == 0) {
          levels_.pop_back();
          stack_.pop_back();
        } else {
          --l.parens;
        }
      }
    } else {
      add_char(c);
    }
  }

  // A '$' in a command: $'...', $((...)), $(...), ${...} or a plain expansion.
  void dollar(std::size_t& i) {
    if (i + 1 < tmpl_.size() && tmpl_[i + 1] == '\'') {
      if (!ansi_quote_) ansi_quote_ = i;
      add_expansion();
    } else if (tmpl_.substr(i, 3) == "$((") {
      // Arithmetic: read to its "))" (<< in it is a shift, not a here-document); a value inside
      // would be evaluated.
      add_expansion();
      if (const std::size_t close = arithmetic_end(i); close == npos) {
        i = tmpl_.size();
      } else {
        if (const std::size_t k = first_placeholder(i + 3, close); k != npos)
          return refuse(k, "is inside $((...))", ": the shell would evaluate the value there. Pass it as an argument");
        i = close + 1;
      }
    } else if (i + 1 < tmpl_.size() && tmpl_[i + 1] == '(') {
      add_expansion();
      stack_.push_back(Ctx::kSubst), levels_.emplace_back(), ++i;
    } else if (i + 2 < tmpl_.size() && tmpl_[i + 1] == '{' && tmpl_[i + 2] == '{') {
      stack_.push_back(Ctx::kParam), add_expansion(), i += 2;
    } else {
      add_expansion();
    }
  }

  // A comment, to the end of the line: quotes in it are plain text. `i` is left before the line
  // break, which ends the command.
  void comment(std::size_t& i) {
    std::size_t eol = tmpl_.find('\n', i);
    if (eol == npos) eol = tmpl_.size();
    if (const std::size_t k = first_placeholder(i + 1, eol); k != npos)
      return refuse(k, "is inside a comment",
                    ": a value holding a line break would end the comment and run the rest as commands. Remove "
                    "the placeholder from the comment");
    i = eol - 1;
  }

  // A here-document: <<END or <<-END, the end word possibly quoted; its body is read at the next
  // line break (read_heredocs).
  void heredoc(std::size_t& i) {
    end_word();
    std::size_t k = i + 2;
    Heredoc h;
    if (k < tmpl_.size() && tmpl_[k] == '-') h.strip_tabs = true, ++k;
    while (k < tmpl_.size() && blank(tmpl_[k])) ++k;
    for (; k < tmpl_.size() && std::string_view(" \t\n;&|<>()").find(tmpl_[k]) == std::string_view::npos; ++k) {
      const char d = tmpl_[k];
      if (d == '{' || d == '}') {
        if (placeholder_end(k) != npos)
          return refuse(k, "is a here-document's end word",
                        ": the value would decide where the document ends. Write the end word in the template");
        if (k + 1 < tmpl_.size() && tmpl_[k + 1] == d) ++k;
        h.end += d;
      } else if (d == '\'' || d == '"') {
        const std::size_t close = tmpl_.find(d, k + 1);
        if (close == npos) break;
        h.end += std::string(tmpl_.substr(k + 1, close - k - 1));
        k = close;
      } else if (d == '\\') {
        if (k + 1 < tmpl_.size()) h.end += tmpl_[++k];
      } else {
        h.end += d;
      }
    }
    pending_.push_back(std::move(h));
    i = k - 1;
  }

  // Reads the bodies of the pending here-documents from `i` (the start of a line); returns where
  // the next line after them starts.
  std::size_t read_heredocs(std::size_t i) {
    for (const Heredoc& h : pending_) {
      while (i < tmpl_.size()) {
        std::size_t eol = tmpl_.find('\n', i);
        if (eol == npos) eol = tmpl_.size();
        std::string_view line = tmpl_.substr(i, eol - i);
        if (h.strip_tabs) while (!line.empty() && line.front() == '\t') line.remove_prefix(1);
        // Literal braces in the end word are doubled in the template.
        std::string shown;
        for (std::size_t k = 0; k < line.size(); ++k) {
          shown += line[k];
          if ((line[k] == '{' || line[k] == '}') && k + 1 < line.size() && line[k + 1] == line[k]) ++k;
        }
        if (shown == h.end) {
          i = eol + (eol < tmpl_.size() ? 1 : 0);
          break;
        }
        if (const std::size_t k = first_placeholder(i, eol); k != npos) {
          refuse(k, "is inside a here-document",
                 ": the shell expands $(...) there, and a value holding the end word would end it early and run "
                 "the rest as commands. Pass the value as an argument, or read it from $HPCTUNE_PARAMS");
          return tmpl_.size();
        }
        i = eol + (eol < tmpl_.size() ? 1 : 0);
        if (eol == tmpl_.size()) break;
      }
    }
    pending_.clear();
    return i;
  }

  // A redirection operator (<, >, >>, 2>&1, ...): an io number before it (2>) is not a word of the
  // command; the next word is the redirection's target.
  void redirection(std::size_t& i) {
    Level& l = level();
    if (l.in_word && !l.cur.text.empty() &&
        std::all_of(l.cur.text.begin(), l.cur.text.end(), [](char d) { return std::isdigit(static_cast<unsigned char>(d)); }))
      l.cur = Word{}, l.in_word = false;
    end_word();
    while (i + 1 < tmpl_.size() && std::string_view("<>&|").find(tmpl_[i + 1]) != std::string_view::npos) ++i;
    l.redirect_next = true;
  }
};

}  // namespace shell_template_detail

// nullopt when every placeholder of `tmpl` stands where /bin/sh reads its value once, as an
// argument; otherwise the first one that does not, with how to fix it. Malformed placeholders are
// not judged here (the renderer names them).
inline std::optional<TemplateProblem> template_problem(std::string_view tmpl) {
  return shell_template_detail::Scanner(tmpl).run();
}

// The message of template_problem(tmpl), or nullopt.
inline std::optional<std::string> unsafe_placeholder(std::string_view tmpl) {
  auto p = template_problem(tmpl);
  if (!p) return std::nullopt;
  return p->what;
}

}  // namespace hpctune
