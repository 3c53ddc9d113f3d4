// Issue 21, finding 7: the command template's check (common/shell_template.h) against the ways
// around it that were found: an apostrophe in a comment that flipped its idea of quoting, a
// placeholder in a comment or a here-document, and commands that read their arguments as code
// again (eval, sh -c, source, ...). Each bypass is refused by the trainer and by `hpctune validate`
// with its place, and none of the 7 payloads runs; legitimate templates still run, hostile values
// arriving as one argument.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/shell_template.h"
#include "launch/child_process.h"
#include "tests/campaign_fixture.h"
#include "trainers/command_trainer.h"

using namespace hpctune;
using namespace hpctune::testing;
using json = nlohmann::json;

namespace {

// The 7 payloads of the report: ;, $(), backticks, |, &&, > and a line break. Each creates `marker`.
std::vector<std::string> payloads(const std::string& marker) {
  return {"x; touch " + marker,       "$(touch " + marker + ")", "`touch " + marker + "`", "x | touch " + marker,
          ": && touch " + marker,     "x > " + marker,            "x\ntouch " + marker};
}

// Templates the old check accepted (or that read a value as code), with where the check now says
// the placeholder stands: line, column, and a phrase of the reason.
struct Bypass {
  const char* tmpl;
  int line, column;
  const char* why;
};
const Bypass kBypasses[] = {
    {"# don't worry\necho '{v}'", 2, 7, "inside single quotes"},
    {"echo ok # it's fine\necho '{v}' > /dev/null", 2, 7, "inside single quotes"},
    {"# {v}\necho ok", 1, 3, "inside a comment"},
    {"cat <<EOF\n{v}\nEOF", 2, 1, "inside a here-document"},
    {"cat <<'EOF' > /dev/null\nit's {v}\nEOF", 2, 6, "inside a here-document"},
    {"eval echo {v}", 1, 11, "is an argument of eval"},
    {"sh -c {v}", 1, 7, "follows sh -c without a literal code word"},
    {"bash -c {v}", 1, 9, "follows bash -c without a literal code word"},
    {"env A=1 sh -ec {v}", 1, 16, "is an argument of env"},
    {"exec sh -c {v}", 1, 12, "is an argument of exec"},
    {"echo > /dev/null; source {v}", 1, 26, "is an argument of source"},
    {". {v}", 1, 3, "is an argument of ."},
    {"xargs sh -c {v} < /dev/null", 1, 13, "is an argument of xargs"},
    {"su -c {v}", 1, 7, "is an argument of su"},
    {"ssh localhost {v}", 1, 15, "is an argument of ssh"},
    {"python3 -c {v}", 1, 12, "runs code given with -c"},
    {"{v} --version", 1, 1, "is the program word"},
    {"echo \"\\{v}\"", 1, 8, "inside double quotes"},  // the backslash hid the placeholder from the old check
};

trainers::TrialContext context(const std::string& command, const std::string& value, const std::string& trial_dir) {
  trainers::TrialContext ctx;
  ctx.trial_id = 1;
  ctx.attempt = 1;
  ctx.trainer = {{"kind", "command"}, {"command", command}, {"timeout", 20}};
  ctx.params = {{"v", value}};
  ctx.trial_dir = trial_dir;
  return ctx;
}

// The template's config for `hpctune validate`: the command as a YAML block at line 8.
std::string config_with(const std::string& command, const std::vector<std::string>& values) {
  json list = values;
  std::string text = "name: t\nobjective: {metric: v, mode: max}\nsearch: {max_trials: 1}\nspace:\n  v: {type: choice, values: " +
                     list.dump() + "}\ntrainer:\n  kind: command\n  command: |-\n";
  std::string line;
  for (char c : command) {
    if (c == '\n') text += "    " + line + "\n", line.clear();
    else line += c;
  }
  return text + "    " + line + "\n";
}

}  // namespace

