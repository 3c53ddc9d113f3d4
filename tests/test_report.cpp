// The report library (report/): the views of a campaign that the CLI prints and the dashboard will
// serve, on a small campaign written straight into a store (no binary, no master): the read-only
// entry point, the objective, ranking, status, trial JSON, one trial's detail, the progress line,
// and readers on several threads at once.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "report/campaign.h"
#include "report/format.h"
#include "report/objective.h"
#include "report/progress.h"
#include "report/ranking.h"
#include "report/status.h"
#include "report/tables.h"
#include "report/trial_detail.h"
#include "report/trial_json.h"
#include "store/store.h"
#include "tests/temp_dir.h"

using namespace hpctune;
using hpctune::testing::TempDir;
using json = nlohmann::json;

namespace {

bool contains(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

// A campaign of 4 trials in `db`: 1 done (0.5), 2 done (0.9), 3 failed, 4 queued; trial 2 had a
// lost first attempt. Objective val_accuracy, max (or `objectives` with two, when `several`).
void write_campaign(const std::string& db, bool several = false) {
  auto opened = store::Store::open(db);
  REQUIRE(opened.ok());
  auto& s = **opened;
  store::CampaignRow c;
  c.name = "views";
  c.seed = 7;
  c.created_at = 1000;
  c.config_json = several ? json{{"objectives", {{{"metric", "val_accuracy"}, {"mode", "max"}},
                                                 {{"metric", "seconds"}, {"mode", "min"}}}},
                                 {"search", {{"algorithm", "random"}, {"max_trials", 4}}}}
                          : json{{"objective", {{"metric", "val_accuracy"}, {"mode", "max"}}},
                                 {"search", {{"algorithm", "random"}, {"max_trials", 4}}},
                                 {"resources", {{"bind", "tcp://*:5555"}}}};
  auto id = s.create_campaign(c);
  REQUIRE(id.ok());
  const int64_t campaign = *id;
  std::vector<int64_t> trials;
  for (int i = 0; i < 4; ++i) {
    store::TrialRow t;
    t.campaign_id = campaign;
    t.seq = i;
    t.params = {{"x", 0.1 * (i + 1)}};
    t.created_at = 1000 + i;
    auto tid = s.insert_trial(t);
    REQUIRE(tid.ok());
    trials.push_back(*tid);
  }
  auto finish = [&](int64_t trial, int64_t attempt, store::TrialState state, std::optional<double> objective,
                    double t, const std::string& error = "") {
    REQUIRE(s.mark_assigned(trial, attempt, 0, 1, t - 2).ok());
    REQUIRE(s.mark_running(trial, attempt, t - 1).ok());
    json metrics = objective ? json{{"val_accuracy", *objective}, {"seconds", 10.0 * trial}} : json::object();
    if (objective) REQUIRE(s.add_metrics(trial, attempt, 1, {{"val_accuracy", *objective - 0.1}}, t - 0.5).ok());
    auto r = s.finish_trial(trial, attempt, state, metrics, objective, 1, error, t);
    REQUIRE(r.ok());
    REQUIRE(*r);
  };
  finish(trials[0], 1, store::TrialState::kDone, 0.5, 1010);
  REQUIRE(s.mark_assigned(trials[1], 1, 1, 1, 1005).ok());
  REQUIRE(s.requeue_trial(trials[1], 1, "lost", "worker went silent", 3, 1006).ok());
  finish(trials[1], 2, store::TrialState::kDone, 0.9, 1020);
  finish(trials[2], 1, store::TrialState::kFailed, std::nullopt, 1015, "exit code 3\n");
  REQUIRE(s.add_event(campaign, "trial_failed", trials[2], 1, 0, json{{"why", "exit code 3"}}, 1015).ok());
  REQUIRE(s.add_event(campaign, "campaign_note", 0, 0, -1, json::object(), 1016).ok());
  if (several) REQUIRE(s.set_search_state(campaign, json{{"pareto_front_trials", {trials[1], trials[0]}}}).ok());
}

}  // namespace

TEST_CASE("open_campaign reads a campaign read-only; a missing file or one without a campaign is kNotFound") {
  TempDir dir;
  auto missing = report::open_campaign(dir.file("none.db"));
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code() == Errc::kNotFound);
  CHECK_FALSE(std::filesystem::exists(dir.file("none.db")));  // read-only: nothing created

