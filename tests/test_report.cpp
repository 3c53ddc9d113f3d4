// The report library (report/): the views of a campaign that the CLI prints and the dashboard will
// serve, on a small campaign written straight into a store (no binary, no master): the read-only
// entry point, the objective, ranking, status, trial JSON, one trial's detail, the progress line,
// readers on several threads at once, (issue 11) the stages in status and a pbt schedule, and
// (issue 36) each trial's stage, lineage and run settings apart from its searched parameters.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "common/rng.h"
#include "report/campaign.h"
#include "report/csv.h"
#include "report/format.h"
#include "report/group_time.h"
#include "report/objective.h"
#include "report/plots.h"
#include "report/progress.h"
#include "report/ranking.h"
#include "report/stages.h"
#include "report/status.h"
#include "report/tables.h"
#include "report/trial_detail.h"
#include "report/trial_json.h"
#include "store/store.h"
#include "tests/lineage_campaign.h"
#include "tests/temp_dir.h"
#include "trainers/internal_params.h"
#include "trainers/trainer_settings.h"

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
  CHECK(report::campaign_bind(view->campaign) == "ipc://*");  // not in its config: the default
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

// Where the groups' time went: 2 groups over 30 s (60 group-seconds). Trial 1 done after 10 s of
// its attempt, trial 2 a lost attempt of 4 s then one still running, trial 3 failed after 3 s.
TEST_CASE("status: group time by what the attempts bought (trained, failed, lost, running), the rest idle") {
  TempDir dir;
  const std::string db = dir.file("g.db");
  int64_t campaign = 0;
  {
    auto opened = store::Store::open(db);
    REQUIRE(opened.ok());
    auto& s = **opened;
    store::CampaignRow c;
    c.name = "groups";
    c.created_at = 1000;
    c.config_json = json{{"objective", {{"metric", "loss"}, {"mode", "min"}}},
                         {"search", {{"algorithm", "random"}, {"max_trials", 3}, {"max_steps", 40}}},
                         {"resources", {{"groups", 2}}}};
    auto id = s.create_campaign(c);
    REQUIRE(id.ok());
    campaign = *id;
    std::vector<int64_t> t;
    for (int i = 0; i < 3; ++i) {
      store::TrialRow row;
      row.campaign_id = campaign;
      row.seq = i;
      row.created_at = 1000;
      auto tid = s.insert_trial(row);
      REQUIRE(tid.ok());
      t.push_back(*tid);
    }
    REQUIRE(s.mark_assigned(t[0], 1, 0, 1, 1001).ok());
    REQUIRE(s.mark_running(t[0], 1, 1001).ok());
    REQUIRE(s.finish_trial(t[0], 1, store::TrialState::kDone, json{{"loss", 0.5}}, 0.5, 9, "", 1011).ok());
    REQUIRE(s.mark_assigned(t[1], 1, 1, 1, 1002).ok());
    REQUIRE(s.requeue_trial(t[1], 1, "lost", "worker went silent", 3, 1006).ok());
    REQUIRE(s.mark_assigned(t[1], 2, 1, 2, 1016).ok());
    REQUIRE(s.mark_running(t[1], 2, 1016).ok());
    REQUIRE(s.mark_assigned(t[2], 1, 0, 1, 1012).ok());
    REQUIRE(s.finish_trial(t[2], 1, store::TrialState::kFailed, json::object(), std::nullopt, 2, "exit code 3", 1015).ok());
  }
  auto view = report::open_campaign(db);
  REQUIRE(view.ok());
  auto g = report::group_time(*view->store, view->campaign, 11, 1030);
  REQUIRE(g.ok());
  CHECK(g->groups == 2);
  CHECK(g->span_s == doctest::Approx(30));
  CHECK(g->by_state.at("done").seconds == doctest::Approx(10));
  CHECK(g->by_state.at("lost").seconds == doctest::Approx(4));
  CHECK(g->by_state.at("failed").seconds == doctest::Approx(3));
  CHECK(g->by_state.at("running").seconds == doctest::Approx(14));  // not finished: until 1030
  CHECK(g->busy_s() == doctest::Approx(31));
  CHECK(g->idle_s() == doctest::Approx(29));
  CHECK(g->steps == 11);
  CHECK(g->max_steps == 40);
  CHECK_FALSE(g->resumed);
  const std::string text = report::group_time_text(*g);
  CAPTURE(text);
  CHECK(contains(text, "Group time: 2 groups x 0:30 = 1:00"));
  // Each row's cells after its label, spaces collapsed: time, % of the group time, attempts.
  auto cells = [&](const std::string& label) {
    const auto at = text.find("\n" + label + "  ");
    if (at == std::string::npos) return std::string("(no row)");
    std::string line = text.substr(at + 1 + label.size(), text.find('\n', at + 1) - at - 1 - label.size()), out;
    for (char ch : line)
      if (ch != ' ' || (!out.empty() && out.back() != ' ')) out += ch;
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out;
  };
  CHECK(cells("trained (done, pruned, paused)") == "0:10 17 1");
  CHECK(cells("running now") == "0:14 23 1");
  CHECK(cells("failed") == "0:03 5 1");
  CHECK(cells("lost or interrupted (run again)") == "0:04 7 1");
  CHECK(cells("idle") == "0:29 48");
  CHECK(contains(text, "steps: 11 of search.max_steps 40"));
  // A master that is gone: its running attempt ran until its last heartbeat (campaign_status's until).
  auto gone = report::group_time(*view->store, view->campaign, 11, 1020);
  REQUIRE(gone.ok());
  CHECK(gone->by_state.at("running").seconds == doctest::Approx(4));
  // The JSON of status.
  CHECK(report::group_time_until(view->campaign, 1030) == 1030);  // running, no heartbeat: now
  store::CampaignRow beat = view->campaign;
  beat.heartbeat_at = 1020;  // a master's last heartbeat (a master gone: no attempt ran past it)
  CHECK(report::group_time_until(beat, 1030) == 1020);
  beat.finished_at = 1025;
  CHECK(report::group_time_until(beat, 1030) == 1025);
  auto st = report::campaign_status(*view, 1030);
  REQUIRE(st.ok());
  CHECK(st->group_time.steps == 11);  // 9 + 2: each trial's highest reported step
  const json j = report::status_json(*st)["compute"];
  CHECK(j["groups"] == 2);
  CHECK(j["group_seconds"].get<double>() == doctest::Approx(60));
  CHECK(j["busy_seconds"].get<double>() == doctest::Approx(31));
  CHECK(j["attempts"]["lost"]["attempts"] == 1);
  CHECK(j["max_steps"] == 40);
  CHECK(contains(report::status_text(*view, *st, 0), "Group time: 2 groups"));
  // A config that names no groups (or a crafted value of another type): no group time shown.
  report::GroupTime none = *g;
  none.groups = 0;
  CHECK(report::group_time_text(none).empty());
  view->campaign.config_json["resources"]["groups"] = "2";
  auto crafted = report::group_time(*view->store, view->campaign, 11, 1030);
  REQUIRE(crafted.ok());
  CHECK(crafted->groups == 0);
}