TEST_CASE("template bypasses: each is refused with its line and column in the command") {
  for (const auto& b : kBypasses) {
    CAPTURE(b.tmpl);
    auto p = template_problem(b.tmpl);
    REQUIRE(p.has_value());
    CHECK(p->line == b.line);
    CHECK(p->column == b.column);
    CHECK(std::string(b.tmpl).substr(p->offset, 3) == "{v}");
    CHECK_MESSAGE(p->what.find(b.why) != std::string::npos, p->what);
    const bool one_line = std::string(b.tmpl).find('\n') == std::string::npos;
    const std::string at = one_line ? "at character " + std::to_string(b.column)
                                    : "at line " + std::to_string(b.line) + ", column " + std::to_string(b.column);
    CHECK_MESSAGE(p->what.find("the placeholder {v} " + at) != std::string::npos, p->what);
  }
}

TEST_CASE("template bypasses: run for real, none of the 7 payloads executes") {
  TempDir dir;
  // The payloads are live: with the check skipped (the template rendered and given to /bin/sh as
  // the trainer would), the first bypass runs every one of them.
  {
    int ran = 0;
    int k = 0;
    for (const auto& v : payloads(dir.file("control"))) {
      const std::string marker = dir.file("control");
      std::filesystem::remove(marker);
      auto cmd = trainers::render_command(kBypasses[0].tmpl, {{"v", v}});
      REQUIRE(cmd.ok());
      launch::SpawnOptions o;
      o.argv = {"/bin/sh", "-c", *cmd};
      o.stdout_path = dir.file("control-" + std::to_string(k++) + ".log");
      o.stderr_path = "=stdout";
      auto child = launch::ChildProcess::spawn(o);
      REQUIRE(child.ok());
      REQUIRE(child->wait_for(std::chrono::seconds(20)).has_value());
      ran += std::filesystem::exists(marker) ? 1 : 0;
    }
    CHECK(ran == 7);
  }
  // Through the command trainer: refused before anything runs.
  int n = 0;
  for (const auto& b : kBypasses) {
    const std::string marker = dir.file("pwned-" + std::to_string(n++));
    for (const auto& v : payloads(marker)) {
      CAPTURE(b.tmpl);
      CAPTURE(v);
      auto r = trainers::CommandTrainer().run(context(b.tmpl, v, dir.file("trial")));
      REQUIRE_FALSE(r.ok());
      CHECK(r.error().code() == Errc::kInvalidArgument);
      CHECK(r.error().message().find("the placeholder {v}") != std::string::npos);
      CHECK_FALSE(std::filesystem::exists(marker));
    }
  }
}

TEST_CASE("legitimate templates: comments and here-documents without placeholders, prog {v}, --x={v} run with hostile values") {
  TempDir dir;
  const std::string out = dir.file("arg");
  struct Legit {
    std::string tmpl;
    std::string prefix;  // what the program prints before the value
  };
  const std::vector<Legit> legit = {
      {"# a comment, it's fine; no placeholder here\nprintf '%s' {v} > " + out, ""},
      {"cat <<'EOF' > /dev/null\nit's $(not run) here\nEOF\nprintf '%s' {v} > " + out, ""},
      {"cat <<EOF > /dev/null\nhello it's\nEOF\nprintf '%s' --x={v} > " + out, "--x="},
      {"printf '%s' {v} > " + out + " # it's", ""},
      {"sh -c 'printf \"%s\" \"$1\"' sh {v} > " + out, ""},
      {"printf '%s' {v} | cat > " + out, ""},
      {"printf '%s' --lr={v} | tee " + out + " > /dev/null", "--lr="},
  };
  int n = 0;
  for (const auto& l : legit) {
    CAPTURE(l.tmpl);
    REQUIRE_FALSE(template_problem(l.tmpl).has_value());
    const std::string marker = dir.file("pwned-" + std::to_string(n++));
    for (const auto& v : payloads(marker)) {
      CAPTURE(v);
      std::filesystem::remove(out);
      auto r = trainers::CommandTrainer().run(context(l.tmpl, v, dir.file("trial")));
      REQUIRE_MESSAGE(r.ok(), r.error().to_string());
      CHECK_FALSE(std::filesystem::exists(marker));
      CHECK(read_file(out) == l.prefix + v);  // the value arrives as it is, one argument
    }
  }
}