  REQUIRE(store::Store::open(dir.file("empty.db")).ok());
  auto empty = report::open_campaign(dir.file("empty.db"));
  REQUIRE_FALSE(empty.ok());
  CHECK(empty.error().code() == Errc::kNotFound);
  CHECK(contains(empty.error().message(), "holds no campaign"));

  write_campaign(dir.file("c.db"));
  auto view = report::open_campaign(dir.file("c.db"));
  REQUIRE(view.ok());
  CHECK(view->db_path == dir.file("c.db"));
  CHECK(view->campaign.name == "views");
  REQUIRE(view->trials.size() == 4);
  CHECK(view->objectives.metric == "val_accuracy");
  CHECK(view->objectives.maximize);
  CHECK_FALSE(view->objectives.several());
  CHECK(view->front() == nullptr);
  CHECK(report::campaign_bind(view->campaign) == "tcp://*:5555");
  // The view's connection cannot write.
  CHECK_FALSE(view->store->add_event(view->campaign.id, "x", 0, 0, -1, json::object(), 1).ok());
}

TEST_CASE("the objective: objectives, objective, or neither; the recorded Pareto front") {
  auto o = report::objectives_of(json{{"objectives", {{{"metric", "a"}, {"mode", "min"}}, {{"metric", "b"}}}}});
  CHECK(o.metric == "a");
  CHECK_FALSE(o.maximize);
  CHECK(o.several());
  CHECK(o.columns() == std::vector<std::string>{"a", "b"});
  o = report::objectives_of(json{{"objective", {{"metric", "loss"}, {"mode", "min"}}}});
  CHECK(o.metric == "loss");
  CHECK_FALSE(o.maximize);
  CHECK(o.columns() == std::vector<std::string>{"loss"});
  o = report::objectives_of(json::object());
  CHECK(o.metric == "objective");
  CHECK(o.maximize);
  o = report::objectives_of(json("not an object"));  // a damaged stored config: the defaults
  CHECK(o.metric == "objective");

  TempDir dir;
  write_campaign(dir.file("m.db"), /*several=*/true);
  auto view = report::open_campaign(dir.file("m.db"));
  REQUIRE(view.ok());
  CHECK(view->objectives.several());
  REQUIRE(view->front() != nullptr);
  CHECK(*view->front() == std::set<int64_t>{view->trials[0].id, view->trials[1].id});
  CHECK(report::campaign_bind(view->campaign) == "tcp://127.0.0.1:*");  // not in its config: the default
  const std::string table = report::trials_table(view->trials, view->objectives.columns(), view->front());
  CHECK(contains(table, "pareto"));
  CHECK(contains(table, "seconds"));
}

TEST_CASE("ranking: best first by the objective, failed and unfinished trials last; the first failure") {
  TempDir dir;
  write_campaign(dir.file("c.db"));
  auto view = report::open_campaign(dir.file("c.db"));
  REQUIRE(view.ok());
  const auto& t = view->trials;
  auto ranked = report::rank_trials(t, true);
  REQUIRE(ranked.size() == 4);
  CHECK(ranked[0].id == t[1].id);  // 0.9
  CHECK(ranked[1].id == t[0].id);  // 0.5
  CHECK(ranked[2].id == t[2].id);  // failed, then queued, in id order
  CHECK(ranked[3].id == t[3].id);
  auto low = report::rank_trials(t, false);
  CHECK(low[0].id == t[0].id);
  auto best = report::best_trial(t, true);
  REQUIRE(best);
  CHECK(best->id == t[1].id);
  CHECK_FALSE(report::best_trial({t[2], t[3]}, true));
  auto failed = report::first_failure(t);
  REQUIRE(failed);
  CHECK(failed->id == t[2].id);
  CHECK_FALSE(report::first_failure({t[0], t[1]}));
}