// A warning the master logs at a start (a database on a network file system) is recorded as a
// master_warning event: `status` shows it once however many starts said it; a crafted event whose
// text is not a string shows nothing.
TEST_CASE("status: the master's recorded warnings, each once; a crafted one without text is skipped") {
  TempDir dir;
  write_campaign(dir.file("c.db"));
  {
    auto opened = store::Store::open(dir.file("c.db"));
    REQUIRE(opened.ok());
    auto& s = **opened;
    auto c = s.load_campaign();
    REQUIRE(c.ok());
    const int64_t id = (*c)->id;
    for (double t : {1001.0, 1050.0})  // two starts said it
      REQUIRE(s.add_event(id, "master_warning", 0, 0, -1, {{"text", "the database is on nfs"}}, t).ok());
    REQUIRE(s.add_event(id, "master_warning", 0, 0, -1, {{"text", 42}}, 1060).ok());
  }
  auto view = report::open_campaign(dir.file("c.db"));
  REQUIRE(view.ok());
  auto st = report::campaign_status(*view, 1100.0);
  REQUIRE(st.ok());
  CHECK(st->warnings == std::vector<std::string>{"the database is on nfs"});
  CHECK(report::status_json(*st)["campaign"]["warnings"] == json::array({"the database is on nfs"}));
  const std::string text = report::status_text(*view, *st, 100);
  CHECK_MESSAGE(text.find("warning    the database is on nfs\n") != std::string::npos, text);
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
  CHECK(report::tail_lines(dir.file("c.db"), dir.file("c.db.trials/nothing.log"), 5).empty());
}

TEST_CASE("progress read from the store: counts by state, the budget and the best trial") {
  TempDir dir;
  write_campaign(dir.file("c.db"));
  auto view = report::open_campaign(dir.file("c.db"));
  REQUIRE(view.ok());
  const hpctune::Progress p = report::progress_of(*view);
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
  hpctune::Progress p;
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
  t.run_seconds = 7.25;  // a trial of several attempts (pbt intervals, rungs): theirs, summed
  j = report::trials_json({t})[0];
  CHECK(j["seconds"].get<double>() == doctest::Approx(7.25));
  CHECK(report::trial_seconds(t) == doctest::Approx(7.25));
  t.finished_at = 0;  // not finished: no seconds yet
  CHECK(report::trial_seconds(t) == 0);
}

TEST_CASE("CSV times: 0 (not yet) is an empty cell, others every digit") {
  store::TrialRow t;
  t.id = 1;
  t.created_at = 100.0;
  t.started_at = 1700000000.123456789;
  const std::string csv = report::trials_csv(std::vector<store::TrialRow>{t});
  // trial, seq, stage, generation, state, attempt, group, created_at, started_at, finished_at, ...
  CHECK(contains(csv, "\n1,0,,0,queued,1,-1,100,1700000000.1234567,,"));
}


// --- issue 11: stages in `status`, and a pbt stage's schedule ------------------------------------

namespace {

// The results the workflow stages record (workflow/*_stage.h), with known numbers.
const json kStopWhen = {{"stop_when",
                         {{"metric", "val_accuracy"}, {"reaches", 0.9}, {"reached", true}, {"trial", 2},
                          {"value", 0.91}, {"finished_trials", 3}, {"generations", 2}, {"seconds", 252.0}}}};
const json kEnsemble = {{"method", "greedy"},
                        {"candidates", 3},
                        {"skipped", 0},
                        {"retrained", 0},
                        {"members", {{{"trial", 2}, {"weight", 0.6}}, {{"trial", 1}, {"weight", 0.4}}}},
                        {"val_accuracy", 0.905},
                        {"val_log_loss", 0.29},
                        {"test_accuracy", 0.8912},
                        {"test_log_loss", 0.31},
                        {"best_single",
                         {{"trial", 2}, {"val_accuracy", 0.91}, {"val_log_loss", 0.33}, {"test_accuracy", 0.8801},
                          {"test_log_loss", 0.35}}}};
const json kTransfer = {{"sources", {2}},
                        {"compare_metric", "test_accuracy"},
                        {"target", {{"trial", 4}, {"objective", 0.85}, {"val_accuracy", 0.85}, {"test_accuracy", 0.841}}},
                        {"baseline", {{"trial", 5}, {"objective", 0.78}, {"val_accuracy", 0.78}, {"test_accuracy", 0.7702}}},
                        {"best_baseline", {{"trial", 5}, {"objective", 0.78}, {"val_accuracy", 0.78}, {"test_accuracy", 0.7702}}},
                        {"targets", 1},
                        {"baselines", 1},
                        {"gain", 0.0708}};
const json kSchedule = json::array({{{"from_step", 0}, {"to_step", 2}, {"params", {{"lr", 0.05}, {"momentum", 0.9}}}, {"trial", 3}},
                                    {{"from_step", 2}, {"to_step", 4}, {"params", {{"lr", 0.06000000000000001}, {"momentum", 0.72}}}, {"trial", 3}},
                                    {{"from_step", 4}, {"to_step", 6}, {"params", {{"lr", 0.048}, {"momentum", 0.72}}}, {"trial", 1}}});
const json kPbt = {{"population", 4}, {"steps", 6}, {"ready", 2}, {"exploits", 3}, {"explores", 3},
                   {"best", {{"trial", 1}, {"value", 0.885}, {"test_metric", "test_accuracy"}, {"test_accuracy", 0.8801}}}, {"schedule", kSchedule}};

struct StagePlanRow {
  std::string kind, name, state;  // state: completed (with `result`), running or pending
  json result;
  std::vector<store::TrialState> trials;  // each finished at once (running ones stay queued)
};

// A campaign of the given stages, written straight into `db`; returns the stage ids.
std::vector<int64_t> write_stages(const std::string& db, const std::vector<StagePlanRow>& plan) {
  auto opened = store::Store::open(db);
  REQUIRE(opened.ok());
  auto& s = **opened;
  store::CampaignRow c;
  c.name = "staged";
  c.seed = 11;
  c.created_at = 1000;
  c.config_json = json{{"objective", {{"metric", "val_accuracy"}, {"mode", "max"}}}};
  auto campaign = s.create_campaign(c);
  REQUIRE(campaign.ok());
  std::vector<int64_t> ids;
  double t = 1000;
  for (const auto& p : plan) {
    auto id = s.create_stage(*campaign, p.kind, p.name, json::object(), t, p.state == "pending" ? "pending" : "running");
    REQUIRE(id.ok());
    ids.push_back(*id);
    for (size_t i = 0; i < p.trials.size(); ++i) {
      store::TrialRow row;
      row.campaign_id = *campaign;
      row.stage_id = *id;
      row.seq = static_cast<int64_t>(i);
      row.params = {{"x", 0.1 * static_cast<double>(i + 1)}};
      row.created_at = ++t;
      auto tid = s.insert_trial(row);
      REQUIRE(tid.ok());
      const auto state = p.trials[i];
      if (state == store::TrialState::kQueued) continue;
      REQUIRE(s.mark_assigned(*tid, 1, 0, 1, ++t).ok());
      REQUIRE(s.mark_running(*tid, 1, ++t).ok());
      const bool done = state == store::TrialState::kDone;
      auto r = s.finish_trial(*tid, 1, state, done ? json{{"val_accuracy", 0.8}} : json::object(),
                              done ? std::optional<double>(0.8) : std::nullopt, 1, "", ++t);
      REQUIRE(r.ok());
    }
    if (p.state == "completed") REQUIRE(s.complete_stage(*id, p.result, t += 10).ok());
  }
  return ids;
}

// The line of `text` that starts with `start` ("" when none).
std::string line_starting(const std::string& text, const std::string& start) {
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = std::min(text.find('\n', at), text.size());
    if (text.compare(at, start.size(), start) == 0) return text.substr(at, end - at);
    at = end + 1;
  }
  return "";
}

}  // namespace

