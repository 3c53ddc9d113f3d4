// What a new user meets in the CLI (issue 9, items 19-22, 25, 28-30; the views themselves, such
// as the progress line that fits the terminal, are tested in test_report): bad numbers and
// database paths are refused; a campaign without a success exits 1 and stops early
// (search.max_failures); trials are `running` and timed from their start; a finished campaign is
// extended with `resume --max-trials`; `hpctune trial`; every objective in the tables; SIGTERM
// exits 143; `export` infers its format; `validate` counts only searched parameters; (issue 10)
// `status --format json` of finished, running, interrupted and multi-objective campaigns, and
// `--bind` / resources.bind; (issue 11) `schedule` and the Stages table of `status`; (issue 36)
// each trial's stage (`trials --stage`), lineage and run settings in `trials`, `trial` and `export`. Campaigns run through the `hpctune` binary with small shell-script
// trainers.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/text.h"
#include "launch/backends.h"
#include "report/format.h"
#include "search/early_stopping.h"
#include "search/searcher.h"
#include "tests/campaign_fixture.h"
#include "tests/lineage_campaign.h"
#include "workflow/stages.h"

using namespace hpctune;
using namespace hpctune::launch;
using namespace hpctune::testing;
using json = nlohmann::json;

namespace {

bool contains(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

// A campaign of a command trainer running `sh <script> {x}`; `extra` is appended (e.g. more
// search settings), `objective` replaces the default objective line.
std::string script_config(const std::string& name, const std::string& script, int max_trials,
                          const std::string& extra_search = "",
                          const std::string& objective = "objective: {metric: val_accuracy, mode: max}\n",
                          const std::string& space = "  x: {type: float, low: 0.1, high: 0.9}\n",
                          const std::string& args = "{x}") {
  return "name: " + name + "\nseed: 3\n" + objective + "search: {algorithm: random, max_trials: " +
         std::to_string(max_trials) + extra_search + "}\nspace:\n" + space +
         "trainer:\n  kind: command\n  command: \"/bin/sh " + script + " " + args +
         "\"\nresources: {groups: 2, threads: 1}\n";
}

json parse_json_file(const std::string& path) {
  const std::string text = read_file(path);
  auto j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  REQUIRE_MESSAGE(!j.is_discarded(), text);
  return j;
}

// The lines that a run printed, in one string (stdout and stderr together).
std::string run_log(const TempDir& dir, const std::vector<std::string>& args, const std::string& name, int* code) {
  auto status = run_hpctune(args, dir.file(name), std::chrono::seconds(60));
  *code = status.signaled ? -status.signal : status.code;
  return read_file(dir.file(name));
}

}  // namespace

// --- the help says what this build has ---------------------------------------------------------------

TEST_CASE("hpctune --help names every search algorithm, early stopper, stage kind and backend; dashboard --help the web app") {
  TempDir dir;
  int code = 0;
  const std::string help = run_log(dir, {"--help"}, "help.log", &code);
  CHECK(code == 0);
  // The lists come from the registries, in their order.
  CHECK_MESSAGE(contains(help, "(" + join(search::searcher_names(), ", ") + ";"), help);
  std::vector<std::string> stoppers;
  for (const std::string& s : search::stopper_names())
    if (s != "none") stoppers.push_back(s);
  CHECK_MESSAGE(contains(help, "early stopping: " + join(stoppers, ", ") + ")"), help);
  CHECK_MESSAGE(contains(help, "workflows of stages (" + join(workflow::stage_kind_names(), ", ") + ")"), help);
  for (const char* backend : launch::kBackendNames) CHECK_MESSAGE(contains(help, backend), help);
  for (const char* name : {"rl", "cmaes", "auto", "pbt", "transfer", "ensemble", "slurm"})
    CHECK_MESSAGE(contains(help, name), name);

  const std::string dash = run_log(dir, {"dashboard", "--help"}, "dashboard.log", &code);
  CHECK(code == 0);
  CHECK_MESSAGE(contains(dash, "web app and its JSON API"), dash);
  CHECK_MESSAGE(contains(dash, "token"), dash);
}

// --- item 19: numbers and paths on the command line -------------------------------------------------

TEST_CASE("bad numbers and database paths are refused with exit 2 and a clear message") {
  TempDir dir;
  const std::string cfg = dir.write("c.yaml", sleep_config("flags", 1, 0.01, 1, 1));
  int code = 0;
  for (const std::string bad : {"-1", "2^64", "1e23", "18446744073709551616", "0x10", "", " 5", "5 "}) {
    const std::string out = run_log(dir, {"run", cfg, "--db", dir.file("x.db"), "--seed", bad}, "seed.log", &code);
    CHECK_MESSAGE(code == 2, bad);
    CHECK_MESSAGE(contains(out, "--seed"), out);
    CHECK_MESSAGE(contains(out, "0..18446744073709551615"), out);
  }
  for (const std::string bad : {":memory:", "", "file:x.db?mode=memory", "file::memory:"}) {
    const std::string out = run_log(dir, {"run", cfg, "--db", bad}, "db.log", &code);
    CHECK_MESSAGE(code == 2, bad);
    CHECK_MESSAGE(contains(out, "--db"), out);
    CHECK(run_log(dir, {"resume", bad}, "rdb.log", &code).find("error") != std::string::npos);
    CHECK(code == 2);
  }
  for (const std::string bad : {"0", "-1", "4097", "1.5", "1e2"}) {
    const std::string out = run_log(dir, {"run", cfg, "--db", dir.file("x.db"), "--groups", bad}, "g.log", &code);
    CHECK_MESSAGE(code == 2, bad);
    CHECK(contains(out, "--groups"));
  }
  CHECK_FALSE(std::filesystem::exists(dir.file("x.db")));  // nothing ran
  // The largest seed is a seed like any other.
  const std::string out = run_log(dir, {"run", cfg, "--db", dir.file("ok.db"), "--seed", "18446744073709551615"},
                                  "ok.log", &code);
  REQUIRE_MESSAGE(code == 0, out);
  auto s = store::Store::open_readonly(dir.file("ok.db"));
  REQUIRE(s.ok());
  auto c = (*s)->load_campaign();
  REQUIRE((c.ok() && *c));
  CHECK((*c)->seed == 18446744073709551615ull);
  for (const std::string bad : {"-1", "0", "abc"}) {
    const std::string t = run_log(dir, {"trials", dir.file("ok.db"), "--top", bad}, "top.log", &code);
    CHECK_MESSAGE(code == 2, bad);
    CHECK(contains(t, "--top"));
    CHECK(t.size() < 400);  // a message, not a 300-digit range
  }
  CHECK(run_log(dir, {"trials", dir.file("ok.db"), "--top", "1"}, "top1.log", &code).find("done") != std::string::npos);
  CHECK(code == 0);
}

TEST_CASE("an explicitly empty value never means the option's default: exit 2 naming the option") {
  // Before, each of these ran as if the option had been left out: a generated dashboard token, port
  // 8080 (run's --dashboard-port, dashboard's --port), every stage, standard output, this program, the
  // default machine file, outcomes or trial cap.
  TempDir dir;
  const std::string cfg = dir.write("c.yaml", sleep_config("empties", 1, 0.01, 1, 1));
  int code = 0;
  REQUIRE(run_log(dir, {"run", cfg, "--db", dir.file("ok.db")}, "ok.log", &code).find("best trial") != std::string::npos);
  REQUIRE(code == 0);
  const std::string db = dir.file("ok.db");
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"--token", {"dashboard", db, "--port", "0", "--token", ""}},
      {"--token-file", {"dashboard", db, "--port", "0", "--token-file", ""}},
      {"--port", {"dashboard", db, "--port", ""}},
      {"--max-trials", {"simulate", cfg, "--db", dir.file("sim.db"), "--max-trials", ""}},
      {"--dashboard-port", {"run", cfg, "--db", dir.file("new.db"), "--dashboard-port", ""}},
      {"--dashboard-port", {"resume", db, "--dashboard-port", ""}},
      {"--stage", {"trials", db, "--stage", ""}},
      {"--stage", {"schedule", db, "--stage", ""}},
      {"--output", {"export", db, "--format", "json", "-o", ""}},
      {"--program", {"slurm", "submit", cfg, "--nodes", "1", "--time", "10", "--db", dir.file("s.db"), "--dry-run",
                     "--program", ""}},
      {"--machine", {"simulate", cfg, "--db", dir.file("sim.db"), "--machine", ""}},
      {"--machine-out", {"simulate", cfg, "--db", dir.file("sim.db"), "--machine-out", ""}},
      {"--outcomes", {"simulate", cfg, "--db", dir.file("sim.db"), "--outcomes", ""}},
      {"--master", {"worker", "--master", ""}},
  };
  for (const auto& [option, args] : cases) {
    CAPTURE(option);
    CAPTURE(args.front());
    const std::string out = run_log(dir, args, "empty.log", &code);
    CHECK_MESSAGE(code == 2, out);
    CHECK_MESSAGE(contains(out, option + ": "), out);
    CHECK_MESSAGE(contains(out, "empty"), out);
  }
  CHECK_FALSE(std::filesystem::exists(dir.file("new.db")));
  CHECK_FALSE(std::filesystem::exists(dir.file("sim.db")));
}

// --- item 22: campaigns without a success ------------------------------------------------------------