TEST_CASE("status: counts by state, the lost attempt, the best trial and the elapsed time") {
  TempDir dir;
  write_campaign(dir.file("c.db"));
  auto view = report::open_campaign(dir.file("c.db"));
  REQUIRE(view.ok());
  auto st = report::campaign_status(*view, 1100.0);
  REQUIRE(st.ok());
  CHECK(st->counts.at("done") == 2);
  CHECK(st->counts.at("failed") == 1);
  CHECK(st->counts.at("queued") == 1);
  CHECK(st->attempts_lost == 1);
  const json j = report::status_json(*st);
  CHECK(j["campaign"]["name"] == "views");
  CHECK(j["campaign"]["algorithm"] == "random");
  CHECK(j["campaign"]["max_trials"] == 4);
  CHECK(j["campaign"]["elapsed_s"].get<double>() == doctest::Approx(100.0));  // still running: to `now`
  CHECK(j["campaign"]["finished_at"].is_null());
  CHECK(j["trials"]["total"] == 4);
  CHECK(j["attempts_lost"] == 1);
  CHECK(j["best"]["trial"] == view->trials[1].id);
  CHECK(j["best"]["metric"] == "val_accuracy");
  CHECK(j["best"]["objective"].get<double>() == doctest::Approx(0.9));
  CHECK(j["best"]["attempt"] == 2);
  CHECK_FALSE(j.contains("pareto_front"));
  CHECK(report::campaign_elapsed(store::CampaignRow{}, 5.0) == std::nullopt);
}

TEST_CASE("export JSON and one trial's detail: curves by step, events, attempts, logs; an unknown trial") {
  TempDir dir;
  write_campaign(dir.file("c.db"));
  auto view = report::open_campaign(dir.file("c.db"));
  REQUIRE(view.ok());
  auto doc = report::export_json(*view);
  REQUIRE(doc.ok());
  CHECK((*doc)["campaign"]["seed"] == 7);
  REQUIRE((*doc)["trials"].size() == 4);
  const json& first = (*doc)["trials"][0];
  REQUIRE(first["metrics_by_step"].size() == 1);
  CHECK(first["metrics_by_step"][0]["metrics"]["val_accuracy"].get<double>() == doctest::Approx(0.4));
  CHECK((*doc)["trials"][2]["events"].size() == 1);
  CHECK((*doc)["events"].size() == 1);  // the campaign's own
  CHECK((*doc)["events"][0]["kind"] == "campaign_note");

  const int64_t id = view->trials[2].id;
  std::filesystem::create_directories(dir.file("c.db.trials/" + std::to_string(id)));
  dir.write("c.db.trials/" + std::to_string(id) + "/stderr.log", "one\ntwo\nthree\n");
  auto detail = report::load_trial(*view, id);
  REQUIRE(detail.ok());
  CHECK(detail->trial.state == store::TrialState::kFailed);
  REQUIRE(detail->logs.size() == 1);
  const json j = report::trial_detail_json(*detail, *view, 2);
  CHECK(j["trial"] == id);
  CHECK(j["error"] == "exit code 3\n");
  CHECK(j["attempts"].size() == 1);
  CHECK(j["events"].size() == 1);
  CHECK(j["logs"][0]["tail"] == "two\nthree");
  auto missing = report::load_trial(*view, 999);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code() == Errc::kNotFound);
  CHECK(contains(missing.error().message(), "has no trial 999 (its trials: 1..4)"));
  CHECK(report::tail_lines(dir.file("nothing.log"), 5).empty());
}

TEST_CASE("progress read from the store: counts by state, the budget and the best trial") {
  TempDir dir;
  write_campaign(dir.file("c.db"));
  auto view = report::open_campaign(dir.file("c.db"));
  REQUIRE(view.ok());
  const scheduler::Progress p = report::progress_of(*view);
  CHECK(p.done == 2);
  CHECK(p.failed == 1);
  CHECK(p.queued == 1);
  CHECK(p.running == 0);
  CHECK(p.created == 4);
  CHECK(p.max_trials == 4);
  REQUIRE(p.best.has_value());
  CHECK(*p.best == doctest::Approx(0.9));
  CHECK(p.best_trial == view->trials[1].id);
  const std::string line = report::progress_line(p, 42, 0);
  CHECK_MESSAGE(contains(line, "[3/4]"), line);
  CHECK(contains(line, "best 0.9000 (#" + std::to_string(view->trials[1].id) + ")"));
}