TEST_CASE("status with stages: each stage's trials by state and its result in JSON, a summary line per kind in the text") {
  TempDir dir;
  const std::string db = dir.file("w.db");
  using TS = store::TrialState;
  write_stages(db, {{"search", "tune", "completed", kStopWhen, {TS::kDone, TS::kDone, TS::kPruned}},
                    {"ensemble", "blend", "completed", kEnsemble, {}},
                    {"transfer", "move", "completed", kTransfer, {TS::kDone, TS::kDone}}});
  auto view = report::open_campaign(db);
  REQUIRE(view.ok());
  auto st = report::campaign_status(*view, 2000.0);
  REQUIRE(st.ok());

  const json j = report::status_json(*st);
  REQUIRE(j["stages"].size() == 3);
  const json& tune = j["stages"][0];
  CHECK(tune["name"] == "tune");
  CHECK(tune["kind"] == "search");
  CHECK(tune["state"] == "completed");
  CHECK(tune["id"].is_number_integer());
  CHECK(tune["created_at"].get<double>() == 1000.0);
  CHECK(tune["started_at"].get<double>() == 1000.0);  // created running
  CHECK(tune["finished_at"].get<double>() > 1000.0);
  CHECK(tune["trials"]["total"] == 3);
  CHECK(tune["trials"]["by_state"]["done"] == 2);
  CHECK(tune["trials"]["by_state"]["pruned"] == 1);
  CHECK(tune["trials"]["by_state"]["failed"] == 0);  // every state, zeros included
  CHECK(tune["trials"]["by_state"].size() == std::size(store::kTrialStates));
  CHECK(tune["result"] == kStopWhen);  // as stored
  CHECK(j["stages"][1]["name"] == "blend");
  CHECK(j["stages"][1]["trials"]["total"] == 0);
  CHECK(j["stages"][1]["result"] == kEnsemble);
  CHECK(j["stages"][1]["result"]["test_accuracy"].get<double>() == 0.8912);
  CHECK(j["stages"][1]["result"]["best_single"]["test_log_loss"].get<double>() == 0.35);
  CHECK(j["stages"][2]["kind"] == "transfer");
  CHECK(j["stages"][2]["trials"]["by_state"]["done"] == 2);
  CHECK(j["stages"][2]["result"]["baseline"]["test_accuracy"].get<double>() == 0.7702);
  CHECK(j["trials"]["total"] == 5);  // the campaign's counts are unchanged

  // One summary per kind, with the recorded numbers.
  CHECK(report::stage_summary(st->stages[0]) == "reached val_accuracy >= 0.9 at trial #2 after 3 trials, 2 generations, 4:12");
  // Recorded before the best single member was chosen by validation loss (an older database).
  CHECK(report::stage_summary(st->stages[1]) ==
        "greedy, 2 members vs best single #2 (best by the objective): val log loss 0.2900 vs 0.3300; "
        "test acc 0.8912 vs 0.8801, test log loss 0.3100 vs 0.3500");
  // Issue 36, item 8: the member with the lowest validation log loss, its objective beside the blend's.
  store::StageRow by_loss = st->stages[1];
  by_loss.result["best_single"]["chosen_by"] = "val_log_loss";
  by_loss.result["best_single"]["objective"] = {{"metric", "val_accuracy"}, {"value", 0.91}};
  by_loss.result["objective"] = {{"metric", "val_accuracy"}, {"value", 0.905}};
  CHECK(report::stage_summary(by_loss) ==
        "greedy, 2 members vs best single #2 (lowest val log loss): val log loss 0.2900 vs 0.3300, "
        "val accuracy 0.9050 vs 0.9100; test acc 0.8912 vs 0.8801, test log loss 0.3100 vs 0.3500");
  // Members whose predictions were not finite (diverged) are named.
  store::StageRow left = by_loss;
  left.result["left_out"] = {{{"trial", 3}, {"reason", "its v.npy holds NaN in row 0 (a training that diverged)"}},
                             {{"trial", 5}, {"reason", "its v.npy holds infinity in row 2 (a training that diverged)"}}};
  CHECK(report::stage_summary(left).ends_with("; 2 trials left out (predictions not finite: #3 #5)"));
  CHECK(report::stage_summary(st->stages[2]) == "test accuracy 0.8410 vs baseline 0.7702 (+0.0708), source #2");
  // With pairs recorded, the stage as a whole: the mean of the targets against that of their twins.
  store::StageRow paired = st->stages[2];
  paired.result["paired"] = {{"pairs", 3}, {"wins", 2}, {"target_test_accuracy", 0.9138},
                             {"baseline_test_accuracy", 0.8990}, {"gain", 0.0148}};
  CHECK(report::stage_summary(paired) ==
        "mean test accuracy 0.9138 vs baseline 0.8990 (+0.0148, better in 2 of 3 pairs), source #2");

  const std::string text = report::status_text(*view, *st, 0);
  CHECK_MESSAGE(contains(text, "\nStages:\nstage  kind      state      trials  result\n"), text);
  const std::string tune_line = line_starting(text, "tune ");
  CHECK_MESSAGE(contains(tune_line, "search    completed  3/3     reached val_accuracy >= 0.9 at trial #2"), text);
  CHECK_MESSAGE(contains(line_starting(text, "blend "), "ensemble  completed  -       greedy, 2 members vs best single #2"), text);
  CHECK_MESSAGE(contains(line_starting(text, "move "), "2/2     test accuracy 0.8410 vs baseline 0.7702 (+0.0708), source #2"), text);
  CHECK(text.find("Stages:") < text.find("Trials by state:"));

  // Cut to the terminal: no line wider, a cut line ends in "…"; the short columns stay whole.
  const std::string narrow = report::stages_table(st->stages, st->trials, 60);
  size_t lines = 0;
  for (size_t at = 0; at < narrow.size(); ++lines) {
    const size_t end = narrow.find('\n', at);
    const std::string line = narrow.substr(at, end - at);
    CHECK_MESSAGE(report::display_width(line) <= 60, line);
    at = end + 1;
  }
  CHECK(lines == 5);
  CHECK(contains(narrow, "tune   search    completed  3/3     reached val_accuracy >="));
  CHECK(contains(narrow, "…\n"));
  CHECK(contains(narrow, "\n-----  --------  ---------  ------  " + std::string(60 - 36, '-') + "\n"));  // the rule: no "…"
  CHECK(report::stages_table(st->stages, st->trials, 0).find("…") == std::string::npos);

  // A stage recorded running under a master that is gone shows interrupted, as its campaign does;
  // in JSON its recorded_state stays the store's.
  report::CampaignStatus gone = *st;
  gone.stages[1].state = "running";
  gone.master.gone = true;
  CHECK_MESSAGE(contains(line_starting(report::status_text(*view, gone, 0), "blend "), "ensemble  interrupted"),
                report::status_text(*view, gone, 0));
  const auto gone_json = report::status_json(gone);
  CHECK(gone_json["stages"][1]["state"] == "interrupted");
  CHECK(gone_json["stages"][1]["recorded_state"] == "running");
  CHECK(gone_json["stages"][0]["state"] == "completed");
  gone.master.gone = false;
  CHECK(report::status_json(gone)["stages"][1]["state"] == "running");
}

