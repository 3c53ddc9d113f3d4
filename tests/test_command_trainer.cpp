// The `command` trainer: its template, report lines and settings; runs of real programs through
// the trainer (environment, reports, garbage, exit codes, timeout, stop with SIGTERM then SIGKILL,
// no orphans, mpirun with 2 ranks); and campaigns through the `hpctune run` binary (ASHA pruning a
// script that reports every epoch, exit 3, a hang past the timeout, garbage report lines).
#include <doctest/doctest.h>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "common/shell_template.h"
#include "tests/campaign_fixture.h"
#include "trainers/command_trainer.h"

using namespace hpctune;
using namespace hpctune::launch;
using namespace hpctune::testing;
using trainers::CommandTrainer;
using trainers::TrialContext;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kSource = HPCTUNE_SOURCE_DIR;
const std::string kScripts = kSource + "/tests/scripts";
const std::string kPythonPath = kSource + "/tools/python";
const std::string kPython = "/usr/bin/python3";

struct Recorded {
  std::mutex mu;
  std::vector<std::pair<int64_t, protocol::Metrics>> reports;
  size_t size() {
    std::lock_guard lock(mu);
    return reports.size();
  }
};

TrialContext context(const json& trainer, const json& params, const std::string& trial_dir, Recorded& rec) {
  TrialContext ctx;
  ctx.trial_id = 17;
  ctx.attempt = 2;
  ctx.seed = 99;
  ctx.trainer = trainer;
  ctx.trainer["kind"] = "command";
  ctx.params = params;
  ctx.trial_dir = trial_dir;
  ctx.report = [&rec](int64_t step, const protocol::Metrics& m) {
    std::lock_guard lock(rec.mu);
    rec.reports.emplace_back(step, m);
  };
  return ctx;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// True when `pid` is gone or a zombie (an orphan reparented to a pid 1 that does not reap).
bool dead(pid_t pid) {
  std::ifstream st("/proc/" + std::to_string(pid) + "/stat");
  if (!st) return true;
  std::string stat((std::istreambuf_iterator<char>(st)), {});
  const auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z';
}

int count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (auto p = text.find(needle); p != std::string::npos; p = text.find(needle, p + needle.size())) ++n;
  return n;
}

}  // namespace

// --- pure functions --------------------------------------------------------------------------------

TEST_CASE("the template substitutes parameters, shell-quoted, with {{ }} as literal braces") {
  const json values = {{"lr", 0.1},  {"layers", json::array({64, 128})}, {"name", "it's mine"},
                       {"n", 3},     {"flag", true},                      {"opt", "adam"},
                       {"big", 1e-05}, {"obj", {{"a", 1}}}};
  auto r = trainers::render_command("train --lr {lr} --layers {layers} --name {name} -n {n} {flag} {opt} {big}", values);
  REQUIRE(r.ok());
  CHECK(r.value() == "train --lr 0.1 --layers '[64,128]' --name 'it'\\''s mine' -n 3 true adam 1e-05");
  auto obj = trainers::render_command("x {obj}", values);
  REQUIRE(obj.ok());
  CHECK(obj.value() == "x '{\"a\":1}'");
  auto braces = trainers::render_command("awk '{{print $1}}' {opt}}}", values);
  REQUIRE(braces.ok());
  CHECK(braces.value() == "awk '{print $1}' adam}");

  auto unknown = trainers::render_command("train --lr {lr} --wd {weight_decay}", values);
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.error().code() == Errc::kInvalidArgument);
  CHECK(unknown.error().message().find("'{weight_decay}'") != std::string::npos);  // the message is the feature
  CHECK(unknown.error().message().find("lr") != std::string::npos);                // and lists the known names
  for (const char* bad : {"awk '{print $1}'", "x {", "x {}", "x {lr", "x {a b}"}) {
    CAPTURE(bad);
    auto m = trainers::render_command(bad, values);
    REQUIRE_FALSE(m.ok());
    CHECK(m.error().code() == Errc::kInvalidArgument);
  }

  CHECK(trainers::shell_quote("abc-1.5e+3,x:/y=z@%") == "abc-1.5e+3,x:/y=z@%");
  CHECK(trainers::shell_quote("") == "''");
  CHECK(trainers::shell_quote("a b") == "'a b'");
  CHECK(trainers::shell_quote("$(rm -rf /)") == "'$(rm -rf /)'");
  CHECK(trainers::template_text(json("s p")) == "s p");
  CHECK(trainers::template_text(json(256.0)) == "256.0");

  CHECK(trainers::exec_prefixed("python3 train.py --lr 0.1") == "exec python3 train.py --lr 0.1");
  CHECK(trainers::exec_prefixed("cd /tmp && python3 x.py") == "cd /tmp && python3 x.py");
  CHECK(trainers::exec_prefixed("A=1 python3 x.py") == "A=1 python3 x.py");
  CHECK(trainers::exec_prefixed("echo $HOME") == "echo $HOME");
  CHECK(trainers::exec_prefixed("python3 x.py | tee log") == "python3 x.py | tee log");
}

TEST_CASE("a placeholder inside double quotes, backticks or $(...) is refused: the shell would read its value again") {
  for (const char* bad : {"echo \"name={v}\"", "echo `echo {v}`", "echo $(echo {v})", "echo \"$(echo {v})\"",
                          "sh -c \"train --lr {v}\"", "echo \\{v}", "echo 'name={v}'", "echo ${v}", "echo \"a\" \"b {v} c\""}) {
    CAPTURE(bad);
    auto why = unsafe_placeholder(bad);
    REQUIRE(why.has_value());
    CHECK(why->find("{v}") != std::string::npos);
    CHECK(why->find("outside quotes") != std::string::npos);  // and says how to fix it
    auto s = trainers::parse_command_settings({{"command", bad}});
    REQUIRE_FALSE(s.ok());
    CHECK(s.error().code() == Errc::kInvalidArgument);
  }
  CHECK_FALSE(unsafe_placeholder("echo \"name=\"{v}").has_value());  // after the closing quote: unquoted
  for (const char* ok : {"echo name={v}", "echo 'name='{v}", "echo \"a\\\"\" {v}",
                         "echo \"$(date)\" {v} `date` {w}", "awk '{{print $1}}' {v}", "echo \\\" {v}",
                         "echo \"{{v}}\"", "echo x={v}"}) {
    CAPTURE(ok);
    CHECK_FALSE(unsafe_placeholder(ok).has_value());
  }
}

TEST_CASE("a hostile parameter value in an allowed template never runs") {
  TempDir dir;
  const std::string marker = dir.path + "/pwned";
  const std::vector<std::string> values = {"$(touch " + marker + ")", "'; touch " + marker + "; '", "`touch " + marker + "`",
                                           "\"; touch " + marker + "; \"", "x\\'; touch " + marker + " #"};
  for (const std::string tmpl : {"echo name={v} > /dev/null", "echo 'name='{v} > /dev/null",
                                 "echo name={v}{v} > /dev/null", "echo \"a\"{v}'b' > /dev/null"}) {
    for (const auto& v : values) {
      CAPTURE(tmpl);
      CAPTURE(v);
      Recorded rec;
      auto r = CommandTrainer().run(context({{"command", tmpl}}, {{"v", v}}, dir.path + "/trial", rec));
      REQUIRE_MESSAGE(r.ok(), r.error().to_string());
      CHECK_FALSE(std::filesystem::exists(marker));
    }
  }
  // The value arrives as it is, one argument.
  Recorded rec;
  const std::string hostile = "a b'\"$(x)`y`";
  auto r = CommandTrainer().run(context(
      {{"command", "test {v} = \"$EXPECTED\" && echo 'hpctune-report {{\"ok\": 1}}'"}, {"env", {{"EXPECTED", hostile}}}},
      {{"v", hostile}}, dir.path + "/trial2", rec));
  REQUIRE_MESSAGE(r.ok(), r.error().to_string());
  CHECK(rec.size() == 1);
}