TEST_CASE("a workflow without a success: run's and resume's error name each failed stage and why, first") {
  // Before, the error said only "no trial succeeded in campaign 'wf-fail' (2 failed)" and the first
  // failure: the transfer stage that could not start (its checkpoint file is a FIFO, which the stage
  // never waits on; validate asks only whether the path exists) was named nowhere but in the log, as
  // it happened.
  TempDir dir;
  const std::string fail = dir.write("fail.sh", "exit 3\n");
  const std::string missing = dir.file("fifo.bin");
  REQUIRE(::mkfifo(missing.c_str(), 0600) == 0);
  std::string y = "name: wf-fail\nseed: 3\nobjective: {metric: val_accuracy, mode: max}\n";
  y += "trainer: {kind: command, command: \"/bin/sh " + fail + "\", provides: [checkpoints]}\n";
  y += "resources: {groups: 1, threads: 1}\nstages:\n";
  y += "  - name: bad\n    kind: search\n    search: {algorithm: random, max_trials: 2}\n";
  y += "    space: {x: {type: float, low: 0.1, high: 0.9}}\n";
  y += "  - {name: move, kind: transfer, checkpoint: " + missing + ", classes: [5, 6, 7, 8, 9]}\n";
  const std::string cfg = dir.write("wf.yaml", y);
  const std::string db = dir.file("wf.db");
  int code = 0;
  for (const std::vector<std::string>& args : {std::vector<std::string>{"run", cfg, "--db", db}, {"resume", db}}) {
    CAPTURE(args.front());
    const std::string out = run_log(dir, args, args.front() + ".log", &code);
    CHECK_MESSAGE(code == 1, out);
    const auto at = out.find("hpctune " + args.front() + ": error: ");
    REQUIRE_MESSAGE(at != std::string::npos, out);
    const std::string error = out.substr(at);
    const auto bad = error.find("campaign 'wf-fail' failed: stage 'bad' (search) failed: none of its 2 trials succeeded");
    const auto move = error.find("stage 'move' (transfer) failed: could not start: stage 'move': no source: the checkpoint file '" +
                                 missing + "' does not exist");
    const auto none = error.find("no trial succeeded in campaign 'wf-fail' (2 failed)");
    CHECK_MESSAGE(bad != std::string::npos, error);
    CHECK_MESSAGE(move != std::string::npos, error);
    CHECK_MESSAGE(none != std::string::npos, error);
    CHECK_MESSAGE((bad < none && move < none), error);
    CHECK_MESSAGE(contains(error, "`hpctune status " + db + "` shows every stage"), error);
  }
}

TEST_CASE("a campaign whose trials all fail exits 1, names the first failure and stops after max_failures") {
  TempDir dir;
  const std::string fail = dir.write("fail.sh", "echo 'the data went missing' >&2\nexit 3\n");
  int code = 0;
  // 12 trials budgeted; the default search.max_failures (5) stops it after 5 failures (plus what the
  // other group was running).
  const std::string cfg = dir.write("fail.yaml", script_config("all-fail", fail, 12));
  const std::string out = run_log(dir, {"run", cfg, "--db", dir.file("fail.db")}, "fail.log", &code);
  CHECK_MESSAGE(code == 1, out);
  CHECK(contains(out, " failed: command failed: exit code 3"));  // in the log, as it happens
  CHECK(contains(out, "5 trials failed before any succeeded (search.max_failures = 5)"));
  CHECK(contains(out, "the first failure, trial "));  // trial 1 or 2: two groups fail at about the same time
  CHECK(contains(out, "the data went missing"));
  CHECK_FALSE(contains(out, "completed"));
  auto trials = read_trials(dir.file("fail.db"));
  CHECK(trials.size() >= 5);
  CHECK(trials.size() <= 7);
  auto s = store::Store::open_readonly(dir.file("fail.db"));
  REQUIRE(s.ok());
  CHECK((*(*s)->load_campaign())->state == "failed");

  // Fewer trials than max_failures, all failed: no early stop, but still exit 1.
  const std::string few = dir.write("few.yaml", script_config("few-fail", fail, 2));
  const std::string out2 = run_log(dir, {"run", few, "--db", dir.file("few.db")}, "few.log", &code);
  CHECK_MESSAGE(code == 1, out2);
  CHECK(contains(out2, "no trial succeeded in campaign 'few-fail' (2 failed)"));

  // max_failures: 0 never stops: every trial of the budget runs.
  const std::string all = dir.write("all.yaml", script_config("no-limit", fail, 7, ", max_failures: 0"));
  const std::string out3 = run_log(dir, {"run", all, "--db", dir.file("all.db")}, "all.log", &code);
  CHECK_MESSAGE(code == 1, out3);
  CHECK(read_trials(dir.file("all.db")).size() == 7);
}

// A diverged training (its objective NaN) ran and reported: its parameters failed, not the
// trainer, so it counts a quarter towards max_failures (a wide learning-rate range can diverge in
// most of the space: 2 campaigns in 12 stopped after their first 5 trials). A program that reports
// NaN whatever its parameters is still stopped, after 20 of them. A trial that reported a value
// first and diverged later counts the same.
TEST_CASE("diverged trials count a quarter towards max_failures: 20 of them stop a campaign, not 5") {
  TempDir dir;
  const std::string nan = dir.write("nan.sh", "echo 'hpctune-report {\"step\": 1, \"val_accuracy\": 0.5}'\n"
                                               "echo 'hpctune-report {\"step\": 2, \"val_accuracy\": NaN}'\n");
  int code = 0;
  const std::string cfg = dir.write("nan.yaml", script_config("all-nan", nan, 40));
  const std::string out = run_log(dir, {"run", cfg, "--db", dir.file("nan.db")}, "nan.log", &code);
  CHECK_MESSAGE(code == 1, out);
  CHECK_MESSAGE(contains(out, "20 trials failed before any succeeded (20 of them diverged, each counted a quarter) "
                              "(search.max_failures = 5)"), out);
  CHECK(contains(out, "was NaN: its training diverged"));
  const auto trials = read_trials(dir.file("nan.db"));
  CHECK(trials.size() >= 20);
  CHECK(trials.size() <= 22);
}

// A warning of the master's start (here: a hard limit of open files below what 9 groups may need) is
// logged and recorded, so `hpctune status` shows it after the run, not only the run's log.
TEST_CASE("the master's start-up warnings are recorded: status shows the open-files limit after the run") {
  TempDir dir;
  const std::string cfg = dir.write("nofile.yaml",
                                    "name: nofile\nobjective: {metric: value, mode: min}\n"
                                    "search: {algorithm: random, max_trials: 9}\n"
                                    "space:\n  x1: {type: float, low: -5, high: 10}\n  x2: {type: float, low: 0, high: 15}\n"
                                    "trainer: {kind: function, name: branin}\nresources: {groups: 9, threads: 1}\n");
  const std::string db = dir.file("nofile.db");
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", "ulimit -Sn 80 && ulimit -Hn 80 && exec \"$0\" \"$@\"", HPCTUNE_BINARY, "run", cfg, "--db", db};
  o.stdout_path = dir.file("run.log");
  o.stderr_path = "=stdout";
  auto child = ChildProcess::spawn(o);
  REQUIRE(child.ok());
  auto status = child->wait_for(std::chrono::seconds(60));
  REQUIRE(status.has_value());
  const std::string log = read_file(dir.file("run.log"));
  REQUIRE_MESSAGE(status->code == 0, log);
  const std::string said = "the limit of open files is 80, below the 82 that 9 trainer groups may need";
  CHECK_MESSAGE(contains(log, "warning: " + said), log);
  int code = 0;
  const std::string out = run_log(dir, {"status", db}, "status.log", &code);
  CHECK(code == 0);
  CHECK_MESSAGE(contains(out, "warning    " + said), out);
}

TEST_CASE("a metric name the trainer never reports: each failure names the metrics it did report") {
  TempDir dir;
  const std::string script =
      dir.write("report.sh", "echo \"hpctune-report {\\\"step\\\": 1, \\\"val_accuracy\\\": $1, \\\"val_loss\\\": 0.5}\"\n");
  const std::string cfg =
      dir.write("wrong.yaml", script_config("wrong-metric", script, 8, "", "objective: {metric: val_acc, mode: max}\n"));
  int code = 0;
  const std::string out = run_log(dir, {"run", cfg, "--db", dir.file("w.db")}, "w.log", &code);
  CHECK_MESSAGE(code == 1, out);
  CHECK(contains(out, "trial 1 failed: the trial reported no 'val_acc' metric (it reported: "));
  CHECK(contains(out, "val_accuracy, val_loss)"));
  CHECK(contains(out, "search.max_failures"));
  CHECK(read_trials(dir.file("w.db")).size() < 8);
  CHECK_FALSE(contains(out, "no report reached the master"));  // it reported, under another name

  // A program whose reports never reached the master (printed on standard error here) is told where they go.
  const std::string silent = dir.write("silent.sh", "echo \"hpctune-report {\\\"step\\\": 1, \\\"val_accuracy\\\": $1}\" >&2\n");
  const std::string cfg2 = dir.write("silent.yaml", script_config("silent", silent, 2));
  const std::string out2 = run_log(dir, {"run", cfg2, "--db", dir.file("s.db")}, "s.log", &code);
  CHECK_MESSAGE(code == 1, out2);
  CHECK_MESSAGE(contains(out2, "no report reached the master while it ran: a program prints 'hpctune-report {json}' "
                               "lines on standard output"), out2);

  // Python's json.dumps of a diverged loss (NaN): read, and the failure says what it was.
  const std::string nan = dir.write("nan.sh", "echo 'hpctune-report {\"step\": 4, \"val_accuracy\": NaN}'\n");
  const std::string out3 = run_log(dir, {"run", dir.write("nan.yaml", script_config("nan", nan, 2)), "--db", dir.file("n.db")},
                                   "n.log", &code);
  CHECK_MESSAGE(code == 1, out3);
  CHECK_MESSAGE(contains(out3, "the trial's last 'val_accuracy' (step 4) was NaN: its training diverged"), out3);
}

// --- item 21: running from the start --------------------------------------------------------------