TEST_CASE("stage summaries: not reached, a pbt stage, missing keys as ?, an empty result shows nothing") {
  store::StageRow s;
  s.kind = "search";
  s.result = {{"stop_when", {{"metric", "loss"}, {"reaches", 0.25}, {"mode", "min"}, {"reached", false},
                             {"finished_trials", 64}, {"generations", 1}, {"seconds", 3725.0}}}};
  CHECK(report::stage_summary(s) == "loss <= 0.25 not reached after 64 trials, 1 generation, 1:02:05");
  s.result = json::object();
  CHECK(report::stage_summary(s).empty());
  s.kind = "pbt";
  s.result = kPbt;
  CHECK(report::stage_summary(s) == "4 members, 3 exploits: best #1 0.8850 (test accuracy 0.8801)");
  s.kind = "transfer";
  s.result = {{"target", {{"test_accuracy", 0.9}}}, {"baseline", {{"test_accuracy", 0.95}}}, {"gain", -0.05},
              {"compare_metric", "test_accuracy"}};
  CHECK(report::stage_summary(s) == "test accuracy 0.9000 vs baseline 0.9500 (-0.0500)");
  // The figure is the one the stage compared by, named in its result: a loss (lower is better).
  s.result = {{"target", {{"test_loss", 0.31}}}, {"baseline", {{"test_loss", 0.42}}}, {"gain", 0.11},
              {"compare_metric", "test_loss"}};
  CHECK(report::stage_summary(s) == "test loss 0.3100 vs baseline 0.4200 (+0.1100)");
  // A result recorded before the stage named its figure (an older database) is read by its keys.
  s.result = {{"target", {{"val_accuracy", 0.8}, {"test_accuracy", 0.9}}}, {"baseline", {{"test_accuracy", 0.95}}},
              {"gain", -0.05}};
  CHECK(report::stage_summary(s) == "test accuracy 0.9000 vs baseline 0.9500 (-0.0500)");
  s.result = {{"paired", {{"target_test_accuracy", 0.91}, {"baseline_test_accuracy", 0.9}, {"gain", 0.01},
                          {"wins", 2}, {"pairs", 3}}}};
  CHECK(report::stage_summary(s) == "mean test accuracy 0.9100 vs baseline 0.9000 (+0.0100, better in 2 of 3 pairs)");
  s.kind = "ensemble";
  s.result = {{"method", "top_k"}, {"members", json::array({{{"trial", 1}}})}};
  CHECK(report::stage_summary(s) == "top_k, 1 member vs best single #? (best by the objective): val log loss ? vs ?; "
                                    "test acc ? vs ?, test log loss ? vs ?");
  s.result = {{"task", "regression"}, {"method", "weighted"}, {"members", json::array({{{"trial", 1}}, {{"trial", 2}}})},
              {"test_mse", 0.0012}, {"best_single", {{"trial", 2}, {"test_mse", 0.1867}}}};
  CHECK(report::stage_summary(s) ==
        "weighted, 2 members vs best single #2 (best by the objective): val MSE ? vs ?; test MSE 0.0012 vs 0.1867");
  s.result["best_single"]["chosen_by"] = "val_mse";
  s.result["best_single"]["val_mse"] = 0.2;
  s.result["val_mse"] = 0.001;
  s.result["best_single"]["objective"] = {{"metric", "score"}, {"value", 0.6}};
  s.result["objective"] = {{"metric", "score"}, {"value", nullptr}};
  CHECK(report::stage_summary(s) == "weighted, 2 members vs best single #2 (lowest val MSE): val MSE 0.0010 vs 0.2000, "
                                    "score - vs 0.6000; test MSE 0.0012 vs 0.1867");
  // Whether status shows the table: several stages, or one with a result.
  store::StageRow plain;
  plain.kind = "search";
  CHECK_FALSE(report::show_stages({plain}));
  CHECK(report::show_stages({plain, plain}));
  CHECK(report::show_stages({s}));
  CHECK_FALSE(report::show_stages({}));
}

TEST_CASE("status text of a single-stage campaign without a result is as before stages") {
  TempDir dir;
  const std::string db = dir.file("one.db");
  using TS = store::TrialState;
  write_stages(db, {{"search", "search", "completed", json::object(), {TS::kDone, TS::kFailed}}});
  auto view = report::open_campaign(db);
  REQUIRE(view.ok());
  auto st = report::campaign_status(*view, 1100.0);
  REQUIRE(st.ok());
  const std::string expected =
      "campaign   staged\nstate      running\ndatabase   " + db +
      "\nseed       11\nelapsed    1:40\n"
      "\nTrials by state:\n"
      "state        trials\n"
      "-----------  ------\n"
      "queued            0\n"
      "assigned          0\n"
      "running           0\n"
      "done              1\n"
      "pruned            0\n"
      "failed            1\n"
      "interrupted       0\n"
      "paused            0\n"
      "total             2\n"
      "\nBest trial 1 (val_accuracy = 0.8000, attempt 1)\n"
      "parameter  value\n"
      "---------  -----\n"
      "x            0.1\n"
      "metric        value\n"
      "------------  ------\n"
      "val_accuracy  0.8000\n";
  CHECK(report::status_text(*view, *st, 80) == expected);
  // The same campaign once its search recorded a stop_when result: the Stages table.
  write_stages(dir.file("two.db"), {{"search", "search", "completed", kStopWhen, {TS::kDone}}});
  auto two = report::open_campaign(dir.file("two.db"));
  REQUIRE(two.ok());
  auto st2 = report::campaign_status(*two, 1100.0);
  REQUIRE(st2.ok());
  CHECK(contains(report::status_text(*two, *st2, 0), "\nStages:\n"));
}

