// `hpctune validate` on workflows (issue 21, findings 12 and 13), through the binary:
//   - it is linear in the size of the config: 1,000, 4,000 and 13,000 one-line ensemble stages and
//     750 and 3,000 search stages validate in time that grows with the count, not its square, and in
//     bounded memory (the peak RSS of the child, from wait4); a large top level repeated in many
//     stages with keys of their own is refused with its place instead of expanding without bound;
//   - every stage key that `run` would refuse, or that would fail every trial, is refused here with
//     file:line:column and key path: a pbt schedule with a gap, an overlap, a NaN, an unknown key,
//     a huge step or a parameter the trainer does not have; classes that repeat or name one class;
//     trainer.env names with '='; an ensemble over a stage whose trainer saves no predictions.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tests/campaign_fixture.h"

using namespace hpctune;
using namespace hpctune::testing;
using namespace std::chrono_literals;

namespace {

struct Run {
  int code = -1;         // exit code; -signal when killed
  double seconds = 0;    // wall time
  long max_rss_kb = 0;   // the child's peak resident set
  std::string output;    // stdout and stderr
};

// `hpctune args...` in a child limited to `address_space` bytes (a regression must fail here, not
// exhaust the machine) and killed after `limit`; its time and peak RSS from wait4.
Run run_measured(const std::vector<std::string>& args, const std::string& log, std::chrono::seconds limit,
                 rlim_t address_space = rlim_t{4} << 30) {
  std::vector<std::string> argv_s = {HPCTUNE_BINARY};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const rlimit as{address_space, address_space};
    setrlimit(RLIMIT_AS, &as);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) _exit(126);
    dup2(fd, 1);
    dup2(fd, 2);
    execv(argv[0], argv.data());
    _exit(127);
  }
  Run r;
  int status = 0;
  rusage usage{};
  const auto deadline = start + limit;
  while (true) {
    const pid_t done = wait4(pid, &status, WNOHANG, &usage);
    REQUIRE(done >= 0);
    if (done == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      REQUIRE(wait4(pid, &status, 0, &usage) == pid);
      break;
    }
    std::this_thread::sleep_for(5ms);  // a deadline poll of the child's exit
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  r.max_rss_kb = usage.ru_maxrss;
  r.output = read_file(log);
  return r;
}

const char* kTop =
    "name: big\n"
    "seed: 1\n"
    "objective: {metric: val_accuracy, mode: max}\n"
    "trainer: {kind: mlp, epochs: 2}\n"
    "stages:\n"
    "  - {name: s, kind: search, search: {max_trials: 2}, space: {lr: {type: float, low: 0.01, high: 0.1}}}\n";

// The issue's config: a search stage and `n` one-line ensemble stages over it (13,000: 561 KB).
std::string ensemble_stages(int n) {
  std::string out = kTop;
  for (int i = 0; i < n; ++i) out += "  - {name: e" + std::to_string(i) + ", kind: ensemble, from: s}\n";
  return out;
}

// `n` search stages, each with a search and a space of its own.
std::string search_stages(int n) {
  std::string out = kTop;
  for (int i = 0; i < n; ++i)
    out += "  - {name: s" + std::to_string(i) +
           ", kind: search, search: {max_trials: 2}, space: {lr: {type: float, low: 0.01, high: 0.1}}}\n";
  return out;
}

Run validate(const TempDir& dir, const std::string& name, const std::string& text) {
  const std::string cfg = dir.write(name + ".yaml", text);
  Run r = run_measured({"validate", cfg}, dir.file(name + ".log"), 120s);
  MESSAGE(name << ": exit " << r.code << ", " << r.seconds << " s, peak RSS " << r.max_rss_kb / 1024 << " MiB");
  return r;
}

// `hpctune validate` refuses `text` with exit 2 and one line "<file>:<line>:<column>: <path>: ..."
// at the given line and column; returns the message.
std::string refused_at(const TempDir& dir, const std::string& name, const std::string& text, int line, int column,
                       const std::string& path) {
  const std::string cfg = dir.write(name + ".yaml", text);
  Run r = run_measured({"validate", cfg}, dir.file(name + ".log"), 60s);
  INFO(name << ": " << r.output);
  CHECK(r.code == 2);
  const std::string place = cfg + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + path + ": ";
  CHECK(r.output.find(place) != std::string::npos);
  CHECK(r.output.find("internal error") == std::string::npos);
  return r.output;
}