TEST_CASE("a trial is running from its start, before its first report, and its seconds count from there") {
  TempDir dir;
  // 1.2 s of work before the first report.
  const std::string script = dir.write(
      "slow.sh", "sleep 1.2\necho \"hpctune-report {\\\"step\\\": 1, \\\"val_accuracy\\\": $1}\"\nsleep 0.1\n");
  std::string cfg_text = script_config("slow-start", script, 1);
  cfg_text.replace(cfg_text.find("groups: 2"), 9, "groups: 1");
  const std::string cfg = dir.write("slow.yaml", cfg_text);
  const std::string db = dir.file("slow.db");
  ChildProcess run = start_hpctune({"run", cfg, "--db", db}, dir.file("slow.log"));
  // Running (not `assigned`) while the program has reported nothing yet.
  bool running_before_report = false;
  wait_until(
      [&] {
        auto t = read_trials(db);
        if (t.size() == 1 && t[0].state == store::TrialState::kRunning && t[0].step == 0) running_before_report = true;
        return running_before_report || (t.size() == 1 && store::is_final(t[0].state));
      },
      std::chrono::seconds(20));
  CHECK(running_before_report);
  auto status = run.wait_for(std::chrono::seconds(30));
  REQUIRE(status.has_value());
  REQUIRE_MESSAGE(status->success(), read_file(dir.file("slow.log")));
  auto trials = read_trials(db);
  REQUIRE(trials.size() == 1);
  CHECK(trials[0].started_at > 0);
  CHECK(trials[0].finished_at - trials[0].started_at >= 1.2);  // not 0.1 (from the first report)
  int code = 0;
  const json j = json::parse(run_log(dir, {"trials", db, "--format", "json"}, "t.json", &code));
  CHECK(j[0]["seconds"].get<double>() >= 1.2);
}

// --- item 25: extending a finished campaign -------------------------------------------------------

TEST_CASE("resume --max-trials extends a completed campaign; the new budget is kept for a later resume") {
  TempDir dir;
  const std::string cfg = dir.write("c.yaml", sleep_config("extend", 3, 0.01, 2, 1));
  const std::string db = dir.file("e.db");
  int code = 0;
  std::string out = run_log(dir, {"run", cfg, "--db", db}, "run.log", &code);
  REQUIRE_MESSAGE(code == 0, out);
  REQUIRE(read_trials(db).size() == 3);

  out = run_log(dir, {"run", cfg, "--db", db}, "again.log", &code);
  CHECK(code == 2);
  CHECK_MESSAGE(contains(out, "hpctune resume " + db + " --max-trials N"), out);
  out = run_log(dir, {"resume", db}, "plain.log", &code);
  CHECK(code == 2);
  CHECK_MESSAGE(contains(out, "already completed (3 trials); extend it with `hpctune resume " + db + " --max-trials N`"),
                out);
  out = run_log(dir, {"resume", db, "--max-trials", "3"}, "small.log", &code);
  CHECK(code == 2);
  CHECK_MESSAGE(contains(out, "already has 3 trials; give a larger budget (at least 4)"), out);

  // Extend to 6, with the master killed as the first new trial's result arrives...
  out = run_log(dir, {"resume", db, "--max-trials", "6", "--failpoint", "after-result"}, "killed.log", &code);
  CHECK(code == -SIGKILL);
  CHECK(read_trials(db).size() == 4);
  // ...then a plain resume runs to the new budget, not the config's 3.
  out = run_log(dir, {"resume", db}, "resume.log", &code);
  REQUIRE_MESSAGE(code == 0, out);
  auto trials = read_trials(db);
  CHECK(trials.size() == 6);
  for (const auto& t : trials) CHECK(t.state == store::TrialState::kDone);
  // Without early stopping, resume has no stopper to rebuild and says nothing about one (item 30).
  CHECK_FALSE(contains(out, "early stopping: replayed"));
  auto s = store::Store::open_readonly(db);
  REQUIRE(s.ok());
  auto c = (*s)->load_campaign();
  REQUIRE((c.ok() && *c));
  CHECK((*c)->state == "completed");
  CHECK((*c)->config_json["search"]["max_trials"].get<int64_t>() == 6);
}

// --- item 28: one trial, and everything in export ----------------------------------------------------

TEST_CASE("hpctune trial shows a trial's parameters, curve, attempts and log tail; export --format json has them too") {
  TempDir dir;
  const std::string script = dir.write("curve.sh",
                                       "echo 'a line of my own log'\n"
                                       "for s in 1 2 3; do echo \"hpctune-report {\\\"step\\\": $s, \\\"val_accuracy\\\": 0.$s}\"; done\n");
  const std::string cfg = dir.write("c.yaml", script_config("one-trial", script, 2));
  const std::string db = dir.file("t.db");
  int code = 0;
  std::string out = run_log(dir, {"run", cfg, "--db", db}, "run.log", &code);
  REQUIRE_MESSAGE(code == 0, out);

  out = run_log(dir, {"trial", db, "1"}, "trial.txt", &code);
  REQUIRE_MESSAGE(code == 0, out);
  for (const char* part : {"trial 1 of campaign 'one-trial'", "Parameters:", "Metrics by step:", "Attempts:",
                           "Artifacts:", "stdout.log (last 20 lines)", "a line of my own log"}) {
    CHECK_MESSAGE(contains(out, part), part << " missing from\n" << out);
  }
  const json j = json::parse(run_log(dir, {"trial", db, "2", "--format", "json"}, "trial.json", &code));
  REQUIRE(code == 0);
  CHECK(j["trial"].get<int64_t>() == 2);
  REQUIRE(j["metrics_by_step"].size() == 3);
  CHECK(j["metrics_by_step"][2]["step"].get<int64_t>() == 3);
  CHECK(j["metrics_by_step"][2]["metrics"]["val_accuracy"].get<double>() == doctest::Approx(0.3));
  REQUIRE(j["attempts"].size() == 1);
  CHECK(j["attempts"][0]["state"] == "done");
  bool log_seen = false;
  for (const auto& l : j["logs"]) log_seen = log_seen || contains(l["tail"].get<std::string>(), "a line of my own log");
  CHECK(log_seen);

  out = run_log(dir, {"trial", db, "9"}, "missing.txt", &code);
  CHECK(code == 2);
  CHECK(contains(out, "has no trial 9"));

  // export: the format from the extension; each trial with its curve and events.
  out = run_log(dir, {"export", db, "-o", dir.file("all.json")}, "export.log", &code);
  REQUIRE_MESSAGE(code == 0, out);
  const json doc = parse_json_file(dir.file("all.json"));
  REQUIRE(doc["trials"].size() == 2);
  CHECK(doc["trials"][0]["metrics_by_step"].size() == 3);
  CHECK(doc["trials"][0].contains("events"));
  CHECK(doc["events"].is_array());
  CHECK_FALSE(doc["events"].empty());  // campaign_started, ...
  CHECK(run_log(dir, {"export", db, "-o", dir.file("all.csv")}, "csv.log", &code).find("wrote") != std::string::npos);
  CHECK(code == 0);
  CHECK(read_file(dir.file("all.csv")).rfind("trial,", 0) == 0);
  out = run_log(dir, {"export", db, "-o", dir.file("all.txt")}, "txt.log", &code);
  CHECK(code == 2);
  CHECK(contains(out, "give --format csv or json"));
  CHECK_FALSE(std::filesystem::exists(dir.file("all.txt")));
}

// --- issue 36, items 1 and 3: stages and lineage in every view ---------------------------------------

namespace {

// The lines of `text` from the one that is `title` to the next empty line ("" when none is).
std::string text_section(const std::string& text, const std::string& title) {
  const size_t at = text.find("\n" + title + "\n");
  if (at == std::string::npos) return "";
  const size_t end = text.find("\n\n", at + 1);
  return text.substr(at + 1, end == std::string::npos ? std::string::npos : end - at - 1);
}

}  // namespace

TEST_CASE("hpctune trial: a log with NUL, control and non-UTF-8 bytes is shown whole, escaped; its JSON parses") {
  // Before, the text tail stopped at the first NUL byte (the lines after it were lost) and
  // `--format json` failed with "internal error: ... invalid UTF-8 byte".
  TempDir dir;
  const std::string script = dir.write("junk.sh",
                                       "printf 'before\\n'\n"
                                       "printf 'nul:\\000:after nul \\033[2J esc \\377\\376 bad\\n'\n"
                                       "printf 'last line\\n'\n"
                                       "echo \"hpctune-report {\\\"step\\\": 1, \\\"val_accuracy\\\": 0.5}\"\n");
  const std::string cfg = dir.write("c.yaml", script_config("junk", script, 1));
  const std::string db = dir.file("t.db");
  int code = 0;
  std::string out = run_log(dir, {"run", cfg, "--db", db}, "run.log", &code);
  REQUIRE_MESSAGE(code == 0, out);
  out = run_log(dir, {"trial", db, "1"}, "trial.txt", &code);
  CHECK_MESSAGE(code == 0, out);
  CHECK_MESSAGE(contains(out, "before\nnul:\\x00:after nul \\x1b[2J esc \\xff\\xfe bad\nlast line\n"), out);
  CHECK(out.find('\0') == std::string::npos);
  CHECK(out.find('\x1b') == std::string::npos);
  out = run_log(dir, {"trial", db, "1", "--format", "json"}, "trial.json", &code);
  REQUIRE_MESSAGE(code == 0, out);
  const json j = json::parse(out);
  bool seen = false;
  for (const auto& l : j["logs"]) {
    seen = seen || contains(l["tail"].get<std::string>(),
                            std::string("nul:") + '\0' + ":after nul \x1b[2J esc \xEF\xBF\xBD\xEF\xBF\xBD bad\nlast line");
  }
  CHECK_MESSAGE(seen, out);
}

