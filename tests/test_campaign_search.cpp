// The campaign side of search: warm start from another store, early stopping through the master
// with real worker processes (and replayed after a resume), and the search state and Pareto front
// recorded while the campaign runs.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "scheduler/scheduler.h"
#include "store/store.h"
#include "protocol/transport.h"
#include "search/early_stopping.h"
#include "search/searcher.h"
#include "tests/campaign_fixture.h"
#include "worker/worker.h"

using namespace hpctune;
using namespace hpctune::launch;
using namespace hpctune::testing;
using store::TrialState;
using nlohmann::json;

namespace {

store::CampaignRow read_campaign(const std::string& db) {
  auto s = store::Store::open_readonly(db);
  REQUIRE(s.ok());
  auto c = (*s)->load_campaign();
  REQUIRE((c.ok() && *c));
  return **c;
}

std::string file_bytes(const std::string& path) { return read_file(path); }

search::ParamSpec float_param(const std::string& name, double low, double high) {
  search::ParamSpec p;
  p.name = name;
  p.type = search::ParamType::kFloat;
  p.low = low;
  p.high = high;
  return p;
}

// A sleep-trainer campaign whose metric `value` is the searched parameter.
std::string sleep_campaign(const std::string& name, const std::string& search, const std::string& space, int steps,
                           double seconds, int groups, const std::string& extra = "") {
  return "name: " + name + "\nseed: 7\nobjective: {metric: value, mode: max}\nsearch: " + search +
         "\nspace:\n" + space + "trainer: {kind: sleep, seconds: " + std::to_string(seconds) +
         ", steps: " + std::to_string(steps) + ", metric: value}\nresources: {groups: " + std::to_string(groups) +
         "}\n" + extra;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Warm start

TEST_CASE("warm start: parameters are projected onto this campaign's space") {
  search::ParamSpec opt;
  opt.name = "opt";
  opt.type = search::ParamType::kChoice;
  opt.choices = {"sgd", "adam"};
  search::ParamSpec momentum = float_param("momentum", 0.0, 0.99);
  momentum.when = search::Condition{"opt", {"sgd"}};
  search::ParamSpec fixed;
  fixed.name = "k";
  fixed.type = search::ParamType::kFixed;
  fixed.value = 3;
  auto space = search::Space::create({float_param("x", 0.0, 1.0), opt, momentum, fixed});
  REQUIRE(space.ok());
  std::string why;

  // Unknown parameters and parameters whose condition is false are dropped.
  auto p = scheduler::project_params(*space, json{{"x", 0.5}, {"opt", "adam"}, {"momentum", 0.9}, {"extra", 7}}, &why);
  REQUIRE(p.has_value());
  CHECK(*p == json{{"x", 0.5}, {"opt", "adam"}});
  // An active conditional parameter is kept; a missing one is left for the searcher to fill.
  p = scheduler::project_params(*space, json{{"opt", "sgd"}, {"momentum", 0.5}, {"k", 3}});
  REQUIRE(p.has_value());
  CHECK(*p == json{{"opt", "sgd"}, {"momentum", 0.5}, {"k", 3}});
  // Out of range, an unknown choice, or another value of a fixed parameter: the trial is refused.
  CHECK_FALSE(scheduler::project_params(*space, json{{"x", 1.5}}, &why).has_value());
  CHECK(why == "out_of_space");
  CHECK_FALSE(scheduler::project_params(*space, json{{"x", 0.5}, {"opt", "rmsprop"}}, &why).has_value());
  CHECK(why == "out_of_space");
  CHECK_FALSE(scheduler::project_params(*space, json{{"x", 0.5}, {"k", 4}}, &why).has_value());
  CHECK(why == "out_of_space");
  // An inactive parameter's value is not judged (it is dropped).
  CHECK(scheduler::project_params(*space, json{{"x", 0.5}, {"opt", "adam"}, {"momentum", 7.0}}).has_value());
  // Nothing searched in common (a fixed parameter alone is no overlap).
  CHECK_FALSE(scheduler::project_params(*space, json{{"y", 1.0}, {"k", 3}}, &why).has_value());
  CHECK(why == "no_overlap");
}

TEST_CASE("warm start: a bad store is a config error naming search.warm_start and the path") {
  TempDir dir;
  auto space = search::Space::create({float_param("value", 0.0, 1.0)});
  REQUIRE(space.ok());
  const std::vector<search::Objective> objectives = {{"value", true}};
  auto expect_config_error = [&](const std::string& path, const std::string& fragment) {
    auto r = scheduler::load_warm_start(path, *space, objectives);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == Errc::kConfig);
    CHECK(r.error().message().find("search.warm_start: " + path) != std::string::npos);
    CHECK_MESSAGE(r.error().message().find(fragment) != std::string::npos, r.error().message());
  };
  expect_config_error(dir.file("missing.db"), "no such file");
  expect_config_error(dir.write("text.db", "this is not a database, just some text that is long enough\n"),
                      "cannot be read as an hpctune store");
  expect_config_error(dir.write("empty.db", ""), "cannot be read as an hpctune store");
  {
    auto s = store::Store::open(dir.file("nocampaign.db"));
    REQUIRE(s.ok());
  }
  expect_config_error(dir.file("nocampaign.db"), "holds no campaign");
  auto own = scheduler::load_warm_start(dir.file("nocampaign.db"), *space, objectives, dir.file("nocampaign.db"));
  REQUIRE_FALSE(own.ok());
  CHECK(own.error().code() == Errc::kConfig);
  CHECK(own.error().message().find("this campaign's own database") != std::string::npos);

  // Through the binary: exit code 2, nothing run.
  const std::string cfg = dir.write(
      "c.yaml", sleep_campaign("bad-warm", "{algorithm: random, max_trials: 2, warm_start: " + dir.file("missing.db") + "}",
                               "  value: {type: float, low: 0.0, high: 1.0}\n", 1, 0.0, 1));
  auto status = run_hpctune({"run", cfg, "--db", dir.file("c.db")}, dir.file("c.log"));
  CHECK_FALSE(status.signaled);
  CHECK(status.code == 2);
  const std::string log = read_file(dir.file("c.log"));
  CHECK_MESSAGE(log.find("search.warm_start: " + dir.file("missing.db") + ": no such file") != std::string::npos, log);
  CHECK(read_trials(dir.file("c.db")).empty());
}

TEST_CASE("warm start end to end: a GA's generation 0 carries the earlier campaign's trials that fit") {
  TempDir dir;
  // Campaign A: random search over value in [0, 1] and seconds (a real sleep setting) in [0, 0.004].
  const std::string a_db = dir.file("a.db");
  const std::string a_cfg = dir.write(
      "a.yaml", sleep_campaign("warm-a", "{algorithm: random, max_trials: 16}",
                               "  value: {type: float, low: 0.0, high: 1.0}\n"
                               "  seconds: {type: float, low: 0.0, high: 0.004}\n",
                               1, 0.0, 2));
  auto a = run_hpctune({"run", a_cfg, "--db", a_db}, dir.file("a.log"));
  REQUIRE_MESSAGE(a.success(), read_file(dir.file("a.log")));
  const auto a_trials = read_trials(a_db);
  REQUIRE(a_trials.size() == 16);
  // Campaign B searches value in [0.5, 1] only: A's trials below 0.5 do not fit.
  int64_t fit = 0;
  for (const auto& t : a_trials) fit += t.params["value"].get<double>() >= 0.5;
  REQUIRE(fit > 0);
  REQUIRE(fit < 16);

  const std::string a_before = file_bytes(a_db);
  // Hold A's master lock meanwhile: a warm start that took it would be refused.
  auto a_store = store::Store::open(a_db);
  REQUIRE(a_store.ok());
  REQUIRE((*a_store)->acquire_master_lock().ok());

  const int population = 20;  // larger than what fits, so every fitting trial is carried
  const std::string b_db = dir.file("b.db");
  const std::string b_cfg = dir.write(
      "b.yaml", sleep_campaign("warm-b",
                               "{algorithm: genetic, max_trials: 30, warm_start: " + a_db +
                                   ", settings: {population: " + std::to_string(population) + "}}",
                               "  value: {type: float, low: 0.5, high: 1.0}\n"
                               "  seconds: {type: float, low: 0.0, high: 0.004}\n",
                               1, 0.0, 2));
  auto b = run_hpctune({"run", b_cfg, "--db", b_db}, dir.file("b.log"));
  REQUIRE_MESSAGE(b.success(), read_file(dir.file("b.log")));
  REQUIRE((*a_store)->close().ok());
  CHECK(file_bytes(a_db) == a_before);  // A is unchanged

  // The event says what was loaded and skipped.
  json detail;
  for (const auto& e : read_events(b_db)) {
    if (e.kind == "warm_start") detail = e.detail;
  }
  REQUIRE(detail.is_object());
  CHECK(detail["read"] == 16);
  CHECK(detail["loaded"] == fit);
  CHECK(detail["skipped"] == 16 - fit);
  CHECK(detail["skipped_by_reason"]["out_of_space"] == 16 - fit);

  // Generation 0 carries the warm trials (seq < 0 in the GA's state) and runs only the rest.
  const auto c = read_campaign(b_db);
  const json& gen0 = c.search_state["islands"][0]["generations"][0];
  CHECK(gen0["carried"].size() == static_cast<std::size_t>(fit));
  for (const auto& s : gen0["carried"]) CHECK(s.get<int64_t>() < 0);
  const auto b_trials = read_trials(b_db);
  int64_t gen0_trials = 0, later = 0;
  for (const auto& t : b_trials) {
    CHECK(t.params["value"].get<double>() >= 0.5);
    CHECK(t.meta["generation"] == t.generation);  // trials.generation comes from the searcher
    (t.generation == 0 ? gen0_trials : later) += 1;
  }
  CHECK(gen0_trials == population - fit);
  CHECK(later == 30 - (population - fit));
  check_no_orphans(b_db);
}

TEST_CASE("lineage: every child of aging evolution and of the genetic algorithm is linked to its parents") {
  for (const std::string algorithm : {"evolution", "genetic"}) {
    CAPTURE(algorithm);
    TempDir dir;
    const std::string db = dir.file("c.db");
    const std::string cfg = dir.write(
        "c.yaml", sleep_campaign("lineage-" + algorithm,
                                 "{algorithm: " + algorithm + ", max_trials: 16, settings: {population: 4" +
                                     (algorithm == "evolution" ? ", sample_size: 2" : "") + "}}",
                                 "  value: {type: float, low: 0.0, high: 1.0}\n", 1, 0.0, 2));
    auto r = run_hpctune({"run", cfg, "--db", db}, dir.file("c.log"));
    REQUIRE_MESSAGE(r.success(), read_file(dir.file("c.log")));
    const auto trials = read_trials(db);
    REQUIRE(trials.size() == 16);
    std::map<int64_t, int64_t> id_of_seq;
    for (const auto& t : trials) id_of_seq[t.seq] = t.id;
    auto store = store::Store::open_readonly(db);
    REQUIRE(store.ok());
    int children = 0;
    for (const auto& t : trials) {
      if (!t.meta.contains("parents") || t.meta["parents"].empty()) continue;
      ++children;
      auto rows = (*store)->lineage(t.id);
      REQUIRE(rows.ok());
      std::set<int64_t> want, got;
      for (const auto& p : t.meta["parents"]) want.insert(id_of_seq.at(p.get<int64_t>()));
      for (const auto& row : *rows) {
        CHECK(row.relation == "parent");
        got.insert(row.parent_trial_id);
      }
      CHECK(got == want);
    }
    CHECK(children >= 8);  // 16 trials, a population of 4: most are children
  }
}

// ---------------------------------------------------------------------------------------------
// Early stopping through the master

namespace {

// Feeds the recorded reports of a campaign, in recorded order, into a fresh stopper, skipping a
// trial's reports after its stop decision (as the master does): the trials it would stop.
std::set<int64_t> offline_asha_stops(const std::string& db, const json& settings) {
  auto s = store::Store::open_readonly(db);
  REQUIRE(s.ok());
  auto c = (*s)->load_campaign();
  REQUIRE((c.ok() && *c));
  auto reports = (*s)->campaign_metrics((*c)->id, "value");
  REQUIRE(reports.ok());
  auto trials = (*s)->trials((*c)->id);
  REQUIRE(trials.ok());
  std::map<int64_t, int64_t> seq_of;
  for (const auto& t : *trials) seq_of[t.id] = t.seq;
  search::StopperSpec spec;
  spec.kind = "asha";
  spec.settings = settings;
  spec.maximize = true;
  auto stopper = search::make_stopper(spec);
  REQUIRE(stopper.ok());
  std::set<int64_t> stopped;
  for (const auto& r : *reports) {
    if (stopped.count(r.trial_id)) continue;
    if ((*stopper)->on_report(seq_of[r.trial_id], r.step, r.value) == search::Decision::kStop) stopped.insert(r.trial_id);
  }
  return stopped;
}

}  // namespace

TEST_CASE("ASHA through the master with worker processes: pruned trials end early with their last metric") {
  TempDir dir;
  const int steps = 9;
  const std::string cfg = dir.write(
      "c.yaml", sleep_campaign("asha", "{algorithm: random, max_trials: 24}",
                               "  value: {type: float, low: 0.0, high: 1.0}\n", steps, 0.18, 2,
                               // max_t = steps: the last step is not a rung (a stop there would come too late)
                               "early_stopping: {kind: asha, grace_period: 1, reduction_factor: 3, max_t: 9}\n"));
  const std::string db = dir.file("c.db");
  auto run = run_hpctune({"run", cfg, "--db", db}, dir.file("c.log"));
  REQUIRE_MESSAGE(run.success(), read_file(dir.file("c.log")));
  check_no_orphans(db);

  const auto trials = read_trials(db);
  REQUIRE(trials.size() == 24);
  int64_t pruned = 0, done = 0;
  const store::TrialRow* best = nullptr;
  for (const auto& t : trials) {
    const double v = t.params["value"].get<double>();
    if (!best || v > best->params["value"].get<double>()) best = &t;
    REQUIRE((t.state == TrialState::kPruned || t.state == TrialState::kDone));
    // Pruned or not, the trial's last metric is recorded as its result.
    REQUIRE(t.objective.has_value());
    CHECK(*t.objective == doctest::Approx(v));
    CHECK(t.metrics["value"].get<double>() == doctest::Approx(v));
    if (t.state == TrialState::kPruned) {
      ++pruned;
      CHECK(t.step < steps);
      CHECK(t.step >= 1);
    } else {
      ++done;
      CHECK(t.step == steps);
    }
  }
  CHECK(pruned > 0);
  CHECK(done > 0);
  REQUIRE(best != nullptr);
  CHECK(best->state == TrialState::kDone);  // the best trial is never in the bottom of a rung
  // A trial continues past a rung while in the top max(1, floor(n / 3)) of the n there so far: the
  // first to reach the last judged rung (step 3) always finishes.
  CHECK(done + pruned == 24);
  CHECK(pruned <= 23);
  // Every stop decision is an event with the step and value it was taken at; every pruned trial
  // has one, taken at the step it ended with.
  std::map<int64_t, json> stops;
  for (const auto& e : read_events(db)) {
    if (e.kind == "stop_requested") CHECK(stops.emplace(e.trial_id, e.detail).second);
  }
  for (const auto& t : trials) {
    if (t.state != TrialState::kPruned) {
      if (stops.count(t.id)) CHECK(t.step == steps);  // finished before the stop reached it
      continue;
    }
    REQUIRE(stops.count(t.id) == 1);
    CHECK(stops[t.id]["reason"] == "pruned");
    CHECK(stops[t.id]["step"].get<int64_t>() <= t.step);  // a step may land before the stop does
    CHECK(stops[t.id]["value"].get<double>() == doctest::Approx(t.params["value"].get<double>()));
  }
  // Rung arithmetic: a replay of the recorded reports, in recorded order, through a fresh ASHA
  // takes exactly the master's stop decisions (the pruned trials, and any that finished before
  // their stop reached them).
  std::set<int64_t> stop_ids;
  for (const auto& [id, detail] : stops) stop_ids.insert(id);
  CHECK(offline_asha_stops(db, json{{"grace_period", 1}, {"reduction_factor", 3.0}, {"max_t", steps},
                                     {"min_early_stopping_rate", 0}}) == stop_ids);
}

TEST_CASE("resume replays the recorded reports into ASHA: the same trials are pruned as without the kill") {
  TempDir dir;
  // One group: the reports arrive in the same order in every run, so the decisions are comparable.
  // Rungs at steps 1 and 3 of 9, 20 ms apart: a stop reaches the trial long before it could finish.
  const std::string cfg = dir.write(
      "c.yaml", sleep_campaign("asha-resume", "{algorithm: random, max_trials: 18}",
                               "  value: {type: float, low: 0.0, high: 1.0}\n", 9, 0.18, 1,
                               "early_stopping: {kind: asha, grace_period: 1, reduction_factor: 3, max_t: 9}\n"));
  auto states_by_seq = [](const std::vector<store::TrialRow>& trials) {
    std::map<int64_t, TrialState> out;
    for (const auto& t : trials) out[t.seq] = t.state;
    return out;
  };
  const std::string ref_db = dir.file("ref.db");
  auto ref = run_hpctune({"run", cfg, "--db", ref_db}, dir.file("ref.log"));
  REQUIRE_MESSAGE(ref.success(), read_file(dir.file("ref.log")));
  const auto reference = states_by_seq(read_trials(ref_db));
  REQUIRE(reference.size() == 18);
  int64_t ref_pruned = 0;
  for (const auto& [seq, st] : reference) ref_pruned += st == TrialState::kPruned;
  REQUIRE(ref_pruned > 0);

  const std::string db = dir.file("killed.db");
  std::vector<store::TrialRow> partial;
  // The kill must land after some pruning decisions and before the end; the commit count per trial
  // depends on timing, so walk the hit count until it does.
  for (int hit : {40, 25, 60, 90, 15}) {
    std::filesystem::remove(db);
    std::filesystem::remove_all(db + ".trials");
    auto killed = run_hpctune({"run", cfg, "--db", db, "--failpoint", "after-commit", "--failpoint-hit",
                               std::to_string(hit)},
                              dir.file("killed.log"));
    REQUIRE(killed.signaled);
    check_no_orphans(db);
    partial = read_trials(db);
    int64_t finished = 0, pruned = 0;
    for (const auto& t : partial) {
      finished += store::is_final(t.state);
      pruned += t.state == TrialState::kPruned;
    }
    if (pruned > 0 && finished < 16) break;
    partial.clear();
  }
  REQUIRE_MESSAGE(!partial.empty(), "no fail-point hit count landed in the middle of the campaign");

  auto resumed = run_hpctune({"resume", db}, dir.file("resume.log"));
  REQUIRE_MESSAGE(resumed.success(), read_file(dir.file("resume.log")));
  check_no_orphans(db);
  const auto after = states_by_seq(read_trials(db));
  std::string diff;
  for (const auto& [seq, st] : reference) {
    if (!after.count(seq) || after.at(seq) != st) {
      diff += " seq " + std::to_string(seq) + ": " + store::to_string(st) + " -> " +
              (after.count(seq) ? store::to_string(after.at(seq)) : "missing") + ";";
    }
  }
  CHECK_MESSAGE(after == reference, "differences:" << diff);
  bool replayed = false;
  for (const auto& e : read_events(db)) {
    if (e.kind == "stopper_replayed") replayed = e.detail["reports"].get<int64_t>() > 0;
  }
  CHECK(replayed);
}

// ---------------------------------------------------------------------------------------------
// Search state and Pareto front while the campaign runs (scheduler over the in-process transport,
// real worker loops on threads, a file store; then the CLI on that store)

namespace {

// Two objectives to minimize, ZDT1-like: f1 = x, f2 = 1 - sqrt(x) + y. The front is y = 0.
class TwoObjectiveTrainer final : public trainers::Trainer {
 public:
  std::string kind() const override { return "two"; }
  Result<trainers::TrialResult> run(const trainers::TrialContext& ctx) override {
    const double x = ctx.params.at("x").get<double>(), y = ctx.params.at("y").get<double>();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    protocol::Metrics m{{"f1", x}, {"f2", 1.0 - std::sqrt(x) + y}};
    ctx.report(1, m);
    return trainers::TrialResult{1, false, m, {}};
  }
};

bool dominates(const std::vector<double>& a, const std::vector<double>& b) {
  bool strictly = false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] > b[i]) return false;
    strictly = strictly || a[i] < b[i];
  }
  return strictly;
}

}  // namespace