TEST_CASE("a pbt stage's schedule as a table, JSON and a YAML list; the errors of finding the stage") {
  TempDir dir;
  using TS = store::TrialState;
  write_stages(dir.file("p.db"), {{"search", "tune", "completed", json::object(), {TS::kDone}},
                                  {"pbt", "evolve", "completed", kPbt, {TS::kDone, TS::kDone}}});
  auto view = report::open_campaign(dir.file("p.db"));
  REQUIRE(view.ok());
  auto stages = view->store->stages(view->campaign.id);
  REQUIRE(stages.ok());
  auto pbt = report::find_pbt_stage(*stages, "");
  REQUIRE(pbt.ok());
  CHECK(pbt->name == "evolve");
  REQUIRE(report::find_pbt_stage(*stages, "evolve").ok());

  auto table = report::schedule_text(*pbt, "table");
  REQUIRE(table.ok());
  CHECK_MESSAGE(*table ==
                    "Schedule of trial 1, the best member of pbt stage 'evolve' (objective 0.8850, test accuracy 0.8801):\n"
                    "from_step  to_step  lr      momentum  trial\n"
                    "---------  -------  ------  --------  -----\n"
                    "        0        2  0.0500    0.9000      3\n"
                    "        2        4  0.0600    0.7200      3\n"
                    "        4        6  0.0480    0.7200      1\n",
                *table);

  auto js = report::schedule_text(*pbt, "json");
  REQUIRE(js.ok());
  const json parsed = json::parse(*js);
  CHECK(parsed["stage"] == "evolve");
  CHECK(parsed["best"]["trial"] == 1);
  CHECK(parsed["schedule"] == kSchedule);  // the recorded values, every digit

  auto yaml = report::schedule_text(*pbt, "yaml");
  REQUIRE(yaml.ok());
  CHECK(yaml->rfind("# The schedule of hyperparameters of trial 1, the best member of pbt stage 'evolve'", 0) == 0);
  CHECK_MESSAGE(contains(*yaml, "\n- {from_step: 2, to_step: 4, params: {lr: 0.06000000000000001, momentum: 0.72}, trial: 3}\n"), *yaml);
  const YAML::Node list = YAML::Load(*yaml);  // what a user pastes reads back as the same schedule
  REQUIRE(list.IsSequence());
  REQUIRE(list.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(list[i]["from_step"].as<int64_t>() == kSchedule[i]["from_step"].get<int64_t>());
    CHECK(list[i]["to_step"].as<int64_t>() == kSchedule[i]["to_step"].get<int64_t>());
    CHECK(list[i]["params"]["lr"].as<double>() == kSchedule[i]["params"]["lr"].get<double>());
    CHECK(list[i]["params"]["momentum"].as<double>() == kSchedule[i]["params"]["momentum"].get<double>());
    CHECK(list[i]["trial"].as<int64_t>() == kSchedule[i]["trial"].get<int64_t>());
  }
  auto bad_format = report::schedule_text(*pbt, "csv");
  REQUIRE_FALSE(bad_format.ok());
  CHECK(bad_format.error().code() == Errc::kUsage);

  // Finding the stage: none of that name, not a pbt stage, none at all, several, not completed.
  auto missing = report::find_pbt_stage(*stages, "nope");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code() == Errc::kNotFound);
  CHECK(contains(missing.error().message(), "no stage 'nope' (its stages: tune, evolve)"));
  auto search = report::find_pbt_stage(*stages, "tune");
  REQUIRE_FALSE(search.ok());
  CHECK(search.error().code() == Errc::kInvalidArgument);
  CHECK(contains(search.error().message(), "stage 'tune' is a search stage"));
  auto none = report::find_pbt_stage({stages->front()}, "");
  REQUIRE_FALSE(none.ok());
  CHECK(none.error().code() == Errc::kNotFound);
  CHECK(contains(none.error().message(), "no pbt stage"));
  auto two = *stages;
  two.push_back(two.back());
  two.back().name = "evolve2";
  auto several = report::find_pbt_stage(two, "");
  REQUIRE_FALSE(several.ok());
  CHECK(several.error().code() == Errc::kInvalidArgument);
  CHECK(contains(several.error().message(), "several pbt stages (evolve, evolve2): choose one with --stage NAME"));
  auto running = *stages;
  running.back().state = "running";
  auto early = report::find_pbt_stage(running, "evolve");
  REQUIRE_FALSE(early.ok());
  CHECK(early.error().code() == Errc::kUnavailable);
  CHECK(contains(early.error().message(), "pbt stage 'evolve' is running, not completed"));
  // Completed with no finished member: no schedule to print.
  store::StageRow empty = *pbt;
  empty.result = {{"population", 4}, {"exploits", 0}};
  auto nothing = report::schedule_text(empty, "table");
  REQUIRE_FALSE(nothing.ok());
  CHECK(nothing.error().code() == Errc::kFailed);
  CHECK(contains(nothing.error().message(), "without a schedule"));
  empty.result["schedule"] = json::array({{{"from_step", "0"}}});
  auto malformed = report::schedule_text(empty, "yaml");
  REQUIRE_FALSE(malformed.ok());
  CHECK(contains(malformed.error().message(), "interval 0 of its recorded schedule"));
}