TEST_CASE("trials, trial and export: each trial's stage, --stage, and lineage and run settings apart from parameters") {
  TempDir dir;
  const std::string db = dir.file("lineage.db");
  const auto ids = write_lineage_campaign(db);
  int code = 0;

  // The table: a stage column; the searched values only, the source trial under `from`.
  std::string out = run_log(dir, {"trials", db}, "trials.txt", &code);
  REQUIRE_MESSAGE(code == 0, out);
  const std::string header = out.substr(0, out.find('\n'));
  for (const char* column : {"trial", "stage", "lr", "momentum", "from"}) {
    CHECK_MESSAGE(contains(header, column), column << " missing from\n" << out);
  }
  for (const char* hidden : {"hpctune_source", "max_step", ids.checkpoint.c_str()}) {
    CHECK_MESSAGE(!contains(out, hidden), hidden << " shown in\n" << out);
  }
  for (const char* stage : {" tune ", " move ", " pop "}) CHECK_MESSAGE(contains(out, stage), stage << "\n" << out);

  // --stage: only that stage's trials, in every format.
  out = run_log(dir, {"trials", db, "--stage", "move"}, "move.txt", &code);
  REQUIRE_MESSAGE(code == 0, out);
  CHECK(contains(out, " move "));
  CHECK(!contains(out, " tune "));
  CHECK(!contains(out, " pop "));
  json list = json::parse(run_log(dir, {"trials", db, "--stage", "pop", "--format", "json"}, "pop.json", &code));
  REQUIRE(code == 0);
  REQUIRE(list.size() == 1);
  CHECK(list[0]["trial"] == ids.member);
  CHECK(list[0]["stage"] == "pop");
  CHECK(list[0]["params"] == json{{"lr", 0.05}, {"momentum", 0.9}});
  CHECK(list[0]["run_settings"] == json{{"max_step", 4}});
  out = run_log(dir, {"trials", db, "--stage", "tune", "--format", "csv"}, "tune.csv", &code);
  REQUIRE(code == 0);
  CHECK(std::count(out.begin(), out.end(), '\n') == 3);  // the header and two trials
  CHECK(contains(out, ",tune,"));
  // An unknown stage: exit 2, naming the stages there are.
  out = run_log(dir, {"trials", db, "--stage", "nope"}, "nope.txt", &code);
  CHECK(code == 2);
  CHECK_MESSAGE(contains(out, "no stage 'nope' (its stages: tune, move, pop)"), out);
  out = run_log(dir, {"trials", "--help"}, "help.txt", &code);
  CHECK(code == 0);
  CHECK_MESSAGE(contains(out, "--stage"), out);

  // trial: the parameters, then the lineage and the run settings, each in its own section.
  out = run_log(dir, {"trial", db, std::to_string(ids.target)}, "target.txt", &code);
  REQUIRE_MESSAGE(code == 0, out);
  const std::string params = text_section(out, "Parameters:");
  CHECK_MESSAGE(contains(params, "lr"), out);
  CHECK_MESSAGE(!contains(params, "hpctune_source"), out);
  CHECK_MESSAGE(!contains(params, "source_checkpoint"), out);
  const std::string lineage = text_section(out, "Lineage:");
  CHECK_MESSAGE(contains(lineage, "source_checkpoint"), out);
  CHECK_MESSAGE(contains(lineage, ids.checkpoint), out);
  CHECK_MESSAGE(contains(lineage, "source_trial"), out);
  CHECK_MESSAGE(contains(lineage, "transfer_source"), out);
  CHECK_MESSAGE(contains(out, "stage        move"), out);
  out = run_log(dir, {"trial", db, std::to_string(ids.member)}, "member.txt", &code);
  REQUIRE_MESSAGE(code == 0, out);
  CHECK_MESSAGE(!contains(text_section(out, "Parameters:"), "max_step"), out);
  CHECK_MESSAGE(contains(text_section(out, "Run settings:"), "max_step"), out);
  CHECK_MESSAGE(contains(text_section(out, "Lineage:"), "pbt_exploit"), out);
  const json member = json::parse(run_log(dir, {"trial", db, std::to_string(ids.member), "--format", "json"}, "m.json", &code));
  REQUIRE(code == 0);
  CHECK(member["stage"] == "pop");
  CHECK(!member["params"].contains("max_step"));
  CHECK(member["run_settings"]["max_step"] == 4);
  CHECK(member["lineage"]["parents"] == json::array({{{"trial", ids.tune_a}, {"relation", "pbt_exploit"}}}));

  // export: JSON and CSV carry each trial's stage, and its lineage apart from its parameters.
  out = run_log(dir, {"export", db, "--format", "json"}, "export.json", &code);
  REQUIRE(code == 0);
  const json doc = json::parse(out);
  REQUIRE(doc["trials"].size() == 4);
  std::map<int64_t, json> by_id;
  for (const auto& t : doc["trials"]) by_id[t["trial"].get<int64_t>()] = t;
  CHECK(by_id[ids.tune_a]["stage"] == "tune");
  CHECK(by_id[ids.target]["stage"] == "move");
  CHECK(by_id[ids.member]["stage"] == "pop");
  CHECK(by_id[ids.target]["params"] == json{{"lr", 0.2}});
  CHECK(by_id[ids.target]["lineage"] == json{{"source_checkpoint", ids.checkpoint}, {"source_trial", ids.tune_b}});
  out = run_log(dir, {"export", db, "--format", "csv"}, "export.csv", &code);
  REQUIRE(code == 0);
  const std::string csv_header = out.substr(0, out.find('\n'));
  CHECK_MESSAGE(contains(csv_header, ",stage,"), csv_header);
  CHECK_MESSAGE(contains(csv_header, ",lineage.source_checkpoint,lineage.source_trial,run_settings.max_step,"), csv_header);
  CHECK_MESSAGE(!contains(csv_header, "hpctune_source"), csv_header);
  CHECK_MESSAGE(!contains(csv_header, "params.max_step"), csv_header);
  CHECK_MESSAGE(contains(out, "," + ids.checkpoint + ","), out);
}

// --- item 29: several objectives -------------------------------------------------------------------

TEST_CASE("several objectives: the closing table and `trials` show each one and the Pareto mark") {
  TempDir dir;
  const std::string script =
      dir.write("mo.sh", "echo \"hpctune-report {\\\"step\\\": 1, \\\"gain\\\": $1, \\\"cost\\\": $2}\"\n");
  const std::string cfg = dir.write(
      "mo.yaml", script_config("two-objectives", script, 6, "",
                               "objectives:\n  - {metric: gain, mode: max}\n  - {metric: cost, mode: min}\n",
                               "  x: {type: float, low: 0.1, high: 0.9}\n  y: {type: float, low: 0.1, high: 0.9}\n",
                               "{x} {y}"));
  const std::string db = dir.file("mo.db");
  int code = 0;
  const std::string out = run_log(dir, {"run", cfg, "--db", db}, "run.log", &code);
  REQUIRE_MESSAGE(code == 0, out);
  auto header_of = [](const std::string& text) {
    const auto at = text.find("trial  state");
    return at == std::string::npos ? std::string() : text.substr(at, text.find('\n', at) - at);
  };
  const std::string closing = header_of(out);
  CHECK_MESSAGE(contains(closing, "gain"), out);
  CHECK_MESSAGE(contains(closing, "cost"), out);
  CHECK_MESSAGE(contains(closing, "pareto"), out);
  CHECK(contains(out, "Pareto front: "));
  const std::string table = run_log(dir, {"trials", db}, "trials.txt", &code);
  REQUIRE(code == 0);
  CHECK(contains(header_of(table), "gain"));
  CHECK(contains(header_of(table), "cost"));
  CHECK(contains(header_of(table), "pareto"));
  CHECK(contains(table, "*"));

  // status --format json: the front's trial ids, the same as the trials marked in `trials`.
  const json st = json::parse(run_log(dir, {"status", db, "--format", "json"}, "status.json", &code));
  REQUIRE(code == 0);
  const json trials = json::parse(run_log(dir, {"trials", db, "--format", "json"}, "trials.json", &code));
  REQUIRE(code == 0);
  std::vector<int64_t> marked;
  for (const auto& t : trials) {
    if (t["pareto"].get<bool>()) marked.push_back(t["trial"].get<int64_t>());
  }
  std::sort(marked.begin(), marked.end());
  REQUIRE(st.contains("pareto_front"));
  CHECK_FALSE(marked.empty());
  CHECK(st["pareto_front"].get<std::vector<int64_t>>() == marked);
  REQUIRE(st["campaign"]["objectives"].size() == 2);
  CHECK(st["campaign"]["objectives"][1]["metric"] == "cost");
  CHECK(st["campaign"]["objectives"][1]["mode"] == "min");
  CHECK(st["best"]["metric"] == "gain");
  CHECK(st["best"]["trial"] == trials[0]["trial"]);  // ranked by the first objective
}

// --- issue 10: status --format json ------------------------------------------------------------------

namespace {

// `hpctune status DB --format json`, parsed (REQUIREs exit 0 and a JSON document).
json status_json_of(const TempDir& dir, const std::string& db, const std::string& name) {
  int code = 0;
  const std::string out = run_log(dir, {"status", db, "--format", "json"}, name, &code);
  REQUIRE_MESSAGE(code == 0, out);
  auto j = json::parse(out, nullptr, /*allow_exceptions=*/false);
  REQUIRE_MESSAGE(!j.is_discarded(), out);
  return j;
}

// Every trial state name the store knows, with its count in the database (zeros included).
std::map<std::string, int64_t> store_counts(const std::string& db) {
  auto s = store::Store::open_readonly(db);
  REQUIRE(s.ok());
  auto c = (*s)->load_campaign();
  REQUIRE((c.ok() && *c));
  auto counts = (*s)->count_by_state((*c)->id);
  REQUIRE(counts.ok());
  return *counts;
}

// Lost attempts in the database, read attempt by attempt.
int64_t store_lost_attempts(const std::string& db) {
  auto s = store::Store::open_readonly(db);
  REQUIRE(s.ok());
  int64_t lost = 0;
  for (const auto& t : read_trials(db)) {
    auto attempts = (*s)->attempts(t.id);
    REQUIRE(attempts.ok());
    for (const auto& a : *attempts) lost += a["state"] == "lost";
  }
  return lost;
}

void check_counts(const json& st, const std::map<std::string, int64_t>& expected) {
  const auto& by_state = st["trials"]["by_state"];
  CHECK(by_state.size() == expected.size());
  int64_t total = 0;
  for (const auto& [state, n] : expected) {
    CHECK_MESSAGE(by_state.contains(state), state);
    if (by_state.contains(state)) CHECK_MESSAGE(by_state[state].get<int64_t>() == n, state);
    total += n;
  }
  CHECK(st["trials"]["total"].get<int64_t>() == total);
}

}  // namespace