TEST_CASE("campaign: hpctune validate and run refuse each bypass with file:line:column and key path") {
  TempDir dir;
  int n = 0;
  for (const auto& b : kBypasses) {
    CAPTURE(b.tmpl);
    const std::string marker = dir.file("pwned-" + std::to_string(n));
    const std::string cfg = dir.write("bypass-" + std::to_string(n++) + ".yaml", config_with(b.tmpl, payloads(marker)));
    auto status = run_hpctune({"validate", cfg}, dir.file("validate.log"), std::chrono::seconds(30));
    const std::string log = read_file(dir.file("validate.log"));
    CHECK(status.code == 2);
    const bool one_line = std::string(b.tmpl).find('\n') == std::string::npos;
    const std::string at = one_line ? "at character " + std::to_string(b.column)
                                    : "at line " + std::to_string(b.line) + ", column " + std::to_string(b.column);
    CHECK_MESSAGE(log.find(cfg + ":8:3: trainer.command: the placeholder {v} " + at) != std::string::npos, log);
    CHECK_MESSAGE(log.find(b.why) != std::string::npos, log);
    CHECK(log.find("internal error") == std::string::npos);
  }
  // `run` refuses before any trial starts: no payload runs.
  const std::string marker = dir.file("pwned-run");
  const std::string cfg = dir.write("run.yaml", config_with(kBypasses[0].tmpl, payloads(marker)));
  auto run = run_hpctune({"run", cfg, "--db", dir.file("r.db")}, dir.file("run.log"), std::chrono::seconds(60));
  CHECK(run.code == 2);
  CHECK(read_file(dir.file("run.log")).find(cfg + ":8:3: trainer.command: the placeholder {v} at line 2, column 7") !=
        std::string::npos);
  CHECK_FALSE(std::filesystem::exists(marker));
}

// Issue 35, R1: 28 templates that passed the old check and ran a hostile value as code under dash,
// and the piped forms that were a known limit. Each is refused now (the string form allows a
// placeholder only as a plain argument of a program known not to run its arguments), with the list
// form in the message.
TEST_CASE("R1: the 28 templates of the second attack and the piped forms are refused, pointing to the list form") {
  const char* const kForms[] = {
      "env -S 'sh -c' {v}", "sh -ce {v}", "sh -ec 'true' {v} x", "sh -c -- {v}", "perl -e1 -e {v}", "node -e 1 -e {v}",
      "python3 -m timeit {v}", "BASH_ENV={v} sh x.sh", "PERL5OPT={v} perl x.pl", "PATH={v} python3 t.py",
      "BASH_ENV=/tmp/x sh t.sh {v}", "f() { eval \"$1\"; }; f {v}", "alias a=eval; a {v}", "SH=sh; nice $SH -c {v}",
      "env {v}", "timeout 5 {v}", "find . -exec {v} ;", "sh < {v}", "aprun python3 t.py {v}", "ibrun {v}",
      "conda run python {v}", "sed s/x/y/e {v}", "nice -n 5 python3 -c {v}", "xargs {v}", "exec {v}",
      "command eval {v}", "$PY -c {v}", "env python3 -c {v}",
      // piped into an interpreter: the value is data the next command may run
      "echo {v} | sh", "printf '%s' {v} | python3", "echo {v} | cat | bash", "echo {v} > /dev/null; echo x | sh; echo {v} | sh",
      // arithmetic: $((1<<2)) is a shift, not a here-document; a value inside is evaluated
      "echo $((1<<{v}))",
  };
  for (const char* form : kForms) {
    CAPTURE(form);
    auto p = template_problem(form);
    REQUIRE(p.has_value());
    CHECK(p->what.find("{v}") != std::string::npos);
  }
  // The ones reached by the allowlist (not by a quote or a comment) say to use the list form.
  CHECK(template_problem("aprun python3 t.py {v}")->what.find("command as a list") != std::string::npos);
  // Forms that stay allowed: a script's arguments, a program of yours by its path, printing.
  for (const char* ok : {"python3 train.py --lr {v}", "/usr/bin/python3 -u train.py --lr={v}", "./train --lr {v}",
                         "Rscript fit.R {v}", "bash script.sh {v}", "sh -c 'prog \"$1\"' sh {v}",
                         "echo $((1<<2)) {v}", "python3 t.py {v} | tee log", "cd {trial_dir} && python3 t.py {v}"}) {
    CAPTURE(ok);
    CHECK_FALSE(template_problem(ok).has_value());
  }
}