TEST_CASE("report lines: steps, numeric metrics, and what is garbage") {
  auto ok = trainers::parse_report_line(R"(hpctune-report {"step": 3, "val_accuracy": 0.91, "loss": 2})");
  REQUIRE(ok.has_value());
  REQUIRE(ok->ok());
  CHECK(ok->value().step == 3);
  CHECK(ok->value().metrics == protocol::Metrics{{"val_accuracy", 0.91}, {"loss", 2.0}});
  auto no_step = trainers::parse_report_line("hpctune-report\t{\"acc\": 1e-3}");
  REQUIRE((no_step && no_step->ok()));
  CHECK_FALSE(no_step->value().step.has_value());
  auto float_step = trainers::parse_report_line(R"(hpctune-report {"step": 4.0, "a": 1})");
  REQUIRE((float_step && float_step->ok()));
  CHECK(float_step->value().step == 4);

  // After other output on the same line: a progress bar redrawn with '\r' and left without a line
  // end (tqdm), after a carriage return, indented, a "\r\n" line end; the last prefix starts it.
  for (const char* shown : {"40%|####  \r80%|########hpctune-report {\"step\": 2, \"acc\": 0.5}",
                            "\r80%|########\rhpctune-report {\"step\": 2, \"acc\": 0.5}",
                            "  hpctune-report {\"step\": 2, \"acc\": 0.5}\r", "0: hpctune-report {\"step\": 2, \"acc\": 0.5}",
                            "hpctune-report {\"a\": 1} hpctune-report {\"step\": 2, \"acc\": 0.5}"}) {
    CAPTURE(shown);
    auto r = trainers::parse_report_line(shown);
    REQUIRE((r && r->ok()));
    CHECK(r->value().step == 2);
    CHECK(r->value().metrics == protocol::Metrics{{"acc", 0.5}});
  }
  // Python's json.dumps of a diverged loss: NaN and +-Infinity, outside strings only.
  auto diverged = trainers::parse_report_line(R"(hpctune-report {"step": 3, "val_loss": NaN, "val_accuracy": 0.1, "x": Infinity, "y": -Infinity})");
  REQUIRE((diverged && diverged->ok()));
  CHECK(diverged->value().step == 3);
  CHECK(std::isnan(diverged->value().metrics.at("val_loss")));
  CHECK(diverged->value().metrics.at("val_accuracy") == 0.1);
  CHECK(diverged->value().metrics.at("x") == std::numeric_limits<double>::infinity());
  CHECK(diverged->value().metrics.at("y") == -std::numeric_limits<double>::infinity());
  for (const char* still_bad : {R"(hpctune-report {"a": "NaN"})", R"(hpctune-report {"NaN": x})", R"(hpctune-report {"a": NaNx})"}) {
    CAPTURE(still_bad);
    auto r = trainers::parse_report_line(still_bad);
    REQUIRE(r.has_value());
    CHECK_FALSE(r->ok());
  }
  for (const char* not_report : {"epoch 3", "hpctune-reports {\"a\": 1}", "epoch 3 hpctune-reportX {\"a\": 1}", "", "\r\r"}) {
    CAPTURE(not_report);
    CHECK_FALSE(trainers::parse_report_line(not_report).has_value());
  }
  for (const char* garbage :
       {"hpctune-report {bad", "hpctune-report {\"a\": 1}\r50%|#####", "hpctune-report [1]", "hpctune-report 42", R"(hpctune-report {"a": "x"})",
        R"(hpctune-report {"a": true})", R"(hpctune-report {"a": null})", R"(hpctune-report {"step": 1})",
        R"(hpctune-report {"step": -1, "a": 1})", R"(hpctune-report {"step": 1.5, "a": 1})",
        R"(hpctune-report {"step": "1", "a": 1})", "hpctune-report", "hpctune-report   ",
        R"(hpctune-report {"step": 18446744073709551615, "a": 1})",  // the protocol refuses steps >= 2^53
        R"(hpctune-report {"step": 9007199254740993, "a": 1})"}) {
    CAPTURE(garbage);
    auto r = trainers::parse_report_line(garbage);
    REQUIRE(r.has_value());
    REQUIRE_FALSE(r->ok());
    CHECK(r->error().code() == Errc::kInvalidArgument);
  }
}

TEST_CASE("settings: the fixed ones are checked, the searched parameters may have any name") {
  auto s = trainers::parse_command_settings(
      {{"kind", "command"}, {"command", "x"}, {"timeout", 2.5}, {"env", {{"A", "1"}, {"PORT", 8080}}}, {"grace", 0}});
  REQUIRE(s.ok());
  CHECK(s->timeout == 2.5);
  CHECK(s->grace == 0.0);
  CHECK(s->env == std::map<std::string, std::string>{{"A", "1"}, {"PORT", "8080"}});
  CHECK(s->workdir.empty());

  auto typo = trainers::parse_command_settings({{"kind", "command"}, {"comand", "x"}});
  REQUIRE_FALSE(typo.ok());
  CHECK(typo.error().code() == Errc::kInvalidArgument);
  CHECK(typo.error().message().find("did you mean 'command'") != std::string::npos);
  auto missing = trainers::parse_command_settings({{"kind", "command"}});
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code() == Errc::kInvalidArgument);
  for (const json& bad : {json{{"command", "x"}, {"timeout", -1}}, json{{"command", "x"}, {"env", {{"A", json::array()}}}},
                          json{{"command", "x"}, {"env", "A=1"}}, json{{"command", "  "}}, json{{"command", 3}}}) {
    CAPTURE(bad.dump());
    auto r = trainers::parse_command_settings(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == Errc::kInvalidArgument);
  }

  // A searched parameter named like nothing the trainer knows runs (it only feeds the template).
  TempDir dir;
  Recorded rec;
  auto ctx = context({{"command", "echo 'hpctune-report {{\"v\": '{some_param_42}'}}'"}}, {{"some_param_42", 7}},
                     dir.path, rec);
  auto r = CommandTrainer().run(ctx);
  REQUIRE_MESSAGE(r.ok(), r.error().to_string());
  REQUIRE(rec.size() == 1);
  CHECK(rec.reports[0].second.at("v") == 7.0);
}

// --- runs through the trainer ----------------------------------------------------------------------