TEST_CASE("status --format json: a finished campaign's counts, stage and best trial; yaml is a usage error") {
  TempDir dir;
  const std::string script = dir.write("s.sh", "echo \"hpctune-report {\\\"step\\\": 1, \\\"val_accuracy\\\": $1}\"\n");
  const std::string cfg = dir.write("c.yaml", script_config("status-json", script, 5));
  const std::string db = dir.file("s.db");
  int code = 0;
  std::string out = run_log(dir, {"run", cfg, "--db", db}, "run.log", &code);
  REQUIRE_MESSAGE(code == 0, out);

  const json st = status_json_of(dir, db, "status.json");
  CHECK(st["campaign"]["name"] == "status-json");
  CHECK(st["campaign"]["state"] == "completed");
  CHECK(st["campaign"]["seed"].get<uint64_t>() == 3);
  CHECK(st["campaign"]["algorithm"] == "random");
  CHECK(st["campaign"]["max_trials"].get<int64_t>() == 5);
  CHECK(st["campaign"]["created_at"].is_number());
  CHECK(st["campaign"]["finished_at"].get<double>() >= st["campaign"]["created_at"].get<double>());
  CHECK(st["campaign"]["elapsed_s"].get<double>() ==
        doctest::Approx(st["campaign"]["finished_at"].get<double>() - st["campaign"]["created_at"].get<double>()));
  REQUIRE(st["stages"].size() == 1);
  CHECK(st["stages"][0]["kind"] == "search");
  CHECK(st["stages"][0]["name"] == "search");
  CHECK(st["stages"][0]["state"] == "completed");  // ended with the campaign
  CHECK(st["stages"][0]["id"].is_number_integer());
  CHECK(st["stages"][0]["finished_at"].is_number());
  // Every state the store knows, zeros included.
  const auto counts = store_counts(db);
  CHECK(counts.size() == std::size(store::kTrialStates));
  for (const auto state : store::kTrialStates) CHECK(st["trials"]["by_state"].contains(store::to_string(state)));
  CHECK(counts.at("done") == 5);
  check_counts(st, counts);
  CHECK(st["attempts_lost"].get<int64_t>() == 0);
  // The best trial is the first of `trials --format json`.
  const json trials = json::parse(run_log(dir, {"trials", db, "--format", "json"}, "trials.json", &code));
  REQUIRE(code == 0);
  REQUIRE(st["best"].is_object());
  CHECK(st["best"]["trial"] == trials[0]["trial"]);
  CHECK(st["best"]["objective"] == trials[0]["objective"]);
  CHECK(st["best"]["params"] == trials[0]["params"]);
  CHECK(st["best"]["metrics"] == trials[0]["metrics"]);
  CHECK(st["best"]["metric"] == "val_accuracy");
  for (const auto& t : trials) CHECK(t["objective"].get<double>() <= st["best"]["objective"].get<double>());
  CHECK_FALSE(st.contains("pareto_front"));  // one objective

  // The table stays the default.
  out = run_log(dir, {"status", db}, "status.txt", &code);
  CHECK(code == 0);
  CHECK(contains(out, "Trials by state:"));
  out = run_log(dir, {"status", db, "--format", "table"}, "status2.txt", &code);
  CHECK(code == 0);
  CHECK(contains(out, "Best trial"));
  out = run_log(dir, {"status", db, "--format", "yaml"}, "yaml.txt", &code);
  CHECK(code == 2);
  CHECK_MESSAGE(contains(out, "--format"), out);
  CHECK_MESSAGE(contains(out, "yaml"), out);
  CHECK_FALSE(contains(out, "\"campaign\""));  // no JSON on a usage error
}

TEST_CASE("status --format json: a campaign whose master died is interrupted; after resume, its lost attempts") {
  TempDir dir;
  const std::string cfg = dir.write("c.yaml", sleep_config("status-live", 4, 0.5, 1, 2));
  const std::string db = dir.file("l.db");
  int code = 0;
  // The master is killed as the third result arrives (before it is recorded; the first two, of
  // the first pair of trials, are): the campaign stays `running` in the store.
  std::string out = run_log(dir, {"run", cfg, "--db", db, "--failpoint", "after-result", "--failpoint-hit", "3"},
                            "killed.log", &code);
  REQUIRE_MESSAGE(code == -SIGKILL, out);
  const json st = status_json_of(dir, db, "running.json");
  // The store still says running; status tells that its master is gone (issue 36, item 2).
  CHECK(st["campaign"]["state"] == "interrupted");
  CHECK(st["campaign"]["recorded_state"] == "running");
  CHECK(st["campaign"]["master"]["alive"] == false);
  CHECK(st["campaign"]["master"]["resume"] == "hpctune resume " + db);
  CHECK(st["campaign"]["finished_at"].is_null());
  CHECK(st["campaign"]["elapsed_s"].get<double>() > 0);
  REQUIRE(st["stages"].size() == 1);
  CHECK(st["stages"][0]["state"] == "interrupted");  // as its campaign: the store says running
  CHECK(st["stages"][0]["recorded_state"] == "running");
  CHECK(st["stages"][0]["finished_at"].is_null());
  const auto counts = store_counts(db);
  check_counts(st, counts);
  CHECK(counts.at("done") >= 1);
  CHECK(counts.at("done") <= 2);
  REQUIRE(st["best"].is_object());  // the best of the recorded results
  CHECK(st["best"]["objective"].is_number());
  const int64_t in_flight = counts.at("assigned") + counts.at("running");

  out = run_log(dir, {"resume", db}, "resume.log", &code);
  REQUIRE_MESSAGE(code == 0, out);
  const json done = status_json_of(dir, db, "resumed.json");
  CHECK(done["campaign"]["state"] == "completed");
  CHECK(done["stages"][0]["state"] == "completed");
  check_counts(done, store_counts(db));
  CHECK(done["trials"]["by_state"]["done"].get<int64_t>() == 4);
  // A trial the dead master had handed out was closed as lost (the master restarted) on resume.
  CHECK(done["attempts_lost"].get<int64_t>() == store_lost_attempts(db));
  CHECK(done["attempts_lost"].get<int64_t>() >= in_flight);
  if (in_flight > 0) CHECK(done["attempts_lost"].get<int64_t>() > 0);
}

// Issue 36, item 2: a master SIGKILLed leaves its campaign `running` in the store; `status` tells
// it from a live one by the master lock (free once the process is gone) and the heartbeat, says
// interrupted and names the resume, in text and JSON, and never writes to the store.
TEST_CASE("status of a SIGKILLed master says interrupted and names resume; a live one says running") {
  TempDir dir;
  const std::string cfg = dir.write("c.yaml", sleep_config("gone", 4, 5.0, 5, 1));
  const std::string db = dir.file("gone.db");
  ChildProcess run = start_hpctune({"run", cfg, "--db", db}, dir.file("run.log"));
  REQUIRE(wait_for_running_trial(db, std::chrono::seconds(20)));
  int code = 0;
  std::string text = run_log(dir, {"status", db}, "live.log", &code);
  REQUIRE_MESSAGE(code == 0, text);
  CHECK_MESSAGE(contains(text, "state      running\n"), text);
  json st = json::parse(run_log(dir, {"status", db, "--format", "json"}, "live.json", &code));
  REQUIRE(code == 0);
  CHECK(st["campaign"]["state"] == "running");
  CHECK(st["campaign"]["recorded_state"] == "running");
  CHECK(st["campaign"]["master"]["alive"] == true);
  CHECK(st["campaign"]["master"]["pid"] == run.pid());
  CHECK(st["campaign"]["master"]["heartbeat_at"].is_number());  // written with the master's first turn
  CHECK(st["campaign"]["master"]["resume"].is_null());

  REQUIRE(kill(run.pid(), SIGKILL) == 0);
  auto killed = run.wait_for(std::chrono::seconds(30));
  REQUIRE(killed.has_value());
  CHECK(killed->signaled);
  text = run_log(dir, {"status", db}, "gone.log", &code);
  REQUIRE_MESSAGE(code == 0, text);
  CHECK_MESSAGE(contains(text, "state      interrupted (the master is gone: last heartbeat "), text);
  CHECK_MESSAGE(contains(text, " ago; resume with: hpctune resume " + db + ")\n"), text);
  // The trial it was running (one group: 1, or 0 between two trials): in flight when it died,
  // queued again by the resume.
  const int64_t in_flight = store_counts(db).at("assigned") + store_counts(db).at("running");
  CHECK(in_flight <= 1);
  CHECK_MESSAGE(contains(text, "(the 1 assigned or running were in flight when the master died; hpctune resume " + db +
                                   " queues them again,\nnot counted against max_attempts)\n") == (in_flight == 1),
                text);
  st = json::parse(run_log(dir, {"status", db, "--format", "json"}, "gone.json", &code));
  REQUIRE(code == 0);
  CHECK(st["campaign"]["state"] == "interrupted");
  CHECK(st["campaign"]["recorded_state"] == "running");
  CHECK(st["campaign"]["master"]["alive"] == false);
  CHECK(st["campaign"]["master"]["heartbeat_age_s"].get<double>() >= 0);
  CHECK(st["campaign"]["master"]["resume"] == "hpctune resume " + db);
  // status never writes: the store still records the campaign running, for `resume` to pick up.
  auto ro = store::Store::open_readonly(db);
  REQUIRE(ro.ok());
  auto c = (*ro)->load_campaign();
  REQUIRE((c.ok() && *c));
  CHECK((*c)->state == "running");
  check_no_orphans(db);
}

// --- item 30: rough edges ----------------------------------------------------------------------------

// --- issue 10: the master's bind address --------------------------------------------------------------