TEST_CASE("R1: the list form runs without a shell: every hostile value is one inert argument") {
  TempDir dir;
  const std::string out = dir.file("arg");
  const std::string marker = dir.file("pwned");
  // The program gets the value as its $1 and writes it; no shell ever reads the value.
  for (const auto& v : payloads(marker)) {
    CAPTURE(v);
    std::filesystem::remove(out);
    trainers::TrialContext ctx = context("", v, dir.file("trial"));
    ctx.trainer["command"] = json::array({"/bin/sh", "-c", "printf '%s' \"$1\" > \"$2\"", "sh", "{v}", out});
    auto r = trainers::CommandTrainer().run(ctx);
    REQUIRE_MESSAGE(r.ok(), r.error().to_string());
    CHECK_FALSE(std::filesystem::exists(marker));
    CHECK(read_file(out) == v);
  }
  // A value inside an item stays inside that one argument: --v=<value>.
  trainers::TrialContext ctx = context("", "a b; touch " + marker, dir.file("trial2"));
  ctx.trainer["command"] = json::array({"/bin/sh", "-c", "printf '%s' \"$1\" > \"$2\"", "sh", "--v={v}", out});
  auto r = trainers::CommandTrainer().run(ctx);
  REQUIRE_MESSAGE(r.ok(), r.error().to_string());
  CHECK(read_file(out) == "--v=a b; touch " + marker);
  CHECK_FALSE(std::filesystem::exists(marker));
}

TEST_CASE("R1: hpctune validate takes the list form and names a bad item by its index") {
  TempDir dir;
  auto validate = [&](const std::string& command, const std::string& name) {
    const std::string cfg = dir.write(name + ".yaml",
                                      "name: t\nobjective: {metric: v, mode: max}\nsearch: {max_trials: 1}\n"
                                      "space:\n  lr: {type: float, low: 0.1, high: 0.2}\n"
                                      "trainer:\n  kind: command\n  command: " + command + "\n");
    auto st = run_hpctune({"validate", cfg}, dir.file(name + ".log"), std::chrono::seconds(30));
    return std::pair{st.code, read_file(dir.file(name + ".log"))};
  };
  auto [ok, ok_log] = validate("[python3, train.py, --lr, \"{lr}\", --epochs, 2]", "ok");
  CHECK_MESSAGE(ok == 0, ok_log);
  auto [unknown, unknown_log] = validate("[python3, train.py, \"{lrr}\"]", "unknown");
  CHECK(unknown == 2);
  CHECK_MESSAGE(unknown_log.find("trainer.command[2]: '{lrr}' names no parameter of the space; did you mean '{lr}'?") !=
                    std::string::npos,
                unknown_log);
  auto [empty, empty_log] = validate("[]", "empty");
  CHECK(empty == 2);
  auto [nested, nested_log] = validate("[python3, [a, b]]", "nested");
  CHECK(nested == 2);
  CHECK_MESSAGE(nested_log.find("trainer.command[1]") != std::string::npos, nested_log);
}