TEST_CASE("a run gets its parameters as template arguments and HPCTUNE_* variables, env and workdir") {
  TempDir dir, work;
  Recorded rec;
  const std::string trial_dir = dir.path + "/trial";  // created by the trainer
  const json params = {{"lr", 0.05}, {"layers", json::array({64, 128, 32})}, {"name", "a b'c"}};
  auto ctx = context({{"command", kPython + " " + kScripts + "/epochs.py --lr {lr} --layers {layers} --name {name} "
                                                                "--epochs 2 --check-env"},
                      {"workdir", work.path},
                      {"env",
                       {{"PYTHONPATH", kPythonPath},
                        {"EXPECTED_TRIAL_DIR", trial_dir},
                        {"EXPECTED_CWD", work.path},
                        {"EXTRA", "4.5"}}}},
                     params, trial_dir, rec);
  auto r = CommandTrainer().run(ctx);
  REQUIRE_MESSAGE(r.ok(), r.error().to_string() << "\n" << read_file(trial_dir + "/attempt-2/stderr.log"));
  REQUIRE(rec.size() == 2);
  CHECK(rec.reports[0].first == 1);
  CHECK(rec.reports[1].first == 2);
  const auto& m = rec.reports[1].second;
  CHECK(m.at("lr_arg") == 0.05);
  CHECK(m.at("lr_param") == 0.05);
  CHECK(m.at("layer_count") == 3.0);
  CHECK(m.at("layer_sum") == 224.0);
  CHECK(m.at("name_len") == 5.0);
  CHECK(m.at("name_ok") == 1.0);
  CHECK(m.at("trial_id") == 17.0);
  CHECK(m.at("trial_dir_ok") == 1.0);
  CHECK(m.at("cwd_ok") == 1.0);
  CHECK(m.at("extra_env") == 4.5);
  // Final metrics: the last report plus train_seconds.
  CHECK(r->step == 2);
  CHECK_FALSE(r->stopped);
  CHECK(r->metrics.at("val_accuracy") == doctest::Approx(m.at("val_accuracy")));
  CHECK(r->metrics.at("train_seconds") > 0.0);
  CHECK(r->metrics.size() == m.size() + 1);
  // Other output went to the trial's log; the logs are artifacts.
  const std::string out = read_file(trial_dir + "/attempt-2/stdout.log");
  CHECK(out.find("epoch 1 done\nhpctune-report {\"step\": 1") != std::string::npos);
  CHECK(out.find("epoch 2 done") != std::string::npos);
  REQUIRE(r->artifacts.size() == 2);
  CHECK(r->artifacts[0].path == trial_dir + "/attempt-2/stdout.log");
  CHECK(r->artifacts[1].path == trial_dir + "/attempt-2/stderr.log");
}

TEST_CASE("without a trial directory the run gets a temporary one, removed afterwards") {
  TempDir dir;
  Recorded rec;
  const std::string note = dir.file("where");
  auto ctx = context({{"command", "echo \"$HPCTUNE_TRIAL_DIR\" > '" + note + "'; test -d \"$HPCTUNE_TRIAL_DIR\" && "
                                  "echo 'hpctune-report {{\"ok\": 1}}'"}},
                     json::object(), "", rec);
  auto r = CommandTrainer().run(ctx);
  REQUIRE_MESSAGE(r.ok(), r.error().to_string());
  REQUIRE(rec.size() == 1);
  CHECK(rec.reports[0].first == 1);  // no step: a counter from 1
  std::string used = read_file(note);
  REQUIRE(!used.empty());
  used.pop_back();
  CHECK(used.find("hpctune-trial-17-") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(used));
  CHECK(r->artifacts.empty());
}

TEST_CASE("malformed report lines are logged with a warning and ignored; the good ones count") {
  TempDir dir;
  Recorded rec;
  auto ctx = context({{"command", kPython + " " + kScripts + "/garbage.py"}}, json::object(), dir.path, rec);
  auto r = CommandTrainer().run(ctx);
  REQUIRE_MESSAGE(r.ok(), r.error().to_string());
  REQUIRE(rec.size() == 3);
  CHECK(rec.reports[0].first == 1);
  CHECK(rec.reports[0].second == protocol::Metrics{{"val_accuracy", 0.1}});
  CHECK(rec.reports[1].first == 2);
  CHECK(rec.reports[1].second == protocol::Metrics{{"val_accuracy", 0.2}, {"loss", 1.5}});
  CHECK(rec.reports[2].first == 5);
  CHECK(r->step == 5);
  CHECK(r->metrics.at("val_accuracy") == 0.5);
  const std::string log = read_file(dir.file("attempt-2/stdout.log"));
  CHECK(count(log, "hpctune: warning: ignored the report line above") == 8);
  CHECK(log.find("hpctune-report {not json\nhpctune: warning: ignored the report line above: not valid JSON") !=
        std::string::npos);
  CHECK(log.find("an ordinary line") != std::string::npos);
  CHECK(log.find("8 malformed report line(s) ignored") != std::string::npos);
}

// Python's logging writes to standard error: a report there does not count, and the logs say so
// (the stderr tail `hpctune trial` shows ends with the warning).
TEST_CASE("a report line on standard error does not count, with a warning in both logs") {
  TempDir dir;
  Recorded rec;
  auto ctx = context({{"command", "echo 'INFO:root:hpctune-report {{\"step\": 1, \"acc\": 0.5}}' >&2; "
                                  "echo 'hpctune-report {{\"step\": 2, \"acc\": 0.7}}'"}},
                     json::object(), dir.path, rec);
  auto r = CommandTrainer().run(ctx);
  REQUIRE_MESSAGE(r.ok(), r.error().to_string());
  REQUIRE(rec.size() == 1);
  CHECK(rec.reports[0].first == 2);
  const std::string err_log = read_file(dir.file("attempt-2/stderr.log"));
  CHECK(err_log.find("hpctune: warning: the report line above is on standard error, where reports do not count") !=
        std::string::npos);
  CHECK(read_file(dir.file("attempt-2/stdout.log")).find("1 report line(s) on standard error not counted") !=
        std::string::npos);
}

TEST_CASE("a non-zero exit fails the trial with the exit code and the last 20 lines of stderr") {
  TempDir dir;
  Recorded rec;
  auto ctx = context({{"command", kPython + " " + kScripts + "/fail_exit3.py"}, {"env", {{"PYTHONPATH", kPythonPath}}}},
                     json::object(), dir.path, rec);
  auto r = CommandTrainer().run(ctx);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == Errc::kFailed);
  const std::string& msg = r.error().message();
  CHECK(msg.find("exit code 3") != std::string::npos);
  CHECK(msg.find("ValueError: the data went missing") != std::string::npos);
  CHECK(msg.find("stderr line 30\n") != std::string::npos);
  CHECK(msg.find("stderr line 12\n") != std::string::npos);
  CHECK(msg.find("stderr line 11\n") == std::string::npos);  // 19 numbered lines + the error = 20
  CHECK(rec.size() == 1);                                     // the report before the failure counted
  CHECK(read_file(dir.file("attempt-2/stderr.log")).find("stderr line 1\n") != std::string::npos);  // all of it logged
}

TEST_CASE("timeout: a hanging program is killed and the trial fails naming the timeout") {
  TempDir dir;
  Recorded rec;
  auto ctx = context({{"command", kPython + " " + kScripts + "/hang.py"},
                      {"timeout", 2.5},  // the report comes first even on a loaded machine
                      {"grace", 0.3},
                      {"env", {{"PYTHONPATH", kPythonPath}}}},
                     json::object(), dir.path, rec);
  const auto t0 = Clock::now();
  auto r = CommandTrainer().run(ctx);
  const double took = seconds_since(t0);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == Errc::kTimeout);
  CHECK(r.error().message().find("timeout of 2.5 s") != std::string::npos);
  CHECK(took >= 2.5);
  CHECK(took < 6.0);
  CHECK(rec.size() == 1);
  // A killed program may take a moment to be gone (it dies with its parent, asynchronously).
  CHECK(wait_until([&] { return processes_mentioning(kScripts + "/hang.py").empty(); }, std::chrono::seconds(5)));
}