TEST_CASE("--bind and resources.bind: the master listens there and the workers still connect; a network address uses CURVE") {
  TempDir dir;
  int code = 0;
  const std::string cfg = dir.write("c.yaml", sleep_config("bind", 2, 0.01, 1, 2));
  // Every interface: the run works, with CURVE (issue 13), so nothing to warn about.
  std::string out = run_log(dir, {"run", cfg, "--db", dir.file("any.db"), "--bind", "tcp://0.0.0.0:*"}, "any.log", &code);
  REQUIRE_MESSAGE(code == 0, out);
  CHECK_MESSAGE(contains(out, "master at tcp://0.0.0.0:"), out);
  CHECK(contains(out, "transport: CURVE encryption"));
  CHECK_FALSE(contains(out, "warning: the master listens"));
  auto trials = read_trials(dir.file("any.db"));
  CHECK(trials.size() == 2);
  for (const auto& t : trials) CHECK(t.state == store::TrialState::kDone);

  // The default: a private ipc socket (issue 21), no warning.
  out = run_log(dir, {"run", cfg, "--db", dir.file("lo.db")}, "lo.log", &code);
  REQUIRE_MESSAGE(code == 0, out);
  CHECK(contains(out, "master at ipc:///"));
  CHECK_FALSE(contains(out, "warning: the master listens"));

  // resources.bind in the config: a Unix socket; then resume --bind moves the master to loopback TCP.
  std::string text = sleep_config("bind-ipc", 2, 0.01, 1, 2);
  const std::string sock = "ipc://" + dir.file("master.sock");
  text.replace(text.find("resources: {"), 12, "resources: {bind: \"" + sock + "\", ");
  const std::string ipc_cfg = dir.write("ipc.yaml", text);
  out = run_log(dir, {"run", ipc_cfg, "--db", dir.file("ipc.db")}, "ipc.log", &code);
  REQUIRE_MESSAGE(code == 0, out);
  CHECK_MESSAGE(contains(out, "master at " + sock), out);
  CHECK_FALSE(contains(out, "warning: the master listens"));
  out = run_log(dir, {"resume", dir.file("ipc.db"), "--max-trials", "4", "--bind", "tcp://127.0.0.1:*"}, "r.log", &code);
  REQUIRE_MESSAGE(code == 0, out);
  CHECK(contains(out, "master at tcp://127.0.0.1:"));
  CHECK(read_trials(dir.file("ipc.db")).size() == 4);

  // A bad address is a usage error before anything runs.
  out = run_log(dir, {"run", cfg, "--db", dir.file("x.db"), "--bind", "tcp://127.0.0.1:0"}, "bad.log", &code);
  CHECK(code == 2);
  CHECK_MESSAGE(contains(out, "--bind: port '0' is not 1..65535 or *"), out);
  CHECK_FALSE(std::filesystem::exists(dir.file("x.db")));
  out = run_log(dir, {"resume", dir.file("ipc.db"), "--bind", "inproc://x"}, "rbad.log", &code);
  CHECK(code == 2);
  CHECK(contains(out, "--bind: transport 'inproc' cannot reach the workers"));
  // validate warns about a network address only with security none.
  const std::string open_cfg = dir.write("open.yaml", sleep_config("open", 1, 0.01, 1, 1));
  std::string open_text = read_file(open_cfg);
  open_text.replace(open_text.find("resources: {"), 12, "resources: {bind: \"tcp://*:*\", security: none, ");
  dir.write("open.yaml", open_text);
  out = run_log(dir, {"validate", open_cfg}, "v.log", &code);
  CHECK(code == 0);
  CHECK(contains(out, "hpctune validate: warning: the master listens on tcp://*:*"));
  // A resume listens where the campaign's stored config says, and warns the same way.
  out = run_log(dir, {"run", open_cfg, "--db", dir.file("open.db")}, "open.log", &code);
  REQUIRE_MESSAGE(code == 0, out);
  CHECK(contains(out, "hpctune run: warning: the master listens on tcp://*:*"));
  out = run_log(dir, {"resume", dir.file("open.db"), "--max-trials", "2"}, "ropen.log", &code);
  REQUIRE_MESSAGE(code == 0, out);
  CHECK(contains(out, "hpctune resume: warning: the master listens on tcp://*:*"));
  CHECK(contains(out, "master at tcp://0.0.0.0:"));
  CHECK(read_trials(dir.file("open.db")).size() == 2);
  // The default security on that address: CURVE, no warning, from validate to resume.
  open_text.replace(open_text.find("security: none, "), 16, "");
  dir.write("open.yaml", open_text);
  out = run_log(dir, {"validate", open_cfg}, "v2.log", &code);
  CHECK(code == 0);
  CHECK_FALSE(contains(out, "warning"));
  out = run_log(dir, {"run", open_cfg, "--db", dir.file("curve.db")}, "curve.log", &code);
  REQUIRE_MESSAGE(code == 0, out);
  CHECK_FALSE(contains(out, "warning"));
  out = run_log(dir, {"resume", dir.file("curve.db"), "--max-trials", "2"}, "rcurve.log", &code);
  REQUIRE_MESSAGE(code == 0, out);
  CHECK(contains(out, "transport: CURVE encryption"));
  CHECK_FALSE(contains(out, "warning"));
  CHECK(read_trials(dir.file("curve.db")).size() == 2);
}

TEST_CASE("SIGTERM exits 143 (Ctrl-C stays 130)") {
  TempDir dir;
  const std::string cfg = dir.write("c.yaml", sleep_config("term", 4, 5.0, 5, 1));
  const std::string db = dir.file("term.db");
  ChildProcess run = start_hpctune({"run", cfg, "--db", db}, dir.file("term.log"));
  REQUIRE(wait_for_running_trial(db, std::chrono::seconds(20)));
  REQUIRE(kill(run.pid(), SIGTERM) == 0);
  auto status = run.wait_for(std::chrono::seconds(30));
  REQUIRE(status.has_value());
  CHECK_MESSAGE(status->code == 143, status->describe() << "\n" << read_file(dir.file("term.log")));
  CHECK(read_trials(db)[0].state == store::TrialState::kInterrupted);

  // status --format json of the interrupted campaign: its stage is interrupted with it.
  int code = 0;
  const json st = json::parse(run_log(dir, {"status", db, "--format", "json"}, "status.json", &code));
  REQUIRE(code == 0);
  CHECK(st["campaign"]["state"] == "interrupted");
  CHECK(st["campaign"]["finished_at"].is_number());
  REQUIRE(st["stages"].size() == 1);
  CHECK(st["stages"][0]["state"] == "interrupted");
  CHECK(st["trials"]["by_state"]["interrupted"].get<int64_t>() == 1);
  CHECK(st["trials"]["total"].get<int64_t>() == 1);
  CHECK(st["best"].is_null());
}

TEST_CASE("validate: --print-reference takes no CONFIG; fixed values are not counted as searched") {
  TempDir dir;
  const std::string cfg = dir.write("c.yaml",
                                    "name: v\nobjective: {metric: value, mode: max}\nsearch: {max_trials: 2}\n"
                                    "space:\n  value: {type: float, low: 0.0, high: 1.0}\n  steps: 3\n"
                                    "trainer: {kind: sleep, seconds: 0.01, metric: value}\n");
  int code = 0;
  std::string out = run_log(dir, {"validate", cfg, "--print-reference"}, "ref.log", &code);
  CHECK(code == 2);
  CHECK(contains(out, "--print-reference takes no CONFIG"));
  out = run_log(dir, {"validate", "--print-reference"}, "ref2.log", &code);
  CHECK(code == 0);
  CHECK(contains(out, "max_failures"));
  out = run_log(dir, {"validate", cfg}, "v.log", &code);
  REQUIRE_MESSAGE(code == 0, out);
  CHECK_MESSAGE(contains(out, "1 searched parameter(s) and 1 fixed"), out);
  CHECK_MESSAGE(contains(out, "up to 2 trials, trainer sleep"), out);
  CHECK_MESSAGE(!contains(out, "stage"), out);  // a campaign without stages: no stage list
}

// Issue 36, item 5: validate names every stage with the trials it runs, as each stage kind counts
// them (a search's budget, an ensemble's retrains, a transfer's targets and baselines), and the
// campaign's total is their sum, not the first stage's budget.
TEST_CASE("validate summarises every stage with its trial count, retrains and transfer trials included") {
  TempDir dir;
  std::string y = "name: multi\nseed: 1\nobjective: {metric: val_accuracy, mode: max}\n"
                  "trainer: {kind: mlp, epochs: 1, classes: [0, 1, 2, 3, 4], max_train_samples: 400}\n"
                  "resources: {groups: 2}\nstages:\n"
                  "  - name: tune\n    kind: search\n    search: {algorithm: random, max_trials: 24}\n"
                  "    space: {lr: {type: float, low: 0.01, high: 0.3, log: true}}\n"
                  "  - {name: blend, kind: ensemble, from: tune, method: greedy, retrain: {top: 2, seeds: 3}}\n"
                  "  - {name: plain, kind: ensemble, from: tune, method: top_k}\n"
                  "  - name: move\n    kind: transfer\n    from: tune\n    classes: [5, 6, 7, 8, 9]\n"
                  "    sources: 2\n    seeds: 3\n    baseline: true\n";
  const std::string cfg = dir.write("multi.yaml", y);
  int code = 0;
  const std::string out = run_log(dir, {"validate", cfg}, "v.log", &code);
  REQUIRE_MESSAGE(code == 0, out);
  // 24 + 2 x 3 retrains + 0 + 2 sources x 3 seeds x 2 (target and baseline) = 42.
  CHECK_MESSAGE(contains(out, "up to 42 trials in all"), out);
  CHECK_MESSAGE(contains(out, "  4 stages:\n"), out);
  CHECK_MESSAGE(contains(out, "    stage 'tune' (search): up to 24 trials\n"), out);
  CHECK_MESSAGE(contains(out, "    stage 'blend' (ensemble from tune): up to 6 trials\n"), out);
  CHECK_MESSAGE(contains(out, "    stage 'plain' (ensemble from tune): no trials of its own\n"), out);
  CHECK_MESSAGE(contains(out, "    stage 'move' (transfer from tune): up to 12 trials\n"), out);
}