TEST_CASE("two objectives: generations and the Pareto front are recorded during the campaign, and shown by the CLI") {
  TempDir dir;
  const std::string db_path = dir.file("mo.db");
  auto opened = store::Store::open(db_path);
  REQUIRE(opened.ok());
  std::unique_ptr<store::Store> db = std::move(opened).value();
  store::CampaignRow row;
  row.name = "two-objectives";
  row.created_at = 1;
  row.config_json = json{{"objectives", json::array({json{{"metric", "f1"}, {"mode", "min"}},
                                                      json{{"metric", "f2"}, {"mode", "min"}}})}};
  auto cid = db->create_campaign(row);
  REQUIRE(cid.ok());

  auto space = search::Space::create({float_param("x", 0.0, 1.0), float_param("y", 0.0, 1.0)});
  REQUIRE(space.ok());
  const int64_t population = 8, max_trials = 40;
  search::SearchSpec spec;
  spec.algorithm = "genetic";
  auto decls = search::searcher_settings("genetic");
  REQUIRE(decls.ok());
  auto settings = search::resolve_settings("genetic", *decls, json{{"population", population}});
  REQUIRE(settings.ok());
  spec.settings = *settings;
  spec.space = *space;
  spec.objectives = {{"f1", false}, {"f2", false}};
  spec.seed = 3;
  spec.max_trials = max_trials;
  auto searcher = search::make_searcher(spec);
  REQUIRE_MESSAGE(searcher.ok(), (searcher.ok() ? "" : searcher.error().message()));
  auto stopper = search::make_stopper(search::StopperSpec{});
  REQUIRE(stopper.ok());

  protocol::InProcHub hub;
  auto server = hub.server();
  scheduler::SchedulerOptions opt;
  opt.campaign_id = *cid;
  opt.seed = 3;
  opt.objectives = spec.objectives;
  opt.max_trials = max_trials;
  opt.trainer = {{"kind", "two"}};
  opt.heartbeat_interval = std::chrono::milliseconds(50);
  opt.heartbeat_timeout = std::chrono::milliseconds(5000);
  opt.search_state_every = 5;
  scheduler::Scheduler sched(opt, *server, *db, **searcher, **stopper);
  REQUIRE(sched.restore(scheduler::Clock::now()).ok());

  std::atomic<int> terminate{0};
  std::vector<std::thread> threads;
  for (int g = 0; g < 2; ++g) {
    auto client = std::shared_ptr<protocol::ClientTransport>(hub.connect());
    auto credential = sched.launch_credential(g);
    REQUIRE(credential.ok());
    threads.emplace_back([client, g, &terminate, secret = credential.value()] {
      worker::WorkerOptions o;
      o.group = g;
      o.secret = secret;
      o.terminate = &terminate;
      o.reconnect_initial = std::chrono::milliseconds(20);
      o.make = [](const std::string&) -> Result<std::unique_ptr<trainers::Trainer>> {
        return std::unique_ptr<trainers::Trainer>(new TwoObjectiveTrainer());
      };
      (void)worker::run_worker(*client, o);
    });
  }
  auto finished_count = [&] {
    const auto p = sched.progress();
    return p.done + p.pruned + p.failed;
  };
  json mid_state;
  const auto deadline = scheduler::Clock::now() + std::chrono::seconds(30);
  while (!sched.finished() && scheduler::Clock::now() < deadline) {
    auto env = server->recv(std::chrono::milliseconds(10));
    REQUIRE(env.ok());
    if (*env) REQUIRE(sched.handle((*env)->peer, (*env)->bytes, scheduler::Clock::now()).ok());
    REQUIRE(sched.tick(scheduler::Clock::now()).ok());
    if (mid_state.is_null() && finished_count() >= max_trials / 2) {
      // What a crash now would leave: read through another connection.
      mid_state = read_campaign(db_path).search_state;
    }
  }
  REQUIRE(sched.finished());
  sched.shutdown_workers("done");
  terminate = 1;
  for (auto& t : threads) t.join();

  // Saved during the run: some trials finished, a generation bred, a front recorded.
  REQUIRE(mid_state.is_object());
  CHECK(mid_state["finished_trials"].get<int64_t>() >= 5);
  CHECK(mid_state["finished_trials"].get<int64_t>() <= max_trials / 2);
  CHECK(mid_state["islands"][0]["generations"].size() >= 2);
  CHECK_FALSE(mid_state["pareto_front_trials"].empty());

  REQUIRE(sched.save_search_state(scheduler::Clock::now()).ok());
  REQUIRE(db->close().ok());

  const auto trials = read_trials(db_path);
  REQUIRE(trials.size() == static_cast<std::size_t>(max_trials));
  std::set<int64_t> generations;
  for (const auto& t : trials) {
    CHECK(t.generation == t.meta["generation"].get<int64_t>());
    generations.insert(t.generation);
  }
  CHECK(generations.size() >= 4);  // 40 trials of a population of 8 (less the elite) span 5 or more

  // The stored front is the non-dominated set of the stored done trials.
  std::set<int64_t> expected;
  for (const auto& a : trials) {
    if (a.state != TrialState::kDone) continue;
    const std::vector<double> la = {a.metrics["f1"].get<double>(), a.metrics["f2"].get<double>()};
    bool dominated = false;
    for (const auto& b : trials) {
      if (b.state == TrialState::kDone &&
          dominates({b.metrics["f1"].get<double>(), b.metrics["f2"].get<double>()}, la)) {
        dominated = true;
      }
    }
    if (!dominated) expected.insert(a.id);
  }
  const auto c = read_campaign(db_path);
  std::set<int64_t> stored;
  for (const auto& id : c.search_state["pareto_front_trials"]) stored.insert(id.get<int64_t>());
  CHECK(stored == expected);
  CHECK(expected.size() >= 2);
  CHECK(expected.size() < trials.size());

  // The CLI shows it: `trials --format json` marks the members, `status` lists the front.
  auto t = run_hpctune({"trials", db_path, "--format", "json"}, dir.file("trials.json"));
  REQUIRE(t.success());
  std::set<int64_t> marked;
  for (const auto& j : json::parse(read_file(dir.file("trials.json")))) {
    if (j["pareto"].get<bool>()) marked.insert(j["trial"].get<int64_t>());
  }
  CHECK(marked == expected);
  auto st = run_hpctune({"status", db_path}, dir.file("status.txt"));
  REQUIRE(st.success());
  const std::string status = read_file(dir.file("status.txt"));
  CHECK_MESSAGE(status.find("Pareto front (" + std::to_string(expected.size()) + " trials") != std::string::npos, status);
  auto table = run_hpctune({"trials", db_path}, dir.file("trials.txt"));
  REQUIRE(table.success());
  CHECK(read_file(dir.file("trials.txt")).find("pareto") != std::string::npos);
}