TEST_CASE("stop: SIGTERM first, SIGKILL after the grace period, nothing left behind") {
  TempDir dir;
  Recorded rec;
  std::atomic<bool> stop{false};
  // The shell traps SIGTERM (says so, keeps running) and leaves a background child in its group.
  auto ctx = context({{"command", "trap 'echo got SIGTERM >&2' TERM; sleep 300 & echo $! > {trial_dir}/bg.pid; "
                                  "echo 'hpctune-report {{\"step\": 4, \"v\": 0.5}}'; "
                                  "while :; do sleep 0.05; done"},
                      {"grace", 0.7}},
                     json::object(), dir.path, rec);
  ctx.report = [&](int64_t step, const protocol::Metrics& m) {
    std::lock_guard lock(rec.mu);
    rec.reports.emplace_back(step, m);
    stop = true;  // the master stops the trial after its first report
  };
  Clock::time_point stop_at{};
  ctx.stop_requested = [&] {
    if (stop && stop_at == Clock::time_point{}) stop_at = Clock::now();
    return stop.load();
  };
  auto r = CommandTrainer().run(ctx);
  REQUIRE_MESSAGE(r.ok(), r.error().to_string());
  const double after_stop = seconds_since(stop_at);
  CHECK(r->stopped);
  CHECK(r->step == 4);
  CHECK(r->metrics.at("v") == 0.5);
  CHECK(after_stop >= 0.7);  // the grace period was given
  CHECK(after_stop < 3.0);
  CHECK(read_file(dir.file("attempt-2/stderr.log")).find("got SIGTERM") != std::string::npos);
  CHECK(read_file(dir.file("attempt-2/stdout.log")).find("sending SIGKILL") != std::string::npos);
  const pid_t bg = static_cast<pid_t>(std::stol(read_file(dir.file("bg.pid"))));
  CHECK(wait_until([&] { return dead(bg); }, std::chrono::milliseconds(2000)));
}

TEST_CASE("stop: a program that exits on SIGTERM ends within the grace period") {
  TempDir dir;
  Recorded rec;
  std::atomic<bool> stop{false};
  auto ctx = context({{"command", kPython + " " + kScripts + "/hang.py"}, {"grace", 20}, {"env", {{"PYTHONPATH", kPythonPath}}}},
                     json::object(), dir.path, rec);
  ctx.report = [&](int64_t, const protocol::Metrics&) { stop = true; };
  ctx.stop_requested = [&] { return stop.load(); };
  const auto t0 = Clock::now();
  auto r = CommandTrainer().run(ctx);
  REQUIRE_MESSAGE(r.ok(), r.error().to_string());
  CHECK(r->stopped);
  CHECK(r->metrics.at("val_accuracy") == 0.25);
  CHECK(seconds_since(t0) < 5.0);  // far below the 20 s grace
  CHECK(read_file(dir.file("attempt-2/stdout.log")).find("sending SIGKILL") == std::string::npos);
}

TEST_CASE("a missing workdir and an unknown template name fail before anything runs") {
  TempDir dir;
  Recorded rec;
  auto ctx = context({{"command", "true"}, {"workdir", dir.file("nope")}}, json::object(), dir.path, rec);
  auto r = CommandTrainer().run(ctx);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == Errc::kNotFound);
  auto ctx2 = context({{"command", "train --lr {lr}"}}, {{"learning_rate", 0.1}}, dir.path, rec);
  auto r2 = CommandTrainer().run(ctx2);
  REQUIRE_FALSE(r2.ok());
  CHECK(r2.error().code() == Errc::kInvalidArgument);
}

TEST_CASE("ranks > 1: the program runs under mpirun and only rank 0's reports count") {
  auto prefix = trainers::mpirun_prefix(2);
  if (!prefix.ok()) {
    // A build without MPI: the error says so (and the test has nothing else to check).
    CHECK(prefix.error().code() == Errc::kUnavailable);
    return;
  }
  TempDir dir;
  Recorded rec;
  // Every rank prints a raw report carrying its rank; through the helper only rank 0 prints.
  auto ctx = context({{"command", "echo \"hpctune-report {{\\\"step\\\": 1, \\\"rank\\\": $OMPI_COMM_WORLD_RANK}}\"; " +
                                      kPython + " -c 'import hpctune_report as h; h.report(2, rank=h.rank() + 10)'; " +
                                      "echo \"rank $OMPI_COMM_WORLD_RANK of $OMPI_COMM_WORLD_SIZE\""},
                      {"env", {{"PYTHONPATH", kPythonPath}}}},
                     json::object(), dir.path, rec);
  ctx.ranks = 2;
  auto r = CommandTrainer().run(ctx);
  REQUIRE_MESSAGE(r.ok(), r.error().to_string() << "\n" << read_file(dir.file("attempt-2/stdout.log")));
  REQUIRE(rec.size() == 2);
  CHECK(rec.reports[0] == std::pair<int64_t, protocol::Metrics>{1, {{"rank", 0.0}}});
  CHECK(rec.reports[1] == std::pair<int64_t, protocol::Metrics>{2, {{"rank", 10.0}}});
  const std::string log = read_file(dir.file("attempt-2/stdout.log"));
  CHECK(log.find("rank 0 of 2") != std::string::npos);
  CHECK(log.find("rank 1 of 2") != std::string::npos);
  CHECK(log.find("\"rank\": 1}") != std::string::npos);  // rank 1's report was logged, not counted
}

TEST_CASE("hp.seed() and hp.data_seed(): 64-bit seeds folded below 2**32, the same on every rank, one per trial") {
  // 2 ranks under mpirun where this build has MPI, else one.
  const int ranks = trainers::mpirun_prefix(2).ok() ? 2 : 1;
  // The stated mix (tools/python/hpctune_report.py, fold_seed): the xor of the two 32-bit halves.
  auto fold = [](uint64_t s) { return (s ^ (s >> 32)) & 0xFFFFFFFFull; };
  const uint64_t data_seed = 0x7FEDCBA987654321ull;  // trainer.data_seed, at most INT64_MAX
  // Each run: the seeds every rank wrote, checked equal across ranks, and what rank 0 reported.
  auto run = [&](uint64_t seed) {
    TempDir dir;
    Recorded rec;
    auto ctx = context({{"command", kPython + " " + kScripts + "/seeds.py"},
                        {"data_seed", static_cast<int64_t>(data_seed)},
                        {"env", {{"PYTHONPATH", kPythonPath}}}},
                       json::object(), dir.path, rec);
    ctx.seed = seed;
    ctx.ranks = ranks;
    auto r = CommandTrainer().run(ctx);
    REQUIRE_MESSAGE(r.ok(), r.error().to_string() << "\n" << read_file(dir.file("attempt-2/stderr.log")));
    REQUIRE(rec.size() == 1);
    const auto& m = rec.reports[0].second;
    CHECK(m.at("accepted") == 1.0);  // numpy's RandomState took both; seed * 1000 + epoch fits 63 bits
    const std::string rank0 = read_file(dir.file("seeds-rank-0.txt"));
    for (int k = 1; k < ranks; ++k) CHECK(read_file(dir.file("seeds-rank-" + std::to_string(k) + ".txt")) == rank0);
    CHECK(rank0 == std::to_string(static_cast<uint64_t>(m.at("seed"))) + " " +
                       std::to_string(static_cast<uint64_t>(m.at("data_seed"))) + "\n");
    return std::pair<uint64_t, uint64_t>{static_cast<uint64_t>(m.at("seed")), static_cast<uint64_t>(m.at("data_seed"))};
  };
  const uint64_t a = 0xFEDCBA9876543210ull, b = 0xFEDCBA9876543211ull;  // above INT64_MAX: HPCTUNE_SEED is unsigned
  const auto first = run(a);
  CHECK(first.first < (uint64_t{1} << 32));
  CHECK(first.second < (uint64_t{1} << 32));
  CHECK(first.first == fold(a));
  CHECK(first.second == fold(data_seed));
  CHECK(run(a) == first);  // deterministic
  const auto other = run(b);
  CHECK(other.first != first.first);    // another trial's seed, another folded seed
  CHECK(other.second == first.second);  // the campaign's data seed, the same for every trial
}