// --- issue 11: `hpctune schedule` and the Stages table of `status` -------------------------------------

namespace {

// A campaign written straight into `db`: a completed search stage and a pbt stage in `pbt_state`
// with `result` (no trials: these commands read the stages' rows).
void write_pbt_campaign(const std::string& db, const std::string& pbt_state, const json& result) {
  auto opened = store::Store::open(db);
  REQUIRE(opened.ok());
  auto& s = **opened;
  store::CampaignRow c;
  c.name = "pbt-cli";
  c.created_at = 1000;
  c.config_json = json{{"objective", {{"metric", "val_accuracy"}, {"mode", "max"}}}};
  auto campaign = s.create_campaign(c);
  REQUIRE(campaign.ok());
  auto search = s.create_stage(*campaign, "search", "tune", json::object(), 1000);
  REQUIRE(search.ok());
  REQUIRE(s.complete_stage(*search, json::object(), 1001).ok());
  if (pbt_state.empty()) return;
  auto pbt = s.create_stage(*campaign, "pbt", "evolve", json::object(), 1001, pbt_state == "pending" ? "pending" : "running");
  REQUIRE(pbt.ok());
  if (pbt_state == "completed") REQUIRE(s.complete_stage(*pbt, result, 1002).ok());
}

}  // namespace

// A trial of several attempts (a pbt member's intervals): `seconds` sums them, so `started` is the
// first attempt's start, not the last one's (which showed a member of 4 intervals started and
// finished in the same second, with 1.6 s of training).
TEST_CASE("hpctune trial: a trial of several attempts shows its first start and the seconds of all of them") {
  TempDir dir;
  const std::string db = dir.file("attempts.db");
  write_pbt_campaign(db, "", json::object());
  {
    auto opened = store::Store::open(db);
    REQUIRE(opened.ok());
    auto& s = **opened;
    auto campaign = s.load_campaign();
    REQUIRE(campaign.ok());
    REQUIRE(campaign->has_value());
    store::TrialRow row;
    row.campaign_id = (*campaign)->id;
    row.seq = 0;
    row.params = {{"lr", 0.1}};
    auto id = s.insert_trial(row);
    REQUIRE(id.ok());
    REQUIRE(s.mark_assigned(*id, 1, 0, 0, 2000).ok());
    REQUIRE(s.mark_running(*id, 1, 2000).ok());
    REQUIRE(s.pause_trial(*id, 1, {{"lr", 0.2}}, db + ".trials/1/pbt/000-step-2", "pbt", 2060).ok());  // 60 s
    REQUIRE(s.mark_assigned(*id, 2, 0, 0, 2100).ok());
    REQUIRE(s.mark_running(*id, 2, 2100).ok());
    REQUIRE(s.finish_trial(*id, 2, store::TrialState::kDone, {{"val_accuracy", 0.9}}, 0.9, 4, "", 2130).ok());  // 30 s
  }
  int code = 0;
  const std::string out = run_log(dir, {"trial", db, "1"}, "trial.log", &code);
  REQUIRE_MESSAGE(code == 0, out);
  CHECK_MESSAGE(contains(out, "\nstarted      " + report::time_text(2000) + "\n"), out);
  CHECK_MESSAGE(contains(out, "\nfinished     " + report::time_text(2130) + "\n"), out);
  CHECK_MESSAGE(contains(out, "\nseconds      90.0 (2 attempts)\n"), out);
}

TEST_CASE("schedule: a pbt stage's best schedule in three formats; exit 2 for usage, 1 while it runs") {
  TempDir dir;
  const json schedule = json::array({{{"from_step", 0}, {"to_step", 3}, {"params", {{"lr", 0.1}}}, {"trial", 2}},
                                     {{"from_step", 3}, {"to_step", 6}, {"params", {{"lr", 0.08}}}, {"trial", 2}}});
  const json result = {{"population", 4}, {"exploits", 1}, {"best", {{"trial", 2}, {"value", 0.9}}}, {"schedule", schedule}};
  write_pbt_campaign(dir.file("ok.db"), "completed", result);
  int code = 0;
  std::string out = run_log(dir, {"schedule", dir.file("ok.db")}, "table.log", &code);
  CHECK_MESSAGE(code == 0, out);
  CHECK_MESSAGE(contains(out, "from_step  to_step  lr      trial\n"), out);
  CHECK(contains(out, "        3        6  0.0800      2\n"));
  out = run_log(dir, {"schedule", dir.file("ok.db"), "--stage", "evolve", "--format", "yaml"}, "yaml.log", &code);
  CHECK(code == 0);
  CHECK_MESSAGE(contains(out, "\n- {from_step: 3, to_step: 6, params: {lr: 0.08}, trial: 2}\n"), out);
  out = run_log(dir, {"schedule", dir.file("ok.db"), "--format", "json"}, "json.log", &code);
  CHECK(code == 0);
  CHECK(json::parse(out)["schedule"] == schedule);
  // The Stages table of `status`: two stages, the pbt one with its summary.
  out = run_log(dir, {"status", dir.file("ok.db")}, "status.log", &code);
  CHECK(code == 0);
  CHECK_MESSAGE(contains(out, "\nStages:\n"), out);
  CHECK_MESSAGE(contains(out, "4 members, 1 exploit: best #2 0.9000"), out);

  // Usage: no database, no pbt stage, another kind, a format it does not print (exit 2).
  out = run_log(dir, {"schedule", dir.file("none.db")}, "none.log", &code);
  CHECK_MESSAGE(code == 2, out);
  write_pbt_campaign(dir.file("search.db"), "", json::object());
  out = run_log(dir, {"schedule", dir.file("search.db")}, "nopbt.log", &code);
  CHECK_MESSAGE(code == 2, out);
  CHECK(contains(out, "hpctune schedule: error: the campaign has no pbt stage"));
  out = run_log(dir, {"schedule", dir.file("ok.db"), "--stage", "tune"}, "kind.log", &code);
  CHECK_MESSAGE(code == 2, out);
  CHECK(contains(out, "stage 'tune' is a search stage"));
  out = run_log(dir, {"schedule", dir.file("ok.db"), "--format", "csv"}, "csv.log", &code);
  CHECK_MESSAGE(code == 2, out);
  // Run time: the stage has not completed, or its schedule does not chain (exit 1).
  write_pbt_campaign(dir.file("running.db"), "running", json::object());
  out = run_log(dir, {"schedule", dir.file("running.db")}, "running.log", &code);
  CHECK_MESSAGE(code == 1, out);
  CHECK(contains(out, "pbt stage 'evolve' is running, not completed"));
  json gap = result;
  gap["schedule"][1]["from_step"] = 4;
  write_pbt_campaign(dir.file("gap.db"), "completed", gap);
  out = run_log(dir, {"schedule", dir.file("gap.db")}, "gap.log", &code);
  CHECK_MESSAGE(code == 1, out);
  CHECK(contains(out, "cannot be replayed: schedule[1].from_step: 4 leaves a gap"));  // the reader validate uses
  CHECK_FALSE(contains(out, "from_step  to_step"));  // nothing printed
}

// --- issue 12: a space smaller than the budget ---------------------------------------------------------

TEST_CASE("a 6-point space with max_trials 10: the start says so, each point runs once, exit 0") {
  TempDir dir;
  const std::string script = dir.write("s.sh", "echo \"hpctune-report {\\\"step\\\": 1, \\\"val_accuracy\\\": 0.$1}\"\n");
  const std::string cfg = dir.write(
      "six.yaml", script_config("six-points", script, 10, "", "objective: {metric: val_accuracy, mode: max}\n",
                                "  x: {type: int, low: 1, high: 3}\n  y: {type: choice, values: [a, b]}\n", "{x} {y}"));
  const std::string db = dir.file("six.db");
  int code = 0;
  const std::string out = run_log(dir, {"run", cfg, "--db", db}, "run.log", &code);
  REQUIRE_MESSAGE(code == 0, out);
  CHECK_MESSAGE(contains(out, "search: the space has 6 points, fewer than max_trials 10: the search ends when every point "
                              "has been evaluated"),
                out);
  auto trials = read_trials(db);
  CHECK(trials.size() == 6);
  std::set<std::string> distinct;
  for (const auto& t : trials) {
    CHECK(t.state == store::TrialState::kDone);
    distinct.insert(t.params.dump());
  }
  CHECK(distinct.size() == 6);
  auto s = store::Store::open_readonly(db);
  REQUIRE(s.ok());
  auto c = (*s)->load_campaign();
  REQUIRE((c.ok() && *c));
  CHECK((*c)->state == "completed");
  auto events = (*s)->events((*c)->id, 1000);
  REQUIRE(events.ok());
  int notes = 0;
  for (const auto& e : *events)
    if (e.kind == "search_notes") {
      ++notes;
      CHECK(e.detail["notes"].size() == 1);
    }
  CHECK(notes == 1);
}

// --- issue 13: hpctune slurm submit ---------------------------------------------------------------

namespace {

// `hpctune args...` in `workdir`, stdout and stderr to files of `dir`; the exit code.
int run_in(const TempDir& dir, const std::string& workdir, const std::vector<std::string>& args, std::string* out,
           std::string* errors) {
  SpawnOptions o;
  o.argv = {HPCTUNE_BINARY};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.workdir = workdir;
  o.stdout_path = dir.file("submit.out");
  o.stderr_path = dir.file("submit.err");
  std::remove(o.stdout_path.c_str());
  std::remove(o.stderr_path.c_str());
  auto child = ChildProcess::spawn(o);
  REQUIRE(child.ok());
  auto status = child->wait_for(std::chrono::seconds(150));
  REQUIRE_MESSAGE(status.has_value(), "hpctune did not finish in time");
  *out = read_file(o.stdout_path);
  *errors = read_file(o.stderr_path);
  return status->signaled ? -status->signal : status->code;
}

const std::string kCrayDir = std::string(HPCTUNE_SOURCE_DIR) + "/tests/configs";

}  // namespace