TEST_CASE("readers on several threads: each opens its own view and sees the same campaign") {
  TempDir dir;
  write_campaign(dir.file("c.db"));
  constexpr int kThreads = 4;
  std::vector<std::string> out(kThreads);
  std::vector<std::thread> readers;
  for (int i = 0; i < kThreads; ++i) {
    readers.emplace_back([&, i] {
      for (int round = 0; round < 5; ++round) {
        auto view = report::open_campaign(dir.file("c.db"));
        if (!view.ok()) {
          out[i] = view.error().to_string();
          return;
        }
        auto st = report::campaign_status(*view, 1100.0);
        out[i] = st.ok() ? report::status_json(*st).dump() : st.error().to_string();
      }
    });
  }
  for (auto& r : readers) r.join();
  for (int i = 1; i < kThreads; ++i) CHECK(out[i] == out[0]);
  CHECK(contains(out[0], "\"attempts_lost\":1"));
}

TEST_CASE("format: numbers to 4 digits, durations, times, widths") {
  CHECK(report::format_number(0.87123) == "0.8712");
  CHECK(report::format_number(12.0) == "12");
  CHECK(report::format_number(1234567.0) == "1.235e+06");
  CHECK(report::format_number(std::nan("")) == "nan");
  CHECK(report::format_duration(3725) == "1:02:05");
  CHECK(report::format_duration(65) == "1:05");
  CHECK(report::format_duration(-1) == "?");
  CHECK(report::time_text(0) == "-");
  CHECK(report::display_width("█░x") == 3);
  CHECK(report::truncate_display("██████", 2) == "██");
  CHECK(report::first_line("a\nb") == "a");
}

// --- the progress line (issue 9, item 20), JSON and CSV times: moved from test_cli ---------------

TEST_CASE("the progress line is never wider than the terminal, and drops the least important fields first") {
  scheduler::Progress p;
  p.done = 123456;
  p.pruned = 2345;
  p.failed = 3456;
  p.running = 4096;
  p.queued = 8192;
  p.max_trials = 1000000;
  p.best = 0.987654321;
  p.best_trial = 99999;
  for (int width : {1, 10, 40, 60, 80, 100, 200}) {
    const std::string line = report::progress_line(p, 3725.0, width);
    CHECK_MESSAGE(report::display_width(line) <= static_cast<size_t>(width), width << ": " << line);
    CHECK(contains(line, "[") );  // the count goes last
  }
  const std::string wide = report::progress_line(p, 3725.0, 200);
  for (const char* field : {"done 123456", "pruned 2345", "failed 3456", "running 4096", "queued 8192", "best 0.9877",
                            "1:02:05", "ETA", "█"}) {
    CHECK_MESSAGE(contains(wide, field), field << " missing from " << wide);
  }
  // At 80 columns the bar (least important) goes before the counts; the line is not cut mid-field.
  const std::string narrow = report::progress_line(p, 3725.0, 80);
  CHECK_FALSE(contains(narrow, "█"));
  CHECK(contains(narrow, "done 123456"));
  CHECK(contains(narrow, "failed 3456"));
  CHECK(contains(narrow, "running 4096"));
  const std::string w60 = report::progress_line(p, 3725.0, 60);
  CHECK(contains(w60, "[ 129257/1000000]"));
  CHECK(contains(w60, "done 123456"));
  const std::string w40 = report::progress_line(p, 3725.0, 40);
  CHECK(w40.rfind("[ 129257/1000000] done 123456", 0) == 0);
  // 0: not a terminal, no limit.
  CHECK(report::progress_line(p, 3725.0, 0) == report::progress_line(p, 3725.0, 100000));
}

TEST_CASE("JSON times: 0 (not yet) is null; seconds count from the start to the end") {
  store::TrialRow t;
  t.id = 1;
  t.created_at = 100.0;
  auto j = report::trials_json({t})[0];
  CHECK(j["started_at"].is_null());
  CHECK(j["finished_at"].is_null());
  CHECK(j["seconds"].is_null());
  t.started_at = 101.0;
  t.finished_at = 103.5;
  j = report::trials_json({t})[0];
  CHECK(j["started_at"].get<double>() == 101.0);
  CHECK(j["seconds"].get<double>() == doctest::Approx(2.5));
}

TEST_CASE("CSV times: 0 (not yet) is an empty cell, others every digit") {
  store::TrialRow t;
  t.id = 1;
  t.created_at = 100.0;
  t.started_at = 1700000000.123456789;
  const std::string csv = report::trials_csv({t}, nullptr);
  CHECK(contains(csv, "\n1,0,queued,1,-1,,0,1700000000.1234567,,"));
}