TEST_CASE("the program's whole tree ends with the trial, descendants that left its process group included") {
  TempDir dir;
  Recorded rec;
  // sh exits at once; one sleep stays in its process group, one starts a session of its own.
  auto ctx = context({{"command", "sleep 3011 & setsid sleep 3012 & echo 'hpctune-report {{\"a\": 1}}'"}}, json::object(),
                     dir.path, rec);
  const auto t0 = Clock::now();
  auto r = CommandTrainer().run(ctx);
  REQUIRE_MESSAGE(r.ok(), r.error().to_string());
  CHECK(rec.size() == 1);
  CHECK(seconds_since(t0) < 1.5);  // not the 2 s given up on a pipe held open
  CHECK(processes_mentioning(std::string("sleep\0" "3011", 10)).empty());
  CHECK(processes_mentioning(std::string("sleep\0" "3012", 10)).empty());
}

TEST_CASE("a trial of `true` ends as soon as the program does: no poll slice is waited out") {
  // Against the same program spawned and reaped directly, in turns: a busy machine slows both
  // (issue 35: a check must hold under load), a poll slice waited out (20 ms) only the trainer's.
  TempDir dir;
  std::vector<double> trainer_ms, bare_ms;
  for (int i = 0; i < 21; ++i) {
    Recorded rec;
    auto ctx = context({{"command", "true"}}, json::object(), dir.path, rec);
    auto t0 = Clock::now();
    auto r = CommandTrainer().run(ctx);
    trainer_ms.push_back(seconds_since(t0) * 1000.0);
    REQUIRE_MESSAGE(r.ok(), r.error().to_string());
    launch::SpawnOptions o;
    o.argv = {"/bin/sh", "-c", "exec true"};
    o.supervised = true;
    t0 = Clock::now();
    auto child = launch::ChildProcess::spawn(o);
    REQUIRE(child.ok());
    REQUIRE(child->wait_for(std::chrono::seconds(30)).has_value());
    bare_ms.push_back(seconds_since(t0) * 1000.0);
  }
  std::sort(trainer_ms.begin(), trainer_ms.end());
  std::sort(bare_ms.begin(), bare_ms.end());
  MESSAGE("21 runs of `true`: median " << trainer_ms[10] << " ms through the trainer, " << bare_ms[10] << " ms spawned alone");
  // It was 22-28 ms more when the end of `true` waited out a 20 ms poll slice.
  CHECK(trainer_ms[10] - bare_ms[10] < 10.0);
}

TEST_CASE("trainer.log_limit: a program printing 47 MB leaves the first and the last half of 1 MB") {
  TempDir dir;
  Recorded rec;
  constexpr int64_t kLimit = 1000000;
  auto ctx = context({{"command", "seq 1 6000000; seq 1 100 >&2"}, {"log_limit", kLimit}}, json::object(), dir.path, rec);
  auto r = CommandTrainer().run(ctx);
  REQUIRE_MESSAGE(r.ok(), r.error().to_string());
  const std::string log = read_file(dir.file("attempt-2/stdout.log"));
  CHECK(log.size() <= kLimit + 200);  // the limit, plus the marker line
  CHECK(log.size() > kLimit - 100);
  CHECK(log.rfind("hpctune: trial 17 attempt 2: ", 0) == 0);  // the head: from the first line
  CHECK(log.find("\n1\n2\n3\n") != std::string::npos);
  const auto marker = log.find("hpctune: ... ");
  REQUIRE(marker != std::string::npos);
  const std::string marker_line = log.substr(marker, log.find('\n', marker) - marker);
  CHECK(marker_line.find(" bytes cut here (trainer.log_limit = 1000000 bytes") != std::string::npos);
  CHECK(log[marker - 1] == '\n');  // whole lines on both sides
  CHECK(log.find("\n5999999\n6000000\nhpctune: exit code 0") != std::string::npos);  // the tail: to the end
  // The cut is counted exactly: 6,000,000 numbers and their newlines, plus hpctune's own lines.
  const int64_t cut = std::stoll(log.substr(marker + 13));
  int64_t printed = 0;
  for (int64_t digits = 1, low = 1; low <= 6000000; ++digits, low *= 10)
    printed += (std::min<int64_t>(6000000, low * 10 - 1) - low + 1) * (digits + 1);
  const int64_t own = static_cast<int64_t>(log.size()) - (log.find('\n') + 1) - (log.size() - log.find("hpctune: exit code 0")) -
                      (static_cast<int64_t>(log.find('\n', marker)) + 1 - static_cast<int64_t>(marker));
  CHECK(cut + own == printed);
  // A small log is untouched.
  CHECK(read_file(dir.file("attempt-2/stderr.log")).find("hpctune: ...") == std::string::npos);
  CHECK(read_file(dir.file("attempt-2/stderr.log")).find("1\n2\n") == 0);
}

TEST_CASE("README: `env: {PATH: ...}` or an absolute path pins the interpreter a bare `python3` would be") {
  TempDir dir, venv;
  // A stand-in "virtual environment" whose python3 says who it is.
  std::filesystem::create_directories(venv.path + "/bin");
  const std::string fake = venv.path + "/bin/python3";
  {
    std::ofstream f(fake);
    f << "#!/bin/sh\necho 'hpctune-report {\"venv\": 1}'\n";
  }
  std::filesystem::permissions(fake, std::filesystem::perms::owner_all);
  for (const json& trainer : {json{{"command", "python3 train.py"}, {"env", {{"PATH", venv.path + "/bin:/usr/bin:/bin"}}}},
                              json{{"command", fake + " train.py"}}}) {
    CAPTURE(trainer.dump());
    Recorded rec;
    auto r = CommandTrainer().run(context(trainer, json::object(), dir.path, rec));
    REQUIRE_MESSAGE(r.ok(), r.error().to_string());
    REQUIRE(rec.size() == 1);
    CHECK(rec.reports[0].second.count("venv") == 1);
  }
}

// --- campaigns through `hpctune run` ---------------------------------------------------------------