TEST_CASE("slurm submit --dry-run: the 2048-node HPE Cray config's script equals tests/expected/cray_2048.sbatch") {
  TempDir dir;
  std::string out, errors;
  const int code = run_in(dir, kCrayDir,
                          {"slurm", "submit", "cray_2048.yaml", "--nodes", "2048", "--time", "12:00:00", "--program",
                           "hpctune", "--dry-run"},
                          &out, &errors);
  REQUIRE_MESSAGE(code == 0, errors);
  const std::string expected = read_file(std::string(HPCTUNE_SOURCE_DIR) + "/tests/expected/cray_2048.sbatch");
  REQUIRE(!expected.empty());
  CHECK(out == expected);
  // A dry run writes nothing.
  CHECK_FALSE(std::filesystem::exists(kCrayDir + "/cray-2048.db.slurm"));
  CHECK_FALSE(std::filesystem::exists(kCrayDir + "/cray-2048.db"));
}

TEST_CASE("slurm submit: flags override the config; too few nodes, a bad --time or option value is a usage error") {
  TempDir dir;
  std::string out, errors;
  const std::vector<std::string> base = {"slurm", "submit", "cray_2048.yaml", "--program", "hpctune", "--dry-run"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return run_in(dir, kCrayDir, args, &out, &errors);
  };
  REQUIRE(with({"--nodes", "2100", "--time", "1-00:00", "--partition", "large", "--account", "xyz9", "--qos", "high",
                "--db", "/scratch/c.db"}) == 0);
  CHECK(contains(out, "#SBATCH --nodes=2100\n"));  // more than the groups need: spare nodes are allowed
  CHECK(contains(out, "#SBATCH --time=1-00:00\n"));
  CHECK(contains(out, "#SBATCH --partition=large\n"));
  CHECK(contains(out, "#SBATCH --account=xyz9\n"));
  CHECK(contains(out, "#SBATCH --qos=high\n"));
  CHECK(contains(out, "#SBATCH --output=/scratch/c.db.slurm/slurm-%j.out\n"));
  CHECK(contains(out, "db=/scratch/c.db\n"));
  CHECK_FALSE(contains(out, "--partition=batch"));

  // 16 groups x 128 ranks at 1 rank per node: 2048 nodes.
  CHECK(with({"--nodes", "2047", "--time", "60"}) == 2);
  CHECK_MESSAGE(contains(errors, "--nodes 2047 is too few"), errors);
  CHECK_MESSAGE(contains(errors, "2048 node(s) in all"), errors);
  CHECK(out.empty());
  CHECK(with({"--nodes", "0", "--time", "60"}) == 2);
  CHECK(with({"--nodes", "many", "--time", "60"}) == 2);
  CHECK(with({"--nodes", "2048", "--time", "12h"}) == 2);
  CHECK_MESSAGE(contains(errors, "--time: '12h' is not a SLURM time"), errors);
  CHECK(with({"--nodes", "2048", "--time", "1:75"}) == 2);
  CHECK(with({"--nodes", "2048", "--time", "60", "--partition", "a b"}) == 2);
  CHECK_MESSAGE(contains(errors, "--partition: 'a b' holds ' '"), errors);
  CHECK(with({"--nodes", "2048", "--time", "60", "--qos", "x;rm"}) == 2);
  CHECK(with({"--nodes", "2048", "--time", "60", "--db", ":memory:"}) == 2);
  CHECK(with({"--nodes", "2048"}) == 2);  // --time is required

  // A heterogeneous job counts the master's node too.
  const std::string het = dir.write("het.yaml", read_file(kCrayDir + "/cray_2048.yaml") +
                                                    "    master: {partition: service}\n");
  // (the appended line lands under resources.slurm, the last section of the file)
  CHECK(run_in(dir, dir.path, {"slurm", "submit", het, "--nodes", "2048", "--time", "60", "--dry-run"}, &out, &errors) == 2);
  CHECK_MESSAGE(contains(errors, "plus the master's own node"), errors);
  REQUIRE_MESSAGE(run_in(dir, dir.path, {"slurm", "submit", het, "--nodes", "2049", "--time", "60", "--dry-run"}, &out,
                         &errors) == 0, errors);
  CHECK(contains(out, "#SBATCH hetjob\n#SBATCH --nodes=2048\n"));

  // A completed campaign's database: a job would have nothing to do.
  const std::string done_cfg = dir.write("done.yaml", sleep_config("done", 2, 0.01, 1, 1));
  int run_code = 0;
  const std::string run_out = run_log(dir, {"run", done_cfg, "--db", dir.file("done.db")}, "run.log", &run_code);
  REQUIRE_MESSAGE(run_code == 0, run_out);
  CHECK(run_in(dir, dir.path, {"slurm", "submit", done_cfg, "--db", "done.db", "--nodes", "1", "--time", "5", "--dry-run"},
               &out, &errors) == 2);
  CHECK_MESSAGE(contains(errors, "is already completed"), errors);
  CHECK_MESSAGE(contains(errors, "--max-trials"), errors);
}

// Needs the ctest fixture "slurm" (tools/slurm-cluster; SLURM_CONF set): ctest runs it as
// test_cli_slurm_submit. Skipped in a plain run of test_cli.
TEST_CASE("slurm submit: sbatch on the 4-node cluster runs a local-backend campaign to completion" * doctest::skip()) {
  REQUIRE_MESSAGE(std::getenv("SLURM_CONF") != nullptr, "run through ctest (the slurm fixture sets SLURM_CONF)");
  TempDir dir;
  const std::string cfg = dir.write("c.yaml", sleep_config("submitted", 4, 0.05, 2, 2));
  std::string out, errors;
  REQUIRE(run_in(dir, dir.path, {"slurm", "submit", "c.yaml", "--nodes", "2", "--time", "5", "--db", "c.db", "--dry-run"},
                 &out, &errors) == 0);
  const std::string dry_run = out;
  const int code = run_in(dir, dir.path, {"slurm", "submit", "c.yaml", "--nodes", "2", "--time", "5", "--db", "c.db"},
                          &out, &errors);
  REQUIRE_MESSAGE(code == 0, errors);
  CHECK(read_file(dir.file("c.db.slurm/job.sh")) == dry_run);  // the script submitted is the one --dry-run shows
  const std::string job = out.substr(0, out.find('\n'));
  REQUIRE_MESSAGE(!job.empty(), out);
  CHECK(job.find_first_not_of("0123456789") == std::string::npos);
  CHECK(std::filesystem::exists(dir.file("c.db.slurm/job.sh")));

  // The job ends (squeue no longer lists it) within the deadline; SLURM says it completed.
  auto squeue_lists_job = [&] {
    SpawnOptions o;
    o.argv = {"squeue", "-h", "-j", job, "-o", "%T"};
    o.stdout_path = dir.file("squeue.out");
    std::remove(o.stdout_path.c_str());
    auto child = ChildProcess::spawn(o);
    REQUIRE(child.ok());
    REQUIRE(child->wait_for(std::chrono::seconds(30)).has_value());
    const std::string state = read_file(o.stdout_path);
    for (const char* active : {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUE", "SUSPENDED"}) {
      if (contains(state, active)) return true;
    }
    return false;  // gone from squeue, or ended (COMPLETED, FAILED, ...)
  };
  const bool ended = wait_until([&] { return !squeue_lists_job(); }, std::chrono::seconds(90));
  const std::string job_out = read_file(dir.file("c.db.slurm/slurm-" + job + ".out"));
  const std::string job_err = read_file(dir.file("c.db.slurm/slurm-" + job + ".err"));
  REQUIRE_MESSAGE(ended, "job " << job << " still queued or running; its stderr:\n" << job_err);

  int status_code = 0;
  const std::string status = run_log(dir, {"status", dir.file("c.db"), "--format", "json"}, "status.json", &status_code);
  REQUIRE_MESSAGE(status_code == 0, status << "\njob stderr:\n" << job_err);
  const json st = parse_json_file(dir.file("status.json"));
  CHECK_MESSAGE(st["campaign"]["state"] == "completed", job_err);
  CHECK(st["trials"]["by_state"]["done"] == 4);
  (void)job_out;
}

// --- stages in any order: `from` decides when a stage starts, not its place in the list ---------------

TEST_CASE("a stage listed before a stage of its `from` waits for it: the parser checks cycles, not the order") {
  TempDir dir;
  const std::string space = "    space: {value: {type: float, low: 0.0, high: 1.0}}\n";
  const std::string cfg = dir.write(
      "c.yaml",
      "name: order\nseed: 5\nobjective: {metric: value, mode: max}\n"
      "trainer: {kind: sleep, seconds: 0.05, steps: 1, metric: value}\n"
      "resources: {groups: 2, threads: 1}\n"
      "stages:\n"
      "  - name: later\n    kind: search\n    from: first\n    search: {algorithm: random, max_trials: 2}\n" +
          space +
          "  - name: first\n    kind: search\n    search: {algorithm: random, max_trials: 2}\n" + space);
  const std::string db = dir.file("o.db");
  int code = 0;
  const std::string out = run_log(dir, {"run", cfg, "--db", db}, "run.log", &code);
  REQUIRE_MESSAGE(code == 0, out);
  const json st = status_json_of(dir, db, "status.json");
  REQUIRE(st["stages"].size() == 2);
  std::map<std::string, json> by_name;
  for (const auto& s : st["stages"]) by_name[s["name"].get<std::string>()] = s;
  REQUIRE(by_name.count("later") == 1);
  REQUIRE(by_name.count("first") == 1);
  for (const auto& [name, s] : by_name) {
    CHECK_MESSAGE(s["state"] == "completed", name);
    CHECK_MESSAGE(s["trials"]["by_state"]["done"].get<int64_t>() == 2, name);
  }
  CHECK(by_name["later"]["started_at"].get<double>() >= by_name["first"]["finished_at"].get<double>());
}