TEST_CASE("a workflow's best trial is its main stage's: other stages train on other data or blend") {
  TempDir dir;
  const std::string db = dir.file("w.db");
  {
    auto opened = store::Store::open(db);
    REQUIRE(opened.ok());
    auto& s = **opened;
    store::CampaignRow c;
    c.name = "wf";
    c.created_at = 1000;
    // As the parser normalizes a workflow: the stages that search have their `search`.
    c.config_json = json{{"objective", {{"metric", "val_accuracy"}, {"mode", "max"}}},
                         {"stages", json::array({json{{"name", "tune"}, {"kind", "search"}, {"search", json::object()}},
                                                 json{{"name", "move"}, {"kind", "transfer"}}})}};
    auto campaign = s.create_campaign(c);
    REQUIRE(campaign.ok());
    double t = 1000;
    for (const auto& [stage, value] : std::vector<std::pair<std::string, double>>{{"tune", 0.7}, {"move", 0.95}}) {
      auto id = s.create_stage(*campaign, stage == "tune" ? "search" : "transfer", stage, json::object(), t);
      REQUIRE(id.ok());
      store::TrialRow row;
      row.campaign_id = *campaign;
      row.stage_id = *id;
      row.created_at = ++t;
      auto tid = s.insert_trial(row);
      REQUIRE(tid.ok());
      REQUIRE(s.mark_assigned(*tid, 1, 0, 1, ++t).ok());
      REQUIRE(s.finish_trial(*tid, 1, store::TrialState::kDone, json{{"val_accuracy", value}}, value, 1, "", ++t).ok());
    }
  }
  auto view = report::open_campaign(db);
  REQUIRE(view.ok());
  CHECK(view->main_stage == "tune");
  REQUIRE(view->main_trials.size() == 1);
  CHECK(view->trials.size() == 2);
  auto st = report::campaign_status(*view, 2000.0);
  REQUIRE(st.ok());
  const json j = report::status_json(*st);
  CHECK(j["best"]["trial"] == view->main_trials[0].id);
  CHECK(j["best"]["objective"] == 0.7);
  const std::string text = report::status_text(*view, *st, 0);
  CAPTURE(text);
  CHECK(text.find("Best trial 1 (val_accuracy = 0.7000, attempt 1, stage 'tune')") != std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// report/plots.h: the computations behind the dashboard's charts

TEST_CASE("plots: best so far, box statistics, strides and downsampling that keeps the best") {
  const double nan = std::nan("");
  CHECK(report::best_so_far({3, 1, 2, 0.5}, false) == std::vector<double>{3, 1, 1, 0.5});
  CHECK(report::best_so_far({1, 3, 2}, true) == std::vector<double>{1, 3, 3});
  const auto with_nan = report::best_so_far({nan, 2, nan, 1}, false);
  CHECK(std::isnan(with_nan[0]));
  CHECK(with_nan[1] == 2);
  CHECK(with_nan[2] == 2);
  CHECK(with_nan[3] == 1);

  const auto b = report::box_stats({5, 1, 4, 2, 3, nan});
  CHECK(b.n == 5);
  CHECK(b.min == 1);
  CHECK(b.q1 == 2);
  CHECK(b.median == 3);
  CHECK(b.q3 == 4);
  CHECK(b.max == 5);
  CHECK(b.mean == 3);
  CHECK(report::box_stats({1, 2}).median == doctest::Approx(1.5));
  CHECK(report::box_stats({}).n == 0);

  CHECK(report::even_stride(5, 10) == std::vector<size_t>{0, 1, 2, 3, 4});
  CHECK(report::even_stride(11, 3) == std::vector<size_t>{0, 5, 10});
  CHECK(report::even_stride(10, 1) == std::vector<size_t>{9});
  CHECK(report::even_stride(10, 0).empty());

  // History: improvements (minimised: 5, 4, 1) always kept, the rest by stride.
  const std::vector<double> h = {5, 6, 7, 4, 8, 9, 9, 1, 9, 9};
  const auto keep = report::history_keep(h, false, 5);
  CHECK(keep.size() == 5);
  for (size_t i : {0u, 3u, 7u}) CHECK(std::find(keep.begin(), keep.end(), i) != keep.end());
  CHECK(std::is_sorted(keep.begin(), keep.end()));
  CHECK(report::history_keep(h, false, 2).size() == 3);  // improvements exceed the bound
  CHECK(report::history_keep(h, false, 100).size() == h.size());

  // Params: the best ⌈10/5⌉ = 2 by loss, then a stride of the rest.
  std::vector<double> losses;
  for (int i = 0; i < 100; ++i) losses.push_back(static_cast<double>((i * 37) % 100));
  const auto kept = report::keep_best_and_stride(losses, 10);
  CHECK(kept.size() == 10);
  auto has_loss = [&](double v) {
    return std::any_of(kept.begin(), kept.end(), [&](size_t i) { return losses[i] == v; });
  };
  CHECK(has_loss(0));
  CHECK(has_loss(1));
  CHECK(report::keep_best_and_stride(losses, 100).size() == 100);
  CHECK(report::keep_best_and_stride(losses, 10) == kept);  // deterministic
}

TEST_CASE("plots: ETA, utilization, Pareto flags, the space of a stored config, CSV cells") {
  CHECK_FALSE(report::eta_seconds(0, {10}, 1).has_value());
  CHECK_FALSE(report::eta_seconds(5, {}, 1).has_value());
  CHECK(*report::eta_seconds(10, {1, 100, 10}, 2) == doctest::Approx(50));  // 10 × median 10 / 2
  CHECK(*report::eta_seconds(4, {2, 4}, 0) == doctest::Approx(12));         // 4 × 3 / max(1, 0)

  // Group 0 busy 0..5 and 3..8 (overlap once: 8 s), group 1 busy 5..10 clipped to the span; group 2 idle.
  const auto u = report::utilization({{0, 0, 5}, {0, 3, 8}, {1, 5, 12}}, 0, 10, {0, 1, 2});
  CHECK(u.busy_s.at(0) == doctest::Approx(8));
  CHECK(u.busy_s.at(1) == doctest::Approx(5));
  CHECK(u.busy_s.at(2) == 0);
  CHECK(u.percent == doctest::Approx(100.0 * 13 / 30));

  const auto flags = report::pareto_flags({{1, 5}, {2, 2}, {3, 3}, {5, 1}, {std::nan(""), 0}}, {false, false});
  CHECK(flags == std::vector<bool>{true, true, false, true, false});
  CHECK(report::pareto_flags({{3, 5}, {2, 2}}, {true, false}) == std::vector<bool>{true, true});
  CHECK(report::pareto_flags({{1, 5}, {2, 2}}, {true, false}) == std::vector<bool>{false, true});

  const nlohmann::json config = {
      {"space",
       {{"lr", {{"type", "float"}, {"low", 0.001}, {"high", 1.0}, {"log", true}}},
        {"layers", {{"type", "int"}, {"low", 1}, {"high", 4}}},
        {"opt", {{"type", "choice"}, {"values", {"sgd", "adam"}}}},
        {"flag", {{"type", "choice"}, {"values", {true, false}}}},
        {"epochs", {{"type", "fixed"}, {"value", 3}}}}},
      {"stages", {{{"name", "ft"}, {"space", {{"freeze", {{"type", "int"}, {"low", 0}, {"high", 2}}}}}}}}};
  const auto params = report::space_params(config);
  REQUIRE(params.size() == 5);
  std::map<std::string, report::PlotParam> by;
  for (const auto& p : params) by[p.name] = p;
  CHECK(by["lr"].type == "float");
  CHECK(by["lr"].log);
  CHECK(by["layers"].type == "int");
  CHECK(by["opt"].type == "categorical");
  CHECK(by["flag"].type == "bool");
  CHECK(by["epochs"].type == "fixed");
  const auto stage = report::space_params(config, "ft");
  REQUIRE(stage.size() == 1);
  CHECK(stage[0].name == "freeze");

  CHECK(report::csv_field("=SUM(A1)") == "'=SUM(A1)");
  CHECK(report::csv_field("@x") == "'@x");
  CHECK(report::csv_field("a\"b") == "\"a\"\"b\"");
  CHECK(report::csv_field("-1,2") == "\"'-1,2\"");
  CHECK(report::csv_number(0.1) == "0.1");
  CHECK(report::csv_number(std::nan("")) == "");
}

TEST_CASE("plots: parameter importance over trial rows finds the parameter that drives the objective") {
  const nlohmann::json config = {{"space",
                                  {{"a", {{"type", "float"}, {"low", 0}, {"high", 1}}},
                                   {"b", {{"type", "float"}, {"low", 0}, {"high", 1}}},
                                   {"c", {{"type", "choice"}, {"values", {"x", "y", "z"}}}}}}};
  const auto params = report::space_params(config);
  std::vector<store::TrialRow> rows;
  Rng rng(4);
  for (int i = 0; i < 300; ++i) {
    store::TrialRow t;
    t.id = i + 1;
    t.state = store::TrialState::kDone;
    const double a = rng.uniform(), b = rng.uniform();
    const char* c = i % 3 == 0 ? "x" : i % 3 == 1 ? "y" : "z";
    t.params = {{"a", a}, {"b", b}, {"c", c}};
    t.objective = (a - 0.3) * (a - 0.3);  // minimised at a = 0.3; b and c do not matter
    rows.push_back(t);
  }
  std::vector<const store::TrialRow*> ptrs;
  for (const auto& t : rows) ptrs.push_back(&t);
  const auto r = report::parameter_importance(ptrs, params, /*maximize=*/false);
  CHECK(r.n_trials == 300);
  REQUIRE(r.importances.size() == 3);
  CHECK(r.importances[0].first == "a");
  CHECK(r.importances[0].second > 0.9);
  CHECK(r.importances[1].second < 0.05);
  CHECK(r.importances[2].second < 0.05);
}

// --- issue 36: stages and lineage in every view ------------------------------------------------------

namespace {

// The cells of a CSV line without quoted commas (what these tests write).
std::vector<std::string> csv_cells(const std::string& line) {
  std::vector<std::string> out;
  size_t at = 0;
  while (true) {
    const size_t comma = line.find(',', at);
    out.push_back(line.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (comma == std::string::npos) return out;
    at = comma + 1;
  }
}

std::vector<std::string> csv_lines(const std::string& text) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < text.size()) {
    const size_t nl = text.find('\n', at);
    out.push_back(text.substr(at, nl - at));
    at = nl + 1;
  }
  return out;
}

}  // namespace

TEST_CASE("the keys hpctune adds to params: lineage and run settings, declared once for every trainer kind") {
  const auto shown = report::shown_params({{"lr", 0.1},
                                           {"hpctune_source_checkpoint", "/abs/ckpt"},
                                           {"hpctune_source_trial", 7},
                                           {"max_step", 12},
                                           {"layers", 3}});
  CHECK(shown.params == json{{"lr", 0.1}, {"layers", 3}});
  CHECK(shown.lineage == json{{"source_checkpoint", "/abs/ckpt"}, {"source_trial", 7}});
  CHECK(shown.run_settings == json{{"max_step", 12}});
  // The classifier kinds' start (a transfer target's init_from) is lineage too.
  CHECK(report::shown_params({{"init_from", "/abs/ckpt.bin"}, {"hidden", 32}}).lineage ==
        json{{"source_checkpoint", "/abs/ckpt.bin"}});
  CHECK(report::shown_params(json()).params == json::object());
  // A kind's own step setting (the mlp's epochs) that a pbt stage or a pausing search set: its
  // trial's meta names it, and it is the run setting max_step; searched, it stays a parameter.
  const json pbt_params = {{"lr", 0.1}, {"epochs", 4}};
  const auto pbt = report::shown_params(pbt_params, {{"stage_step_setting", "epochs"}, {"source", "initial"}});
  CHECK(pbt.params == json{{"lr", 0.1}});
  CHECK(pbt.run_settings == json{{"max_step", 4}});
  CHECK(report::shown_params(pbt_params, {{"source", "initial"}}).params == pbt_params);
  CHECK(report::shown_params(pbt_params, {{"stage_step_setting", 7}}).params == pbt_params);  // not a name: ignored
  CHECK(report::shown_params(pbt_params, json::array()).params == pbt_params);
  // The keys a stage set from its settings (a transfer target's freeze) are run settings under their
  // own names; a lineage key listed there keeps its role; names that are not strings are ignored.
  const json target = {{"lr", 0.1}, {"freeze", 2}, {"init_from", "/c.bin"}, {"classes", 5}};
  const auto shown_target = report::shown_params(target, {{"stage_settings", {"freeze", "init_from", 3}}});
  CHECK(shown_target.params == json{{"lr", 0.1}, {"classes", 5}});
  CHECK(shown_target.run_settings == json{{"freeze", 2}});
  CHECK(shown_target.lineage == json{{"source_checkpoint", "/c.bin"}});
  CHECK(report::shown_params(target, {{"stage_settings", "freeze"}}).params.contains("freeze"));  // not a list
  // Every key a kind's capabilities put in a trial's params is in the one list: the views would
  // otherwise show it as a searched parameter.
  int declared = 0;
  for (const auto& k : trainers::trainer_catalog()) {
    for (const char* key : {k.can.init_setting, k.can.source_trial_setting}) {
      if (key == nullptr) continue;
      const auto* internal = trainers::find_internal_param(key);
      REQUIRE_MESSAGE(internal != nullptr, k.kind << ": " << key << " is missing from trainers/internal_params.h");
      CHECK(internal->role == trainers::InternalParamRole::kLineage);
      ++declared;
    }
  }
  CHECK(declared >= 3);  // command's two, the classifier kinds' init_from
  // The step a stage sets for a program that counts its own steps is a run setting, never a
  // hyperparameter (the trainer takes it out of HPCTUNE_PARAMS).
  int own_steps = 0;
  for (const auto& k : trainers::trainer_catalog()) {
    if (k.can.params != trainers::TrainerParams::kAny || k.can.step_setting == nullptr) continue;
    const auto* internal = trainers::find_internal_param(k.can.step_setting);
    REQUIRE(internal != nullptr);
    CHECK(internal->role == trainers::InternalParamRole::kRunSetting);
    ++own_steps;
  }
  CHECK(own_steps == 1);
}

TEST_CASE("stages in the views: the stage column, lineage and run settings apart from the parameters") {
  TempDir dir;
  const std::string db = dir.file("lineage.db");
  const auto ids = testing::write_lineage_campaign(db);
  auto v = report::open_campaign(db);
  REQUIRE(v.ok());
  auto stages = v->store->stages(v->campaign.id);
  REQUIRE(stages.ok());
  REQUIRE(stages->size() == 3);
  CHECK(report::stage_name(v->trials[2], *stages) == "move");

  SUBCASE("the table: a stage column, the searched parameters, the trial it started from") {
    const std::string table = report::trials_table(v->trials, v->objectives.columns(), v->front(), &*stages);
    const std::string header = line_starting(table, "trial");
    CHECK(contains(header, " stage "));
    CHECK(contains(header, " lr "));
    CHECK(contains(header, " momentum "));
    CHECK(contains(header, " from "));
    for (const char* hidden : {"hpctune_source", "max_step", "source_checkpoint", "/data/runs"}) {
      CHECK_MESSAGE(!contains(table, hidden), hidden << " in\n" << table);
    }
    // The target's row: trial, stage, state, attempt, objective, lr, (momentum: none), from, seconds.
    std::vector<std::string> cells;
    for (const auto& line : csv_lines(table)) {
      std::vector<std::string> words;
      for (size_t at = 0; at < line.size();) {
        const size_t start = line.find_first_not_of(' ', at);
        if (start == std::string::npos) break;
        const size_t end = std::min(line.find(' ', start), line.size());
        words.push_back(line.substr(start, end - start));
        at = end;
      }
      if (!words.empty() && words[0] == std::to_string(ids.target)) cells = words;
    }
    REQUIRE_MESSAGE(cells.size() == 8, table);
    CHECK(cells[1] == "move");
    CHECK(cells[6] == std::to_string(ids.tune_b));
    // A campaign of one stage keeps the table as it was: no stage column.
    std::vector<store::StageRow> one = {stages->front()};
    CHECK(!contains(line_starting(report::trials_table(v->trials, v->objectives.columns(), v->front(), &one), "trial"),
                    " stage "));
  }

  SUBCASE("CSV: the stage, params.* the searched values, lineage.* and run_settings.* apart") {
    const auto lines = csv_lines(report::trials_csv(v->trials, {v->front(), &*stages}));
    REQUIRE(lines.size() == 5);
    const auto header = csv_cells(lines[0]);
    auto column = [&](const std::string& name) {
      const auto it = std::find(header.begin(), header.end(), name);
      return it == header.end() ? -1 : static_cast<int>(it - header.begin());
    };
    for (const char* name : {"stage", "params.lr", "params.momentum", "lineage.source_trial", "lineage.source_checkpoint",
                             "run_settings.max_step"}) {
      CHECK_MESSAGE(column(name) >= 0, name << " in " << lines[0]);
    }
    for (const char* name : {"params.hpctune_source_checkpoint", "params.hpctune_source_trial", "params.max_step"}) {
      CHECK_MESSAGE(column(name) < 0, name << " in " << lines[0]);
    }
    std::map<int64_t, std::vector<std::string>> rows;
    for (size_t i = 1; i < lines.size(); ++i) {
      auto cells = csv_cells(lines[i]);
      REQUIRE(cells.size() == header.size());
      rows[std::stoll(cells[0])] = cells;
    }
    CHECK(rows[ids.tune_a][column("stage")] == "tune");
    CHECK(rows[ids.target][column("stage")] == "move");
    CHECK(rows[ids.member][column("stage")] == "pop");
    CHECK(rows[ids.target][column("lineage.source_trial")] == std::to_string(ids.tune_b));
    CHECK(rows[ids.target][column("lineage.source_checkpoint")] == ids.checkpoint);
    CHECK(rows[ids.member][column("run_settings.max_step")] == "4");
    CHECK(rows[ids.member][column("lineage.source_trial")] == "");
  }

  SUBCASE("JSON: each trial's stage, params, lineage and run_settings; the export and one trial's detail") {
    const json list = report::trials_json(v->trials, v->front(), &*stages);
    REQUIRE(list.size() == 4);
    std::map<int64_t, json> by_id;
    for (const auto& j : list) by_id[j["trial"].get<int64_t>()] = j;
    CHECK(by_id[ids.tune_a]["stage"] == "tune");
    CHECK(by_id[ids.target]["stage"] == "move");
    CHECK(by_id[ids.target]["params"] == json{{"lr", 0.2}});
    CHECK(by_id[ids.target]["lineage"] == json{{"source_checkpoint", ids.checkpoint}, {"source_trial", ids.tune_b}});
    CHECK(by_id[ids.target]["run_settings"] == json::object());
    CHECK(by_id[ids.member]["params"] == json{{"lr", 0.05}, {"momentum", 0.9}});
    CHECK(by_id[ids.member]["run_settings"] == json{{"max_step", 4}});

    auto doc = report::export_json(*v);
    REQUIRE(doc.ok());
    for (const auto& t : (*doc)["trials"]) {
      const int64_t id = t["trial"].get<int64_t>();
      CHECK(t["stage"] == by_id[id]["stage"]);
      CHECK(t["params"] == by_id[id]["params"]);
      CHECK(t["lineage"] == by_id[id]["lineage"]);
      CHECK(t["run_settings"] == by_id[id]["run_settings"]);
    }

    auto member = report::load_trial(*v, ids.member);
    REQUIRE(member.ok());
    const json m = report::trial_detail_json(*member, *v, 0);
    CHECK(m["stage"] == "pop");
    CHECK(!m["params"].contains("max_step"));
    CHECK(m["run_settings"]["max_step"] == 4);
    CHECK(m["lineage"]["parents"] == json::array({{{"trial", ids.tune_a}, {"relation", "pbt_exploit"}}}));
    auto target = report::load_trial(*v, ids.target);
    REQUIRE(target.ok());
    const json t = report::trial_detail_json(*target, *v, 0);
    CHECK(t["stage"] == "move");
    CHECK(t["lineage"]["source_trial"] == ids.tune_b);
    CHECK(t["lineage"]["parents"] == json::array({{{"trial", ids.tune_b}, {"relation", "transfer_source"}}}));
  }
}

// Issue 36, item 2: a campaign the store records running, and whether its master still runs.
TEST_CASE("judge_master: the lock free and the heartbeat stale, or the process gone, mean the master is gone") {
  store::CampaignRow c;
  c.state = "running";
  c.heartbeat_at = 1000;
  // A fresh heartbeat, the lock free, the process not known gone (another host): running.
  auto m = report::judge_master(c, false, false, 1010, "x.db");
  CHECK_FALSE(m.gone);
  CHECK(m.text == "running");
  CHECK(m.heartbeat_age_s == doctest::Approx(10));
  CHECK(m.resume.empty());
  // The lock free and the heartbeat older than the threshold: gone, with the resume named.
  m = report::judge_master(c, false, false, 1000 + store::kMasterHeartbeatStale_s + 155, "x.db");
  CHECK(m.gone);
  CHECK(m.text == "interrupted (the master is gone: last heartbeat 3m 5s ago; resume with: hpctune resume x.db)");
  CHECK(m.resume == "hpctune resume x.db");
  const json j = report::master_json(c, m);
  CHECK(j["alive"] == false);
  CHECK(j["resume"] == "hpctune resume x.db");
  CHECK(j["heartbeat_at"] == 1000.0);
  // A stale heartbeat but the lock held: still running, with a note.
  m = report::judge_master(c, true, false, 1000 + store::kMasterHeartbeatStale_s + 15, "x.db");
  CHECK_FALSE(m.gone);
  CHECK(m.text == "running (no heartbeat for 45s; the master still holds its lock)");
  CHECK(report::master_json(c, m)["alive"] == true);
  // A fresh heartbeat, but its process on this host is gone and the lock free: gone at once.
  m = report::judge_master(c, false, true, 1005, "x.db");
  CHECK(m.gone);
  CHECK(m.text == "interrupted (the master is gone: last heartbeat 5s ago; resume with: hpctune resume x.db)");
  // The lock held wins over a pid that looks gone (a master on a host of the same name).
  CHECK_FALSE(report::judge_master(c, true, true, 1005, "x.db").gone);
  // A heartbeat further ahead than the stale window (a crafted 1e300) is no live master's: with the
  // lock free, gone (before: "running" forever, alive); seconds ahead (clock skew) is fresh.
  c.heartbeat_at = 1e300;
  m = report::judge_master(c, false, false, 5000, "x.db");
  CHECK(m.gone);
  CHECK(m.text == "interrupted (the master is gone: its heartbeat is recorded in the future; resume with: hpctune resume x.db)");
  m = report::judge_master(c, true, false, 5000, "x.db");
  CHECK_FALSE(m.gone);
  CHECK(m.text == "running (its heartbeat is recorded in the future; the master still holds its lock)");
  c.heartbeat_at = 5005;
  CHECK_FALSE(report::judge_master(c, false, false, 5000, "x.db").gone);
  // No heartbeat recorded (a database from before heartbeats): only a gone process says gone.
  c.heartbeat_at = 0;
  CHECK_FALSE(report::judge_master(c, false, false, 5000, "x.db").gone);
  m = report::judge_master(c, false, true, 5000, "x.db");
  CHECK(m.gone);
  CHECK(m.text == "interrupted (the master is gone: no heartbeat recorded; resume with: hpctune resume x.db)");
  CHECK(report::master_json(c, m)["heartbeat_age_s"].is_null());
  // A campaign that ended is shown as recorded.
  c.state = "completed";
  c.heartbeat_at = 1;
  m = report::judge_master(c, false, true, 5000, "x.db");
  CHECK_FALSE(m.gone);
  CHECK(m.text == "completed");
  CHECK(report::master_json(c, m)["alive"].is_null());
}