namespace {

std::string command_config(const std::string& name, const std::string& command, int max_trials,
                           const std::string& extra_trainer = "", const std::string& extra = "") {
  return "name: " + name +
         "\nseed: 11\nobjective: {metric: val_accuracy, mode: max}\n"
         "search: {algorithm: random, max_trials: " +
         std::to_string(max_trials) +
         "}\n"
         "space:\n  lr: {type: float, low: 0.001, high: 1.0, log: true}\n"
         "trainer:\n  kind: command\n  command: \"" +
         command + "\"\n  env: {PYTHONPATH: \"" + kPythonPath + "\"}\n" + extra_trainer +
         "resources: {groups: 2, threads: 1}\n" + extra;
}

// Writes `config_text` as NAME.yaml, runs it into NAME.db (the path returned in `db`) within
// `limit`, requires it to succeed and returns its trials, which must number `trials`.
std::vector<store::TrialRow> run_campaign(TempDir& dir, const std::string& name, const std::string& config_text,
                                          size_t trials, std::chrono::seconds limit, std::string& db) {
  const std::string cfg = dir.write(name + ".yaml", config_text);
  db = dir.file(name + ".db");
  auto status = run_hpctune({"run", cfg, "--db", db}, dir.file(name + ".log"), limit);
  REQUIRE_MESSAGE(status.success(), read_file(dir.file(name + ".log")));
  auto rows = read_trials(db);
  REQUIRE(rows.size() == trials);
  return rows;
}

std::vector<store::MetricRow> trial_metrics(const std::string& db, int64_t trial_id) {
  auto s = store::Store::open_readonly(db);
  REQUIRE(s.ok());
  auto m = (*s)->metrics(trial_id);
  REQUIRE(m.ok());
  return m.value();
}

}  // namespace

TEST_CASE("campaign: a script reporting every epoch is pruned by ASHA") {
  TempDir dir;
  std::string db;
  const auto trials = run_campaign(
      dir, "asha",
      command_config("cmd-asha", kPython + " " + kScripts + "/epochs.py --lr {lr} --epochs 9 --sleep 0.03", 10, "",
                     "early_stopping: {kind: asha, grace_period: 1, reduction_factor: 3, max_t: 9}\n"),
      10, std::chrono::seconds(60), db);
  int pruned = 0, done = 0;
  for (const auto& t : trials) {
    CAPTURE(t.id);
    CAPTURE(t.error);
    REQUIRE((t.state == store::TrialState::kPruned || t.state == store::TrialState::kDone));
    REQUIRE(t.metrics.is_object());
    CHECK(t.metrics.contains("val_accuracy"));
    const auto metrics = trial_metrics(db, t.id);
    int64_t reports = 0;
    for (const auto& m : metrics)
      if (m.name == "val_accuracy") ++reports;
    if (t.state == store::TrialState::kPruned) {
      ++pruned;
      CHECK(t.step < 9);
      CHECK(reports >= 1);
      CHECK(reports < 9);
    } else {
      ++done;
      CHECK(t.step == 9);
      CHECK(reports == 9);  // one report per epoch
      CHECK(t.metrics.contains("train_seconds"));
    }
    // The trial's own log holds the script's other output.
    CHECK(read_file(db + ".trials/" + std::to_string(t.id) + "/attempt-1/stdout.log").find("epoch 1 done") != std::string::npos);
  }
  CHECK(pruned >= 1);
  CHECK(done >= 1);
  for (const auto& e : read_events(db)) CHECK(e.kind != "reports_unjudged");  // judged at every rung
  check_no_orphans(db);
  // A killed program may take a moment to be gone (it dies with its parent, asynchronously).
  CHECK(wait_until([&] { return processes_mentioning(kScripts + "/epochs.py").empty(); }, std::chrono::seconds(5)));
}

TEST_CASE("campaign: early stopping over an objective a program reports only at its end says so, once") {
  // Before, nothing said it: ASHA never saw 'score' while a trial ran, pruned none, and the campaign
  // spent its whole budget as if early stopping were off.
  TempDir dir;
  const std::string script = dir.write("final_only.py",
                                       "import hpctune_report as hp\n"
                                       "for epoch in range(1, 7):\n"
                                       "    hp.report(epoch, loss=1.0 / epoch)\n"
                                       "hp.report(6, score=0.5)\n");
  std::string config = command_config("cmd-unjudged", kPython + " " + script, 6, "",
                                      "early_stopping: {kind: asha, grace_period: 1, reduction_factor: 3, max_t: 6}\n");
  config.replace(config.find("metric: val_accuracy"), std::string("metric: val_accuracy").size(), "metric: score");
  std::string db;
  const auto trials = run_campaign(dir, "unjudged", config, 6, std::chrono::seconds(60), db);
  for (const auto& t : trials) {
    CAPTURE(t.id);
    CHECK(t.state == store::TrialState::kDone);
    CHECK(t.objective.value_or(0) == doctest::Approx(0.5));
  }
  int told = 0;
  for (const auto& e : read_events(db)) {
    if (e.kind != "reports_unjudged") continue;
    ++told;
    CHECK(e.detail.at("metric") == "score");
    CHECK(e.detail.at("judge") == "early stopping (asha)");
    // The last report's metrics: step 6's two lines, merged when they were read together.
    const json& reported = e.detail.at("reported");
    CHECK((reported == json::array({"loss", "score"}) || reported == json::array({"score"})));
  }
  CHECK(told == 1);
  const std::string log = read_file(dir.file("unjudged.log"));
  CHECK(log.find("warning: trial ") != std::string::npos);
  CHECK(log.find("reported 'score' in no step before its last (step 6: ") != std::string::npos);
  CHECK(log.find("score), so early stopping (asha) never judged it while it ran") != std::string::npos);
  // `status` says it too, for a campaign run where nobody watched its console.
  REQUIRE(run_hpctune({"status", db}, dir.file("status.log"), std::chrono::seconds(30)).success());
  CHECK(read_file(dir.file("status.log")).find("warning    early stopping (asha) never judged trial ") != std::string::npos);
  REQUIRE(run_hpctune({"status", db, "--format", "json"}, dir.file("status.json"), std::chrono::seconds(30)).success());
  const json status = json::parse(read_file(dir.file("status.json")));
  // Two: this program also reads no parameter, so its 6 trials all report score 0.5 (same_objective).
  REQUIRE(status.at("campaign").at("warnings").size() == 2);
  CHECK(status["campaign"]["warnings"][0].get<std::string>().find("it reported 'score' in no step before its last") !=
        std::string::npos);
  CHECK_MESSAGE(status["campaign"]["warnings"][1].get<std::string>().find("all reported score = 0.5") != std::string::npos,
                status["campaign"]["warnings"].dump());
}