bool contains(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

// A pbt stage that replays `schedule` (indented YAML list items, 6 spaces) after a search stage.
std::string pbt_schedule(const std::string& schedule, const std::string& trainer = "{kind: mlp, epochs: 4}") {
  return "name: replay\n"
         "objective: {metric: val_accuracy, mode: max}\n"
         "trainer: " + trainer + "\n"
         "stages:\n"
         "  - name: again\n"
         "    kind: pbt\n"
         "    population: 2\n"
         "    schedule:\n" + schedule;
}

}  // namespace

TEST_CASE("validate: 13,000 one-line ensemble stages and 3,000 search stages in linear time and bounded memory") {
  TempDir dir;
  const Run e1 = validate(dir, "ensemble-1000", ensemble_stages(1000));
  const Run e4 = validate(dir, "ensemble-4000", ensemble_stages(4000));
  const Run e13 = validate(dir, "ensemble-13000", ensemble_stages(13000));
  CHECK(std::filesystem::file_size(dir.file("ensemble-13000.yaml")) > 500'000);
  for (const Run* r : {&e1, &e4, &e13}) {
    INFO(r->output.substr(0, 400));
    CHECK(r->code == 0);
    CHECK(contains(r->output, ": ok"));
  }
  // Linear: 13 times the stages in at most 13 times the time, with a factor 3 for a loaded machine
  // (quadratic is 169 times); the start of the process counts in the small run's favour.
  CHECK(e13.seconds <= 3 * 13 * std::max(e1.seconds, 0.05));
  CHECK(e4.seconds <= 3 * 4 * std::max(e1.seconds, 0.05));
  CHECK(e13.seconds < 20);
  // Bounded memory: what 13,000 stages add is small (it was gigabytes, then std::bad_alloc).
  CHECK(e13.max_rss_kb < 256 * 1024);
  CHECK(e13.max_rss_kb - e1.max_rss_kb < 13 * std::max(e1.max_rss_kb, 16L * 1024));

  const Run s1 = validate(dir, "search-750", search_stages(750));
  const Run s4 = validate(dir, "search-3000", search_stages(3000));
  for (const Run* r : {&s1, &s4}) {
    INFO(r->output.substr(0, 400));
    CHECK(r->code == 0);
    CHECK(contains(r->output, ": ok"));
  }
  CHECK(s4.seconds <= 3 * 4 * std::max(s1.seconds, 0.05));
  CHECK(s4.seconds < 20);
  CHECK(s4.max_rss_kb < 512 * 1024);  // it was 1.6 GB
}

TEST_CASE("validate: a large top level repeated in many stages with keys of their own is refused where it overflows") {
  TempDir dir;
  // 6,000 environment variables (12,000 nodes) in the top level, and 200 search stages: 2.4 million
  // nodes of views, more than config::kMaxStageViewNodes.
  std::string text = "name: wide\nobjective: {metric: y, mode: min}\ntrainer:\n  kind: command\n  command: \"true {x}\"\n  env:\n";
  for (int i = 0; i < 6000; ++i) text += "    V" + std::to_string(i) + ": \"" + std::to_string(i) + "\"\n";
  text += "stages:\n";
  for (int i = 0; i < 200; ++i)
    text += "  - {name: s" + std::to_string(i) + ", kind: search, search: {max_trials: 2}, space: {x: {type: float, low: 0, high: 1}}}\n";
  const std::string cfg = dir.write("wide.yaml", text);
  const Run r = run_measured({"validate", cfg}, dir.file("wide.log"), 120s);
  INFO(r.output);
  CHECK(r.code == 2);
  // 1,000,000 / (12,000 + ...) views fit: the 83rd stage (line 6007 + 83) is the one that overflows.
  const std::regex place(R"(wide\.yaml:\d+:5: stages\[(\d+)\]: the stages' own views of the campaign come to more than 1000000 YAML nodes)");
  std::smatch m;
  REQUIRE(std::regex_search(r.output, m, place));
  CHECK(std::stoi(m[1]) > 50);
  CHECK(std::stoi(m[1]) < 200);
  CHECK(r.max_rss_kb < 512 * 1024);
  CHECK(r.seconds < 30);
}

TEST_CASE("validate: a pbt schedule is checked as the stage reads it, with its place") {
  TempDir dir;
  // The schedule `hpctune schedule --format yaml` prints is valid (trial included), and the stage's
  // steps become its end.
  const std::string good = pbt_schedule(
      "      - {from_step: 0, to_step: 2, params: {lr: 0.1}, trial: 3}\n"
      "      - {from_step: 2, to_step: 5, params: {lr: 0.05, momentum: 0.9}, trial: 4}\n");
  const std::string cfg = dir.write("good.yaml", good);
  Run ok = run_measured({"validate", cfg, "--json"}, dir.file("good.log"), 60s);
  INFO(ok.output);
  REQUIRE(ok.code == 0);
  const auto normalized = nlohmann::json::parse(ok.output, nullptr, false);
  REQUIRE(!normalized.is_discarded());
  CHECK(normalized["stages"][0]["steps"] == 5);

  // Line 9 is the first interval, line 10 the second; columns point at the key that is wrong.
  refused_at(dir, "gap", pbt_schedule("      - {from_step: 0, to_step: 2, params: {lr: 0.1}}\n"
                                      "      - {from_step: 3, to_step: 5, params: {lr: 0.1}}\n"),
             10, 10, "stages[0].schedule[1].from_step");
  refused_at(dir, "overlap", pbt_schedule("      - {from_step: 0, to_step: 2, params: {lr: 0.1}}\n"
                                          "      - {from_step: 1, to_step: 5, params: {lr: 0.1}}\n"),
             10, 10, "stages[0].schedule[1].from_step");
  refused_at(dir, "start", pbt_schedule("      - {from_step: 1, to_step: 2, params: {lr: 0.1}}\n"), 9, 10,
             "stages[0].schedule[0].from_step");
  refused_at(dir, "backwards", pbt_schedule("      - {from_step: 0, to_step: 0, params: {lr: 0.1}}\n"), 9, 24,
             "stages[0].schedule[0].to_step");
  refused_at(dir, "nan", pbt_schedule("      - {from_step: 0, to_step: 2, params: {lr: .nan}}\n"), 9, 45,
             "stages[0].schedule[0].params.lr");
  refused_at(dir, "nan-command",
             pbt_schedule("      - {from_step: 0, to_step: 2, params: {x: .inf}}\n",
                          "{kind: command, command: \"true\"}"),
             9, 45, "stages[0].schedule[0].params.x");
  const std::string unknown = refused_at(
      dir, "unknown-key", pbt_schedule("      - {form_step: 0, to_step: 2, params: {lr: 0.1}}\n"), 9, 10,
      "stages[0].schedule[0].form_step");
  CHECK(contains(unknown, "did you mean 'from_step'"));
  refused_at(dir, "missing-key", pbt_schedule("      - {from_step: 0, params: {lr: 0.1}}\n"), 9, 9,
             "stages[0].schedule[0]");
  const std::string huge = refused_at(
      dir, "huge", pbt_schedule("      - {from_step: 0, to_step: 1000000000000, params: {lr: 0.1}}\n"), 9, 24,
      "stages[0].schedule[0].to_step");
  CHECK(contains(huge, "above the maximum 1000000"));
  const std::string setting = refused_at(
      dir, "not-a-setting", pbt_schedule("      - {from_step: 0, to_step: 2, params: {lrr: 0.1}}\n"), 9, 45,
      "stages[0].schedule[0].params.lrr");
  CHECK(contains(setting, "did you mean 'lr'"));
  refused_at(dir, "out-of-bounds", pbt_schedule("      - {from_step: 0, to_step: 2, params: {lr: -1}}\n"), 9, 45,
             "stages[0].schedule[0].params.lr");
  refused_at(dir, "epochs", pbt_schedule("      - {from_step: 0, to_step: 2, params: {epochs: 3}}\n"), 9, 45,
             "stages[0].schedule[0].params.epochs");
  // The trainer's rules, with the interval's params as the member that replays it gets them: a freeze
  // beyond the one layer before the output layer of hidden: [32] (before, every member failed).
  const std::string frozen = refused_at(
      dir, "freeze", pbt_schedule("      - {from_step: 0, to_step: 2, params: {freeze: 5}}\n",
                                  "{kind: mlp, epochs: 4, hidden: [32]}"),
      9, 45, "stages[0].schedule[0].params.freeze");
  CHECK(contains(frozen, "in this interval of the replay"));
  CHECK(validate(dir, "freeze-ok", pbt_schedule("      - {from_step: 0, to_step: 2, params: {freeze: 1}}\n",
                                                "{kind: mlp, epochs: 4, hidden: [32]}")).code == 0);
  refused_at(dir, "not-a-list", pbt_schedule("      {from_step: 0}\n"), 8, 5, "stages[0].schedule");
  refused_at(dir, "steps", pbt_schedule("      - {from_step: 0, to_step: 2, params: {lr: 0.1}}\n    steps: 4\n"), 10,
             5, "stages[0].steps");
}

TEST_CASE("validate: a pbt stage that trains past what the trainer's step setting takes is refused at the step") {
  // A member trains with trainer.epochs at each interval's end; mlp's epochs is at most 1000. Before,
  // both passed validate and every member failed on reaching step 1000 ("setting 'epochs' = 1002: must
  // be at most 1000").
  TempDir dir;
  const std::string schedule = refused_at(
      dir, "schedule", pbt_schedule("      - {from_step: 0, to_step: 2, params: {lr: 0.1}}\n"
                                    "      - {from_step: 2, to_step: 2000, params: {lr: 0.05}}\n"),
      10, 24, "stages[0].schedule[1].to_step");
  CHECK(contains(schedule, "2000 is above the maximum 1000 (trainer.epochs, which a member trains with up to this step)"));
  const std::string steps = refused_at(
      dir, "steps",
      "name: p\nobjective: {metric: val_accuracy, mode: max}\ntrainer: {kind: mlp, epochs: 4}\nstages:\n"
      "  - {name: p, kind: pbt, population: 2, steps: 4000, space: {lr: {type: float, low: 0.01, high: 0.1}}}\n",
      5, 41, "stages[0].steps");
  CHECK(contains(steps, "4000 is above the maximum 1000 (trainer.epochs"));
  CHECK(validate(dir, "thousand", "name: p\nobjective: {metric: val_accuracy, mode: max}\ntrainer: {kind: mlp, epochs: 4}\n"
                                  "stages:\n  - {name: p, kind: pbt, population: 2, steps: 1000, space: {lr: {type: "
                                  "float, low: 0.01, high: 0.1}}}\n")
            .code == 0);
}

TEST_CASE("validate: an ensemble's task is classification or regression, a bad one refused at its place") {
  TempDir dir;
  const std::string head = std::string(kTop);
  // mlp writes class probabilities: a regression ensemble over it is refused where validate runs,
  // not by every run of the stage.
  const std::string regression = refused_at(
      dir, "regression", head + "  - {name: e, kind: ensemble, from: s, task: regression, method: weighted}\n", 7, 40,
      "stages[1].task");
  CHECK(contains(regression, "writes classification predictions"));
  const Run plain = validate(dir, "classification", head + "  - {name: e, kind: ensemble, from: s, task: classification}\n");
  CHECK(plain.code == 0);
  const std::string bad = refused_at(dir, "task-typo", head + "  - {name: e, kind: ensemble, from: s, task: regresion}\n",
                                     7, 40, "stages[1].task");
  CHECK(contains(bad, "regression"));
  refused_at(dir, "task-number", head + "  - {name: e, kind: ensemble, from: s, task: 3}\n", 7, 40, "stages[1].task");
}

TEST_CASE("validate: classes, trainer.env names and an ensemble's inputs are checked with their place") {
  TempDir dir;
  const std::string transfer_head =
      "name: move\n"
      "objective: {metric: val_accuracy, mode: max}\n"
      "trainer: {kind: mlp, epochs: 2}\n"
      "stages:\n"
      "  - {name: s, kind: search, search: {max_trials: 2}, space: {lr: {type: float, low: 0.01, high: 0.1}}}\n";
  refused_at(dir, "classes-repeat", transfer_head + "  - {name: t, kind: transfer, from: s, classes: [1, 1, 1]}\n", 6,
             53, "stages[1].classes[1]");
  const std::string one = refused_at(
      dir, "classes-one", transfer_head + "  - {name: t, kind: transfer, from: s, classes: [65535]}\n", 6, 50,
      "stages[1].classes[0]");
  CHECK(contains(one, "at least 2 classes"));
  refused_at(dir, "trainer-classes",
             "name: c\nobjective: {metric: val_accuracy, mode: max}\nsearch: {max_trials: 2}\n"
             "space: {lr: {type: float, low: 0.01, high: 0.1}}\ntrainer: {kind: mlp, classes: [3, 4, 3]}\n",
             5, 38, "trainer.classes[2]");

  const std::string env = refused_at(
      dir, "env",
      "name: e\nobjective: {metric: y, mode: min}\nsearch: {max_trials: 2}\nspace: {x: {type: float, low: 0, high: 1}}\n"
      "trainer:\n  kind: command\n  command: \"true {x}\"\n  env:\n    OK: \"1\"\n    \"A=B\": \"2\"\n",
      10, 5, "trainer.env.A=B");
  CHECK(contains(env, "'='"));
  refused_at(dir, "stage-env",
             "name: e\nobjective: {metric: y, mode: min}\ntrainer: {kind: command, command: \"true {x}\"}\nstages:\n"
             "  - name: s\n    kind: search\n    search: {max_trials: 2}\n    space: {x: {type: float, low: 0, high: 1}}\n"
             "    trainer: {env: {\"PATH=/tmp\": x}}\n",
             9, 21, "stages[0].trainer.env.PATH=/tmp");

  // An ensemble over a function-trainer stage: what is wrong is the input, not the ensemble's space.
  const std::string blend = refused_at(
      dir, "ensemble-function",
      "name: f\nobjective: {metric: y, mode: min}\ntrainer: {kind: function, name: branin}\nstages:\n"
      "  - {name: s, kind: search, search: {max_trials: 2}, space: {x1: {type: float, low: -5, high: 10}, "
      "x2: {type: float, low: 0, high: 15}}}\n"
      "  - {name: blend, kind: ensemble, from: s}\n",
      6, 35, "stages[1].from");
  CHECK(contains(blend, "the ensemble needs predictions, and trainer kind 'function' of stage 's' writes none"));
  CHECK(!contains(blend, "'x1' is missing"));
}

TEST_CASE("validate: a model-parallel split the trainer cannot make is refused at resources.ranks.model (issue 36, item 10)") {
  TempDir dir;
  // The issue's campaign: a function trainer imitating a network of 1 layer, split into 8 stages.
  const std::string head = "name: split\nobjective: {metric: value, mode: min}\nsearch: {max_trials: 4}\n"
                           "space: {x1: {type: float, low: -5, high: 10}, x2: {type: float, low: 0, high: 15}}\n";
  const std::string one_layer = refused_at(dir, "one-layer",
                                           head + "trainer: {kind: function, name: branin}\n"
                                                  "resources:\n  groups: 2\n  ranks: {data: 1, model: 8}\n",
                                           8, 20, "resources.ranks.model");
  CHECK(contains(one_layer, "8 model-parallel stages, but a trial of trainer kind 'function' can be split into at most 1"));
  CHECK(contains(one_layer, "trainer.layers"));
  // `run` refuses it the same way, before anything starts.
  const std::string cfg = dir.write("run.yaml", head + "trainer: {kind: function, name: branin, layers: 4}\n"
                                                       "resources:\n  groups: 2\n  ranks: {data: 1, model: 8}\n");
  Run run = run_measured({"run", cfg, "--db", dir.file("run.db")}, dir.file("run.log"), 60s);
  CHECK(run.code == 2);
  CHECK(contains(run.output, cfg + ":8:20: resources.ranks.model: 8 model-parallel stages"));
  CHECK(contains(run.output, "at most 4"));
  CHECK(!std::filesystem::exists(dir.file("run.db")));
  // A network deep enough is accepted; so is a space that searches its depth (the trainer checks each trial).
  CHECK(validate(dir, "eight-layers", head + "trainer: {kind: function, name: branin, layers: 8}\n"
                                             "resources:\n  ranks: {data: 1, model: 8}\n").code == 0);
  CHECK(validate(dir, "searched", "name: split\nobjective: {metric: value, mode: min}\nsearch: {max_trials: 4}\n"
                                  "space: {x1: {type: float, low: -5, high: 10}, x2: {type: float, low: 0, high: 15}, "
                                  "layers: {type: int, low: 1, high: 16}}\n"
                                  "trainer: {kind: function, name: branin}\nresources:\n  ranks: {data: 1, model: 8}\n")
            .code == 0);
}

TEST_CASE("validate and run warn when a generation-based search keeps few groups busy (issue 36, item 10)") {
  TempDir dir;
  const std::string text = "name: idle\nobjective: {metric: value, mode: min}\n"
                           "search:\n  algorithm: genetic\n  max_trials: 4\n  settings: {population: 2}\n"
                           "space: {x1: {type: float, low: -5, high: 10}, x2: {type: float, low: 0, high: 15}}\n"
                           "trainer: {kind: function, name: branin}\nresources: {groups: 8}\n";
  const std::string cfg = dir.write("idle.yaml", text);
  const std::string warning = cfg + ":6:14: search.settings.population: population 2 keeps 1 of 8 groups busy (12%; 1 elite carried "
                                    "over unrun); population: 9 would fill them";
  const Run v = validate(dir, "idle", text);
  CHECK(v.code == 0);  // a warning, not an error
  CHECK_MESSAGE(contains(v.output, "hpctune validate: warning: " + warning), v.output);
  // run, with --groups over the config's: the share of the groups it will have.
  Run r = run_measured({"run", cfg, "--db", dir.file("idle.db"), "--groups", "4"}, dir.file("run.log"), 120s);
  CHECK_MESSAGE(r.code == 0, r.output);
  CHECK_MESSAGE(contains(r.output, "hpctune run: warning: " + cfg +
                                       ":6:14: search.settings.population: population 2 keeps 1 of 4 groups busy (25%; 1 elite "
                                       "carried over unrun); population: 5 would fill them"),
                r.output);
  // A population that fills the groups: no warning.
  std::string full = text;
  full.replace(full.find("population: 2"), 13, "population: 9");
  const Run quiet = validate(dir, "full", full);
  CHECK(quiet.code == 0);
  CHECK_MESSAGE(!contains(quiet.output, "groups busy"), quiet.output);
}

TEST_CASE("validate warns of a command's script that is not a file, at the top level and in a stage's own trainer") {
  TempDir dir;
  dir.write("train.py", "print(1)\n");
  const std::string text = "name: files\nobjective: {metric: value, mode: min}\n"
                           "trainer: {kind: command, command: [python3, trian.py], workdir: \"" + dir.path + "\"}\n"
                           "stages:\n"
                           "  - {name: a, kind: search, search: {algorithm: random, max_trials: 2},"
                           " space: {x: {type: float, low: 0, high: 1}}}\n"
                           "  - {name: b, kind: search, search: {algorithm: random, max_trials: 2},"
                           " space: {x: {type: float, low: 0, high: 1}},"
                           " trainer: {kind: command, command: [python3, train.py], workdir: \"" + dir.path + "\"}}\n";
  const Run v = validate(dir, "files", text);
  CHECK(v.code == 0);  // a warning: the file may yet be made
  CHECK_MESSAGE(contains(v.output, "hpctune validate: warning: " + dir.file("files.yaml") +
                                       ":3:45: trainer.command[1]: the script 'trian.py' that python3 runs is not a file in " +
                                       dir.path + ", where the command runs (trainer.workdir); every trial would fail"),
                v.output);
  CHECK_MESSAGE(!contains(v.output, "stages[1].trainer"), v.output);  // stage b's own trainer finds its script
  std::string other = text;
  other.replace(other.rfind("train.py"), 8, "tarin.py");
  const Run w = validate(dir, "other", other);
  CHECK_MESSAGE(contains(w.output, "stages[1].trainer.command[1]: the script 'tarin.py'"), w.output);
}