TEST_CASE("campaign: exit 3 fails the trial with the stderr tail; a hang fails past its timeout") {
  TempDir dir;
  const std::string fail_cfg =
      dir.write("fail.yaml", command_config("cmd-fail", kPython + " " + kScripts + "/fail_exit3.py --lr {lr}", 2));
  const std::string hang_cfg = dir.write(
      "hang.yaml", command_config("cmd-hang", kPython + " " + kScripts + "/hang.py {lr}", 2, "  timeout: 1s\n  grace: 0.2\n"));
  // Both campaigns at once: the whole test takes as long as the slower one.
  ChildProcess fail_run = start_hpctune({"run", fail_cfg, "--db", dir.file("fail.db")}, dir.file("fail.log"));
  const auto t0 = Clock::now();
  ChildProcess hang_run = start_hpctune({"run", hang_cfg, "--db", dir.file("hang.db")}, dir.file("hang.log"));
  REQUIRE_MESSAGE(fail_run.wait_for(std::chrono::seconds(60)).has_value(), read_file(dir.file("fail.log")));
  REQUIRE_MESSAGE(hang_run.wait_for(std::chrono::seconds(60)).has_value(), read_file(dir.file("hang.log")));
  const double hang_seconds = seconds_since(t0);

  const auto failed = read_trials(dir.file("fail.db"));
  REQUIRE(failed.size() == 2);
  for (const auto& t : failed) {
    CHECK(t.state == store::TrialState::kFailed);
    CHECK(t.error.find("exit code 3") != std::string::npos);
    CHECK(t.error.find("ValueError: the data went missing") != std::string::npos);
    CHECK(t.error.find("stderr line 30") != std::string::npos);
    CHECK(t.step == 1);  // its one report was recorded before it failed
  }
  const auto hung = read_trials(dir.file("hang.db"));
  REQUIRE(hung.size() == 2);
  for (const auto& t : hung) {
    CHECK(t.state == store::TrialState::kFailed);
    CHECK(t.error.find("timeout of 1 s") != std::string::npos);
  }
  CHECK(hang_seconds < 30.0);  // two 1 s timeouts on two groups, not 600 s of sleep
  check_no_orphans(dir.file("fail.db"));
  check_no_orphans(dir.file("hang.db"));
  // A killed program may take a moment to be gone (it dies with its parent, asynchronously).
  CHECK(wait_until([&] { return processes_mentioning(kScripts + "/hang.py").empty(); }, std::chrono::seconds(5)));
}

TEST_CASE("campaign: garbage report lines are logged and ignored, and the trial completes") {
  TempDir dir;
  std::string db;
  const auto trials = run_campaign(
      dir, "garbage", command_config("cmd-garbage", kPython + " " + kScripts + "/garbage.py {lr}", 2), 2,
      std::chrono::seconds(60), db);
  for (const auto& t : trials) {
    CAPTURE(t.error);
    CHECK(t.state == store::TrialState::kDone);
    CHECK(t.step == 5);
    REQUIRE(t.objective.has_value());
    CHECK(*t.objective == 0.5);
    std::vector<int64_t> steps;
    for (const auto& m : trial_metrics(db, t.id))
      if (m.name == "val_accuracy") steps.push_back(m.step);
    CHECK(steps == std::vector<int64_t>{1, 2, 5});
    const std::string log = read_file(db + ".trials/" + std::to_string(t.id) + "/attempt-1/stdout.log");
    CHECK(count(log, "hpctune: warning: ignored the report line above") == 8);
  }
  check_no_orphans(db);
}

TEST_CASE("campaign: a command trainer with 2 ranks per group runs under mpirun; rank 0's reports count") {
  if (!trainers::mpirun_prefix(2).ok()) return;  // a build without MPI: the unit case above checks the error
  TempDir dir;
  std::string cfg_text = command_config("cmd-ranks", kPython + " " + kScripts + "/ranks.py", 2);
  const std::string resources = "resources: {groups: 2, threads: 1}\n";
  cfg_text.replace(cfg_text.find(resources), resources.size(), "resources: {groups: 1, threads: 1, ranks: {data: 2}}\n");
  std::string db;
  const auto trials = run_campaign(dir, "ranks", cfg_text, 2, std::chrono::seconds(90), db);
  for (const auto& t : trials) {
    CAPTURE(t.error);
    CHECK(t.state == store::TrialState::kDone);
    REQUIRE(t.objective.has_value());
    CHECK(*t.objective == 1.0);  // rank 0's value; rank 1's line was logged, not counted
    CHECK(t.metrics.value("ranks", 0.0) == 2.0);
    CHECK(t.metrics.value("world_size", 0.0) == 2.0);  // hpctune's WORLD_SIZE (trainers/rank_environment.h)
    CHECK(t.step == 1);
    // Each rank wrote the RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE it was given.
    const std::string trial = db + ".trials/" + std::to_string(t.id);
    CHECK(read_file(trial + "/rank-0.env").rfind("0 2 0 2 ", 0) == 0);
    CHECK(read_file(trial + "/rank-1.env").rfind("1 2 1 2 ", 0) == 0);
    CHECK(read_file(db + ".trials/" + std::to_string(t.id) + "/attempt-1/stdout.log").find("\"val_accuracy\": -1") !=
          std::string::npos);
  }
  check_no_orphans(db);
}

TEST_CASE("campaign: hpctune validate refuses a placeholder inside double quotes, naming the place") {
  TempDir dir;
  const std::string cfg = dir.write("quoted.yaml",
                                    "name: quoted\nobjective: {metric: v, mode: max}\nsearch: {max_trials: 2}\n"
                                    "space:\n  v: {type: choice, values: [a, b]}\n"
                                    "trainer:\n  kind: command\n  command: 'echo \"name={v}\"'\n");
  auto status = run_hpctune({"validate", cfg}, dir.file("validate.log"), std::chrono::seconds(30));
  const std::string out = read_file(dir.file("validate.log"));
  CHECK(status.code == 2);
  CHECK_MESSAGE(out.find(cfg + ":8:3: trainer.command: the placeholder {v} at character 12 is inside double quotes") !=
                    std::string::npos,
                out);
  // `run` refuses it the same way, before anything starts.
  auto run = run_hpctune({"run", cfg, "--db", dir.file("q.db")}, dir.file("run.log"), std::chrono::seconds(30));
  CHECK(run.code == 2);
  CHECK(read_file(dir.file("run.log")).find("trainer.command: the placeholder {v}") != std::string::npos);
}

TEST_CASE("campaign: a flood of reports loses nothing; every done is recorded and no trial is left running") {
  // A million report lines (500,000 per trial, as fast as awk prints them, on 2 groups): they fill
  // the worker's send queue (10,000 frames) many times over, which used to drop reports and the
  // final done (the campaign then never ended: issue 9's probe).
  constexpr int kLines = 500000;
  TempDir dir;
  std::string db;
  const auto trials = run_campaign(
      dir, "flood", command_config("cmd-flood", kScripts + "/flood.sh " + std::to_string(kLines), 2), 2,
      std::chrono::seconds(200), db);
  for (const auto& t : trials) {
    CAPTURE(t.id);
    CHECK(t.state == store::TrialState::kDone);
    CHECK(t.attempt == 1);
    CHECK(t.step == kLines);
    REQUIRE(t.objective.has_value());
    CHECK(*t.objective == 1.0);
    int64_t reports = 0;
    for (const auto& m : trial_metrics(db, t.id))
      if (m.name == "val_accuracy") ++reports;
    CHECK(reports == kLines);  // every step arrived
  }
  check_no_orphans(db);
}

namespace {

pid_t parent_of(pid_t pid) {
  std::ifstream st("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(st)), {});
  const auto close = stat.rfind(')');
  if (close == std::string::npos || close + 4 >= stat.size()) return 0;
  return static_cast<pid_t>(atoi(stat.c_str() + stat.find(' ', close + 2) + 1));
}

// The trainer-group processes the master started (not their supervisors, which share the cmdline).
std::vector<pid_t> group_workers(const std::string& db, pid_t master) {
  std::vector<pid_t> out;
  for (pid_t p : workers_of(db))
    if (parent_of(p) == master) out.push_back(p);
  return out;
}

}  // namespace

TEST_CASE("campaign: SIGKILL of the master takes the programs' whole trees with it") {
  TempDir dir;
  // A compound command: sleep is the shell's child, which PDEATHSIG alone would orphan.
  const std::string cfg = dir.write("k.yaml", command_config("cmd-kill-master", "sleep 3041; echo done", 2));
  const std::string db = dir.file("k.db");
  const std::string marker = std::string("sleep\0" "3041", 10);
  ChildProcess master = start_hpctune({"run", cfg, "--db", db}, dir.file("run.log"));
  REQUIRE_MESSAGE(wait_until([&] { return processes_mentioning(marker).size() == 2; }, std::chrono::seconds(20)),
                  read_file(dir.file("run.log")));
  ::kill(master.pid(), SIGKILL);
  REQUIRE(master.wait_for(std::chrono::seconds(10)).has_value());
  CHECK_MESSAGE(wait_until([&] { return processes_mentioning(marker).empty(); }, std::chrono::seconds(5)),
                "a program of the killed campaign survived");
  check_no_orphans(db);
}

TEST_CASE("campaign: SIGKILL of a worker ends its attempt's tree; the retry runs in a directory of its own") {
  TempDir dir;
  // Attempt 1 hangs in a compound command; attempt 2 reports at once.
  const std::string cfg = dir.write(
      "w.yaml", command_config("cmd-kill-worker",
                               "echo attempt {attempt} > /dev/null; test {attempt} -gt 1 || sleep 3051; "
                               "echo 'hpctune-report {{\\\"val_accuracy\\\": 1}}'",
                               1));
  const std::string db = dir.file("w.db");
  const std::string marker = std::string("sleep\0" "3051", 10);
  ChildProcess master = start_hpctune({"run", cfg, "--db", db}, dir.file("run.log"));
  REQUIRE_MESSAGE(wait_until([&] { return processes_mentioning(marker).size() == 1; }, std::chrono::seconds(20)),
                  read_file(dir.file("run.log")));
  const auto workers = group_workers(db, master.pid());
  REQUIRE(!workers.empty());
  // The group running the trial: the one whose supervisor's tree holds the sleep.
  const pid_t sleeper = processes_mentioning(marker).front();
  pid_t victim = 0;
  for (pid_t p = sleeper; p > 1 && victim == 0; p = parent_of(p))
    if (std::find(workers.begin(), workers.end(), p) != workers.end()) victim = p;
  REQUIRE(victim != 0);
  ::kill(victim, SIGKILL);
  auto status = master.wait_for(std::chrono::seconds(60));
  REQUIRE_MESSAGE(status.has_value(), read_file(dir.file("run.log")));
  CHECK_MESSAGE(status->success(), read_file(dir.file("run.log")));
  CHECK(processes_mentioning(marker).empty());  // gone before the retry ended, not merely later
  const auto trials = read_trials(db);
  REQUIRE(trials.size() == 1);
  CHECK(trials[0].state == store::TrialState::kDone);
  CHECK(trials[0].attempt == 2);
  const std::string trial_dir = db + ".trials/" + std::to_string(trials[0].id);
  CHECK(read_file(trial_dir + "/attempt-1/stdout.log").find("attempt 1") != std::string::npos);
  CHECK(read_file(trial_dir + "/attempt-2/stdout.log").find("exit code 0") != std::string::npos);
  CHECK(read_file(trial_dir + "/attempt-1/stdout.log").find("exit code 0") == std::string::npos);
  check_no_orphans(db);
}

TEST_CASE("campaign: a SIGSTOPped worker is killed once lost; its attempt's tree goes before the retry ends") {
  TempDir dir;
  std::string text = command_config("cmd-stop-worker",
                                    "test {attempt} -gt 1 || sleep 3061; echo 'hpctune-report {{\\\"val_accuracy\\\": 1}}'", 1);
  const std::string resources = "resources: {groups: 2, threads: 1}\n";
  text.replace(text.find(resources), resources.size(),
               "resources: {groups: 1, threads: 1, heartbeat_interval: 0.2, heartbeat_timeout: 1}\n");
  const std::string cfg = dir.write("s.yaml", text);
  const std::string db = dir.file("s.db");
  const std::string marker = std::string("sleep\0" "3061", 10);
  ChildProcess master = start_hpctune({"run", cfg, "--db", db}, dir.file("run.log"));
  REQUIRE_MESSAGE(wait_until([&] { return processes_mentioning(marker).size() == 1; }, std::chrono::seconds(20)),
                  read_file(dir.file("run.log")));
  const auto workers = group_workers(db, master.pid());
  REQUIRE(workers.size() == 1);
  ::kill(workers[0], SIGSTOP);
  auto status = master.wait_for(std::chrono::seconds(30));
  REQUIRE_MESSAGE(status.has_value(), read_file(dir.file("run.log")));
  CHECK_MESSAGE(status->success(), read_file(dir.file("run.log")));
  CHECK(processes_mentioning(marker).empty());
  const auto trials = read_trials(db);
  REQUIRE(trials.size() == 1);
  CHECK(trials[0].state == store::TrialState::kDone);
  CHECK(trials[0].attempt == 2);
  check_no_orphans(db);
}

TEST_CASE("a Python program's reports printed without flush reach the master as it prints them (PYTHONUNBUFFERED)") {
  // Python writes a pipe in blocks: buffered, the 4 reports came together at the program's end, so a
  // rung could stop it only after it had trained every step.
  const std::string code =
      "import time\n"
      "for e in range(1, 5):\n"
      "    time.sleep(0.3)\n"
      "    print('hpctune-report {{\"step\": %d, \"value\": %d}}' % (e, e))\n";  // {{ }}: literal braces
  auto spread = [&](const json& env) {
    TempDir dir;
    Recorded rec;
    std::vector<Clock::time_point> at;
    auto ctx = context({{"command", json::array({kPython, "-c", code})}, {"env", env}}, json::object(), dir.path + "/t", rec);
    ctx.report = [&](int64_t, const protocol::Metrics&) { at.push_back(Clock::now()); };
    auto r = CommandTrainer().run(ctx);
    REQUIRE_MESSAGE(r.ok(), r.error().to_string());
    REQUIRE(at.size() == 4);
    return std::chrono::duration<double>(at.back() - at.front()).count();
  };
  // As a user's shell has it: no PYTHONUNBUFFERED (a test's environment may set it).
  const char* had = std::getenv("PYTHONUNBUFFERED");
  const std::optional<std::string> saved = had ? std::optional<std::string>(had) : std::nullopt;
  ::unsetenv("PYTHONUNBUFFERED");
  CHECK(spread(json::object()) >= 0.5);  // 0.9 s of sleeps between the first and the last
  // The user's environment decides: PYTHONUNBUFFERED empty is Python's default, buffered.
  CHECK(spread({{"PYTHONUNBUFFERED", ""}}) < 0.2);
  if (saved) ::setenv("PYTHONUNBUFFERED", saved->c_str(), 1);
}
