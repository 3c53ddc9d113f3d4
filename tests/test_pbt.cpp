// The population-based training stage (workflow/pbt_stage.h) driven directly, no sockets: a store
// in a temporary directory, fake trial directories with fake checkpoint-stage0.bin files (random
// bytes), reports through on_report and pauses through on_paused, recorded the way the scheduler
// records them (the metrics, the verdict's note as events, its lineage, pause_trial and
// trial_paused). Checks the two bugs Ray's PBT has had: an exploited member must get the source's
// exact weights at its boundary, and train with the perturbed values of the params those weights
// were trained with.
#include <doctest/doctest.h>

#include <limits>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <sstream>
#include <vector>

#include "common/rng.h"
#include "scheduler/stages.h"
#include "store/store.h"
#include "stage_fixture.h"
#include "temp_dir.h"
#include "workflow/checkpoint_snapshot.h"
#include "workflow/pbt_policy.h"
#include "workflow/pbt_stage.h"
#include "workflow/stages.h"

using namespace hpctune;
using hpctune::testing::TempDir;
using scheduler::Verdict;
using workflow::PbtSource;
using workflow::PbtSpec;
namespace fs = std::filesystem;

namespace {

using hpctune::testing::numeric;
using hpctune::testing::require_ok;

search::Space pbt_space() {
  search::ParamSpec lr = numeric("lr", search::ParamType::kFloat, 1e-4, 1.0, true);
  search::ParamSpec momentum = numeric("momentum", search::ParamType::kFloat, 0.0, 0.99);
  search::ParamSpec width = numeric("act", search::ParamType::kChoice, 0, 0);
  width.choices = {"relu", "tanh"};
  auto space = search::Space::create({lr, momentum, width});
  REQUIRE(space.ok());
  return space.value();
}

PbtSpec pbt_spec(uint64_t seed = 7, double resample = 0.0) {
  PbtSpec spec;
  spec.settings.population = 4;
  spec.settings.ready = 2;
  spec.settings.steps = 6;
  spec.settings.step_key = "epochs";  // an mlp's (the catalog's step setting)
  spec.settings.quantile = 0.25;
  spec.settings.resample_probability = resample;
  spec.space = pbt_space();
  spec.objective = {"val_accuracy", true};
  spec.seed = seed;
  return spec;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// A campaign with one pbt stage whose trials' files are under <tmp>/run: plays the scheduler.
struct Harness {
  struct Member {
    int64_t id = 0, attempt = 1;
    nlohmann::json params;
    std::optional<Verdict> pending;  // a pause decided, not yet recorded
    int64_t pending_step = 0;
  };

  explicit Harness(PbtSpec s) : spec(std::move(s)) {
    testing::StageStore made(tmp.file("c.db"), "pbt", spec.seed, 0);
    stage = made.add_stage("pbt", "pbt", 0);
    store = std::move(made.db);
    campaign = made.campaign;
    run_dir = tmp.file("c.db") + ".trials";  // as the master names it: <db>.trials
    fs::create_directories(run_dir);
    source = std::make_unique<PbtSource>(spec);
    require_ok(source->begin(context(false)));
  }

  scheduler::StageContext context(bool resuming) {
    scheduler::StageContext ctx;
    ctx.store = store.get();
    ctx.campaign_id = campaign;
    ctx.stage_id = stage;
    ctx.run_dir = run_dir;
    ctx.resuming = resuming;
    return ctx;
  }

  // Asks the whole population and records it, each assigned as attempt 1.
  void start() {
    auto asked = source->ask(10);
    require_ok(asked);
    REQUIRE(asked->size() == static_cast<std::size_t>(spec.settings.population));
    for (const search::Suggestion& s : *asked) {
      // The step the stage sets is named in the meta: the views show it as a run setting.
      CHECK(s.meta.value("stage_step_setting", "") == spec.settings.step_key);
      store::TrialRow row;
      row.campaign_id = campaign;
      row.stage_id = stage;
      row.seq = s.seq;
      row.params = s.params;
      auto id = store->insert_trial(row);
      require_ok(id);
      require_ok(store->mark_assigned(*id, 1, 0, 0, 1));
      members[s.seq] = {*id, 1, s.params, std::nullopt, 0};
      fs::create_directories(dir(s.seq));
    }
  }

  std::string dir(int64_t seq) { return run_dir + "/" + std::to_string(members.at(seq).id); }

  scheduler::TrialView view(int64_t seq) {
    Member& m = members.at(seq);
    return {m.id, seq, m.attempt, &m.params, dir(seq)};
  }

  // The trainer's checkpoint at a step: fresh random bytes, returned.
  std::string write_checkpoint(int64_t seq) {
    std::string bytes(256, '\0');
    for (char& c : bytes) c = static_cast<char>(noise.below(256));
    std::ofstream(dir(seq) + "/checkpoint-stage0.bin", std::ios::binary) << bytes;
    return bytes;
  }

  // A report of member seq at step with the objective `value`, recorded and judged.
  Verdict report(int64_t seq, int64_t step, double value) {
    Member& m = members.at(seq);
    require_ok(store->add_metrics(m.id, m.attempt, step, {{"val_accuracy", value}}, 1));
    Verdict v = source->on_report(view(seq), step, value);
    if (v.kind == Verdict::Kind::kPause) {
      for (auto& [kind, detail] : v.note.items()) require_ok(store->add_event(campaign, kind, m.id, m.attempt, 0, detail, 1));
      if (v.lineage_parent != 0) require_ok(store->add_lineage(m.id, v.lineage_parent, v.lineage_relation));
      m.pending = v;
      m.pending_step = step;
    }
    return v;
  }

  // The paused attempt ends: recorded, then the snapshot made; the next attempt is assigned.
  void pause(int64_t seq) {
    Member& m = members.at(seq);
    REQUIRE(m.pending);
    auto applied = store->pause_trial(m.id, m.attempt, m.pending->params, m.pending->resume_from, "pbt", 1);
    require_ok(applied);
    REQUIRE(*applied);
    require_ok(store->add_event(campaign, "trial_paused", m.id, m.attempt, 0,
                                {{"step", m.pending_step}, {"resume_from", m.pending->resume_from}}, 1));
    require_ok(source->on_paused(view(seq), m.pending_step));
    m.attempt += 1;
    m.params = m.pending->params;
    m.pending.reset();
    require_ok(store->mark_assigned(m.id, m.attempt, 0, 0, 1));
  }

  void finish(int64_t seq, double value) {
    Member& m = members.at(seq);
    auto done = store->finish_trial(m.id, m.attempt, store::TrialState::kDone,
                                    {{"val_accuracy", value}, {"test_accuracy", value - 0.01}}, value,
                                    spec.settings.steps, "", 1);
    require_ok(done);
    search::Observation obs;
    obs.seq = seq;
    obs.params = m.params;
    obs.values = {value};
    source->tell(obs);
  }

  // The recorded suggestions, as the scheduler hands them to restore().
  std::vector<search::Record> history() {
    auto rows = store->trials(campaign);
    require_ok(rows);
    std::vector<search::Record> out;
    for (const auto& row : *rows) {
      search::Record r;
      r.suggestion.seq = row.seq;
      r.suggestion.params = row.params;
      if (store::is_final(row.state)) {
        search::Observation obs;
        obs.seq = row.seq;
        obs.params = row.params;
        r.observation = obs;
      }
      out.push_back(std::move(r));
    }
    return out;
  }

  // A master restart: a new source rebuilt from the store.
  std::unique_ptr<PbtSource> restarted() {
    auto fresh = std::make_unique<PbtSource>(spec);
    require_ok(fresh->begin(context(true)));
    fresh->restore(history());
    return fresh;
  }

  std::string relative(const std::string& path) {
    return path.starts_with(run_dir) ? path.substr(run_dir.size()) : path;
  }

  TempDir tmp;
  PbtSpec spec;
  std::unique_ptr<store::Store> store;
  int64_t campaign = 0, stage = 0;
  std::string run_dir;
  std::unique_ptr<PbtSource> source;
  std::map<int64_t, Member> members;
  Rng noise{12345};
};

// Round 1: every member reaches step 2, worst first (0.1, 0.5, 0.8, 0.9), so each is in the top of
// the members ranked so far and continues; then each pause is recorded. Returns member 0's bytes
// at step 2.
std::string first_round(Harness& h) {
  h.start();
  const double values[] = {0.9, 0.8, 0.5, 0.1};
  std::string bytes0;
  for (int64_t seq = 3; seq >= 0; --seq) {
    CHECK(h.report(seq, 1, values[seq] - 0.05).kind == Verdict::Kind::kContinue);
    const std::string bytes = h.write_checkpoint(seq);
    if (seq == 0) bytes0 = bytes;
    Verdict v = h.report(seq, 2, values[seq]);
    REQUIRE(v.kind == Verdict::Kind::kPause);
    CHECK(v.note.contains("pbt_continue"));
    CHECK(v.lineage_parent == 0);
  }
  for (int64_t seq = 0; seq < 4; ++seq) h.pause(seq);
  return bytes0;
}

// After first_round: member 0, the best, reaches step 4 first and continues; member 3, then the
// worst at step 4, exploits member 0's step-4 snapshot. Both pauses recorded; member 3's verdict.
Verdict second_round_exploit(Harness& h) {
  h.write_checkpoint(0);
  REQUIRE(h.report(0, 4, 0.9).note.contains("pbt_continue"));
  h.pause(0);
  h.write_checkpoint(3);
  const Verdict exploit = h.report(3, 4, 0.05);
  REQUIRE(exploit.note.contains("pbt_exploit"));
  CHECK(exploit.resume_from == h.dir(0) + "/pbt/001-step-4");
  h.pause(3);
  return exploit;
}

// A verdict as comparable text: kind, params, resume_from relative to the run directory, lineage.
std::string describe(Harness& h, const Verdict& v) {
  std::ostringstream out;
  out << static_cast<int>(v.kind) << " " << v.params.dump() << " " << h.relative(v.resume_from) << " "
      << v.lineage_parent << " " << v.lineage_relation;
  return out.str();
}

}  // namespace

TEST_CASE("pbt: a bottom member exploits a top one: its exact snapshot weights and its perturbed params") {
  Harness h(pbt_spec());
  first_round(h);
  // Member 0, the best, trains (2, 4] and continues: its step-4 snapshot is made at its pause.
  const nlohmann::json params0 = h.members.at(0).params;  // member 0's params of interval (2, 4]
  const std::string bytes0 = h.write_checkpoint(0);
  REQUIRE(h.report(0, 4, 0.95).note.contains("pbt_continue"));
  h.pause(0);
  // Member 0 trains on: its trial directory changes; its step-4 snapshot must not.
  const std::string later = h.write_checkpoint(0);
  REQUIRE(later != bytes0);
  h.members.at(0).params["momentum"] = 0.123;  // its current params are not the snapshot's either

  h.write_checkpoint(3);
  Verdict v = h.report(3, 4, 0.05);  // now the worst of four: bottom quantile (1 of 4)
  REQUIRE(v.kind == Verdict::Kind::kPause);
  const std::string snap = h.dir(0) + "/pbt/001-step-4";
  CHECK(v.resume_from == snap);
  CHECK(read_file(snap + "/checkpoint-stage0.bin") == bytes0);
  CHECK(v.lineage_parent == h.members.at(0).id);
  CHECK(v.lineage_relation == "pbt_exploit");

  // The params: member 0's params of its snapshot, each float times 0.8 or 1.2 within bounds, the
  // choice kept; epochs: the next boundary from the source's step.
  CHECK(v.params.at("epochs") == 6);
  CHECK(v.params.at("act") == params0.at("act"));
  int changed = 0;
  for (const char* name : {"lr", "momentum"}) {
    const search::ParamSpec* spec = h.spec.space.find(name);
    const double old = params0.at(name).get<double>(), now = v.params.at(name).get<double>();
    const bool down = now == doctest::Approx(std::clamp(old * 0.8, spec->low, spec->high));
    const bool up = now == doctest::Approx(std::clamp(old * 1.2, spec->low, spec->high));
    CHECK((down || up));
    changed += now != old ? 1 : 0;
  }
  CHECK(changed > 0);

  // The note: exploit and explore with source, target, step, old and new values.
  REQUIRE(v.note.contains("pbt_exploit"));
  REQUIRE(v.note.contains("pbt_explore"));
  const nlohmann::json& ex = v.note["pbt_exploit"];
  CHECK(ex["target"] == h.members.at(3).id);
  CHECK(ex["source"] == h.members.at(0).id);
  CHECK(ex["step"] == 4);
  CHECK(ex["source_step"] == 4);
  CHECK(ex["source_value"].get<double>() == doctest::Approx(0.95));
  CHECK(ex["target_value"].get<double>() == doctest::Approx(0.05));
  CHECK(ex["checkpoint"] == std::to_string(h.members.at(0).id) + "/pbt/001-step-4");  // relative to <db>.trials
  const nlohmann::json& xp = v.note["pbt_explore"];
  CHECK(xp["target"] == h.members.at(3).id);
  CHECK(xp["step"] == 4);
  CHECK(xp["old"]["lr"] == params0["lr"]);
  CHECK(xp["old"]["momentum"] == params0["momentum"]);
  CHECK(xp["new"]["lr"] == v.params["lr"]);
  CHECK(xp["new"]["momentum"] == v.params["momentum"]);

  // Recorded, the next attempt has exactly these params and this checkpoint.
  h.pause(3);
  auto row = h.store->trial(h.members.at(3).id);
  require_ok(row);
  CHECK((*row)->params == v.params);
  CHECK((*row)->resume_from == snap);
  auto lineage = h.store->lineage(h.members.at(3).id);
  require_ok(lineage);
  REQUIRE(lineage->size() == 1);
  CHECK((*lineage)[0].parent_trial_id == h.members.at(0).id);
  CHECK((*lineage)[0].relation == "pbt_exploit");
  // Member 3's own weights at its step 4 are kept too (its second decision).
  CHECK(fs::is_directory(h.dir(3) + "/pbt/001-step-4"));
  CHECK(read_file(snap + "/checkpoint-stage0.bin") == bytes0);
}

TEST_CASE("pbt: a top member continues with its own params from its own snapshot") {
  Harness h(pbt_spec());
  first_round(h);
  const nlohmann::json params0 = h.members.at(0).params;
  const std::string bytes = h.write_checkpoint(0);
  Verdict v = h.report(0, 4, 0.95);
  REQUIRE(v.kind == Verdict::Kind::kPause);
  CHECK(v.note.contains("pbt_continue"));
  CHECK_FALSE(v.note.contains("pbt_exploit"));
  CHECK(v.lineage_parent == 0);
  const std::string own = h.dir(0) + "/pbt/001-step-4";
  CHECK(v.resume_from == own);
  nlohmann::json expected = params0;
  expected["epochs"] = 6;
  CHECK(v.params == expected);
  h.pause(0);
  CHECK(read_file(own + "/checkpoint-stage0.bin") == bytes);
  // The trial's own checkpoint is gone: its next attempt can only start from resume_from.
  CHECK_FALSE(fs::exists(h.dir(0) + "/checkpoint-stage0.bin"));
  // Made again (a restart before the pause was recorded): the snapshot stays as it was.
  h.write_checkpoint(0);
  require_ok(h.source->on_paused(h.view(0), 4));
  CHECK(read_file(own + "/checkpoint-stage0.bin") == bytes);
  CHECK_FALSE(fs::exists(h.dir(0) + "/checkpoint-stage0.bin"));
  // At the last step: no pause, the member ends done.
  CHECK(h.report(0, 6, 0.96).kind == Verdict::Kind::kContinue);
}

TEST_CASE("pbt: a checkpoint that is a link out of the trial's directory, or a FIFO, is refused, never copied") {
  Harness h(pbt_spec());
  first_round(h);
  const std::string outside = h.tmp.file("outside.bin");
  std::ofstream(outside) << "someone else's file";
  const std::string planted = h.dir(0) + "/checkpoint-stage0.bin";
  std::string why;
  SUBCASE("a symbolic link") {
    fs::create_symlink(outside, planted);
    why = "symbolic link";
  }
  SUBCASE("a FIFO") {
    REQUIRE(::mkfifo(planted.c_str(), 0600) == 0);
    why = "not a regular file";
  }
  Verdict v = h.report(0, 4, 0.95);
  REQUIRE(v.kind == Verdict::Kind::kPause);
  auto s = h.source->on_paused(h.view(0), 4);
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().code() == Errc::kFailed);
  INFO(s.error().message());
  CHECK(s.error().message().find("pbt: trial " + std::to_string(h.members.at(0).id) + " at step 4: its checkpoint " +
                                 planted + " is refused: ") == 0);
  CHECK(s.error().message().find(why) != std::string::npos);
  // Nothing of the file outside went into a snapshot another member would train from.
  CHECK_FALSE(fs::exists(v.resume_from + "/checkpoint-stage0.bin"));
  CHECK_FALSE(fs::exists(v.resume_from + ".tmp/checkpoint-stage0.bin"));
}

TEST_CASE("pbt: explore with resampling stays inside the space; a snapshot needs checkpoint files") {
  PbtSpec spec = pbt_spec(3, 1.0);
  Rng rng(1);
  for (int i = 0; i < 50; ++i) {
    search::Params p = spec.space.sample(rng);
    p["epochs"] = 4;
    workflow::Explored e = workflow::explore(spec.space, p, spec.settings, rng);
    CHECK(e.params.at("epochs") == 4);
    search::Params hyper = e.params;
    hyper.erase("epochs");
    CHECK(spec.space.contains(hyper).ok());
    CHECK(e.resampled.size() == 3);
  }
  // Clipping: a value at the top of its range multiplied by 1.2 stays at the top.
  spec.settings.resample_probability = 0;
  for (int i = 0; i < 20; ++i) {
    workflow::Explored e = workflow::explore(spec.space, {{"lr", 1.0}, {"momentum", 0.99}, {"act", "relu"}}, spec.settings, rng);
    CHECK(e.params["lr"].get<double>() <= 1.0);
    CHECK(e.params["momentum"].get<double>() <= 0.99);
  }
  CHECK(workflow::quantile_size(8, 0.25) == 2);
  CHECK(workflow::quantile_size(2, 0.25) == 1);
  CHECK(workflow::quantile_size(3, 0.5) == 1);
  CHECK(workflow::quantile_size(1, 0.5) == 0);

  Harness h(pbt_spec());
  h.start();
  REQUIRE(h.report(0, 2, 0.5).kind == Verdict::Kind::kPause);
  h.members.at(0).pending.reset();
  // No checkpoint in the trial's directory: the trainer saves none, a clear error.
  auto s = h.source->on_paused(h.view(0), 2);
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().code() == Errc::kFailed);
  CHECK(s.error().message().find("checkpoint") != std::string::npos);
}

TEST_CASE("pbt: the same inputs give the same decisions; another seed other ones") {
  auto run = [](uint64_t seed) {
    Harness h(pbt_spec(seed));
    first_round(h);
    std::vector<std::string> out;
    for (int64_t seq = 0; seq < 4; ++seq) out.push_back(h.members.at(seq).params.dump());
    h.write_checkpoint(3);
    out.push_back(describe(h, h.report(3, 4, 0.05)));
    h.pause(3);
    h.write_checkpoint(2);
    out.push_back(describe(h, h.report(2, 4, 0.02)));
    return out;
  };
  const auto a = run(7), b = run(7), c = run(8);
  CHECK(a == b);
  CHECK(a != c);
}

TEST_CASE("pbt: a restarted master rebuilds the state and decides the same; a boundary seen again keeps its verdict") {
  Harness h(pbt_spec());
  first_round(h);
  const Verdict exploit = second_round_exploit(h);
  // Member 1 reaches step 4: decided and recorded, but the master dies before its pause is.
  h.write_checkpoint(1);
  const Verdict pending = h.report(1, 4, 0.85);
  REQUIRE(pending.kind == Verdict::Kind::kPause);
  // Member 0 ends at step 6 with a poor score: its latest score is a report no decision recorded.
  CHECK(h.report(0, 6, 0.2).kind == Verdict::Kind::kContinue);
  h.finish(0, 0.2);

  auto fresh = h.restarted();
  CHECK(fresh->exhausted());
  auto none = fresh->ask(4);
  require_ok(none);
  CHECK(none->empty());
  // Member 1's attempt runs again (the restart requeued it) and reports step 4 again: same verdict.
  h.members.at(1).attempt += 1;
  const Verdict again = fresh->on_report(h.view(1), 4, 0.85);
  CHECK(describe(h, again) == describe(h, pending));
  CHECK(again.note.empty());  // recorded the first time
  // Also without a restart: a lost attempt that reports the boundary again.
  CHECK(describe(h, h.source->on_report(h.view(1), 4, 0.85)) == describe(h, pending));

  // The next decisions, with and without the restart, are the same: member 2 falls to the bottom
  // and exploits member 1 (now the best: 0.85 against member 0's 0.2), its snapshot made in both.
  for (PbtSource* s : {h.source.get(), fresh.get()}) require_ok(s->on_paused(h.view(1), 4));
  h.write_checkpoint(2);
  const Verdict live = h.source->on_report(h.view(2), 4, 0.01);
  const Verdict resumed = fresh->on_report(h.view(2), 4, 0.01);
  REQUIRE(live.note.contains("pbt_exploit"));
  CHECK(live.note["pbt_exploit"]["source"] == h.members.at(1).id);
  CHECK(live.resume_from == h.dir(1) + "/pbt/001-step-4");
  CHECK(describe(h, live) == describe(h, resumed));
  CHECK(live.note.dump() == resumed.note.dump());
  // And the schedules agree.
  CHECK(workflow::schedule_to_json(h.source->schedule_of(3)) == workflow::schedule_to_json(fresh->schedule_of(3)));
}

TEST_CASE("pbt: a member whose last report was NaN (diverged) ranks worst after a restart too") {
  Harness h(pbt_spec());
  first_round(h);
  // Member 0, the best at step 2 (0.9), diverges: NaN at step 4 ranks it worst, so it exploits.
  h.write_checkpoint(0);
  const Verdict diverged = h.report(0, 4, std::numeric_limits<double>::quiet_NaN());
  REQUIRE(diverged.note.contains("pbt_exploit"));
  h.pause(0);
  // A restart rebuilds member 0's latest score from its reports: NaN, not its step-2 0.9. Member 2
  // at 0.01 is then second to last, above member 0, and continues, with and without the restart; a
  // restart that skipped the NaN ranked member 0 first (0.9) and member 2 last: an exploit.
  auto fresh = h.restarted();
  h.write_checkpoint(2);
  const Verdict live = h.source->on_report(h.view(2), 4, 0.01);
  const Verdict resumed = fresh->on_report(h.view(2), 4, 0.01);
  REQUIRE(live.note.contains("pbt_continue"));
  CHECK(describe(h, live) == describe(h, resumed));
  CHECK(live.note.dump() == resumed.note.dump());
}

TEST_CASE("pbt: a restart refuses a crafted decision event (a path or value of another type); a null value is NaN") {
  // Before: the restart converted these with get<>(), and `hpctune resume` ended in "internal error:
  // type must be string, but is number".
  struct Case {
    const char* kind;
    const char* key;
    nlohmann::json value;
    const char* expect;  // "" = accepted
  };
  const Case cases[] = {
      {"pbt_continue", "snapshot", 5, "a snapshot or resume_from that is not a path"},
      {"pbt_continue", "resume_from", nlohmann::json::array({1}), "a snapshot or resume_from that is not a path"},
      {"pbt_continue", "value", "x", "a value that is not a number"},
      {"pbt_exploit", "source_value", "x", "a source_value or target_value that is not a number"},
      {"pbt_exploit", "target_value", nlohmann::json::object(), "a source_value or target_value that is not a number"},
      {"trial_paused", "step", "x", "a step that is not an integer"},
      // Paths other than the decision's own snapshot (before, the master copied the member's
      // checkpoint to any snapshot path, and its next attempt started from any resume_from).
      {"pbt_continue", "snapshot", "/tmp/elsewhere", "a snapshot or resume_from other than the decision's own ("},
      {"pbt_continue", "resume_from", "/etc/passwd", "a snapshot or resume_from other than the decision's own ("},
      {"pbt_exploit", "resume_from", "/etc/passwd", "a snapshot or resume_from other than the decision's own ("},
      {"pbt_exploit", "target_value", nullptr, ""},  // a diverged member's NaN, as JSON records it
  };
  for (const Case& c : cases) {
    CAPTURE(c.kind);
    CAPTURE(c.key);
    Harness h(pbt_spec());
    first_round(h);
    second_round_exploit(h);
    // The recorded event of that kind, again with one field replaced (the decision after the last).
    auto events = h.store->events(h.campaign, 0);
    require_ok(events);
    std::optional<store::EventRow> last;
    for (const auto& e : *events)
      if (e.kind == c.kind) last = e;
    REQUIRE(last);
    nlohmann::json detail = last->detail;
    if (detail.contains("ordinal")) {
      // The next decision names its own snapshot (pbt/<ordinal>-step-<step>), and starts from it
      // unless it exploits another member's.
      const int64_t ordinal = detail["ordinal"].get<int64_t>();
      auto tag = [](int64_t o) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "/pbt/%03lld-", static_cast<long long>(o));
        return std::string(buf);
      };
      const std::string old_snapshot = detail["snapshot"].get<std::string>();
      std::string snapshot = old_snapshot;
      snapshot.replace(snapshot.rfind(tag(ordinal)), tag(ordinal).size(), tag(ordinal + 1));
      if (detail["resume_from"] == old_snapshot) detail["resume_from"] = snapshot;
      detail["snapshot"] = snapshot;
      detail["ordinal"] = ordinal + 1;
    }
    detail[c.key] = c.value;
    require_ok(h.store->add_event(h.campaign, c.kind, last->trial_id, last->attempt, 0, detail, 1));
    auto fresh = std::make_unique<PbtSource>(h.spec);
    const Status begun = fresh->begin(h.context(true));
    if (std::string(c.expect).empty()) {
      CHECK_MESSAGE(begun.ok(), begun.error().to_string());
      continue;
    }
    REQUIRE_FALSE(begun.ok());
    CHECK(begun.error().code() == Errc::kInvalidArgument);
    CHECK_MESSAGE(begun.error().message().find(std::string("has ") + c.expect) != std::string::npos,
                  begun.error().message());
  }
}

TEST_CASE("pbt: decisions are recorded relative to the trial directory; absolute ones of a moved campaign map to it") {
  Harness h(pbt_spec());
  first_round(h);
  second_round_exploit(h);
  auto events = h.store->events(h.campaign, 0);
  require_ok(events);
  std::optional<store::EventRow> last;
  for (const auto& e : *events) {
    if (e.kind != "pbt_continue" && e.kind != "pbt_exploit") continue;
    CAPTURE(e.detail.dump());
    // "<trial>/pbt/<nnn>-step-<k>": a moved campaign (its database and <db>.trials) resumes.
    CHECK(e.detail.at("snapshot").get<std::string>().rfind(std::to_string(e.trial_id) + "/pbt/", 0) == 0);
    CHECK(e.detail.at("resume_from").get<std::string>().front() != '/');
    if (e.kind == "pbt_continue") last = e;
  }
  REQUIRE(last);
  // The next decision of that member as an older version recorded it: absolute, here under the
  // place the campaign was moved from (/gone/<dir>/c.db.trials), or under a directory of another
  // name (refused, as any path other than the decision's own).
  for (const std::string& root : {std::string("/gone/away/c.db.trials/"), std::string("/gone/away/x.trials/")}) {
    CAPTURE(root);
    Harness fresh_h(pbt_spec());
    first_round(fresh_h);
    second_round_exploit(fresh_h);
    nlohmann::json detail = last->detail;
    const int64_t ordinal = detail["ordinal"].get<int64_t>();
    char name[64];
    std::snprintf(name, sizeof name, "/pbt/%03lld-step-%lld", static_cast<long long>(ordinal + 1),
                  detail["step"].get<long long>());
    const std::string next = root + std::to_string(last->trial_id) + name;
    detail["ordinal"] = ordinal + 1;
    detail["snapshot"] = next;
    detail["resume_from"] = next;
    require_ok(fresh_h.store->add_event(fresh_h.campaign, "pbt_continue", last->trial_id, last->attempt, 0, detail, 1));
    auto fresh = std::make_unique<PbtSource>(fresh_h.spec);
    const Status begun = fresh->begin(fresh_h.context(true));
    if (root.find("c.db.trials") != std::string::npos) {
      CHECK_MESSAGE(begun.ok(), begun.error().to_string());
    } else {
      REQUIRE_FALSE(begun.ok());
      CHECK(begun.error().message().find("a snapshot or resume_from other than the decision's own") != std::string::npos);
    }
  }
}

TEST_CASE("pbt: the best member's schedule follows its exploits back; it replays interval by interval") {
  Harness h(pbt_spec());
  first_round(h);
  const nlohmann::json params0 = h.members.at(0).params;  // member 0's params of (0, 2] and (2, 4]
  const Verdict exploit = second_round_exploit(h);
  // Member 3 trains (4, 6] from member 0's weights with the explored values, the best in the end.
  CHECK(h.report(3, 6, 0.98).kind == Verdict::Kind::kContinue);
  h.finish(3, 0.98);
  CHECK(h.report(0, 6, 0.9).kind == Verdict::Kind::kContinue);
  h.finish(0, 0.9);
  for (int64_t seq = 1; seq < 3; ++seq) {
    h.write_checkpoint(seq);
    REQUIRE(h.report(seq, 4, 0.9 - 0.1 * static_cast<double>(seq)).kind == Verdict::Kind::kPause);
    h.pause(seq);
    CHECK(h.report(seq, 6, 0.9 - 0.1 * static_cast<double>(seq)).kind == Verdict::Kind::kContinue);
    h.finish(seq, 0.9 - 0.1 * static_cast<double>(seq));
  }

  auto result = h.source->result(h.context(false));
  require_ok(result);
  const nlohmann::json& r = *result;
  CHECK(r["population"] == 4);
  CHECK(r["steps"] == 6);
  CHECK(r["ready"] == 2);
  CHECK(r["exploits"].get<int64_t>() >= 1);
  CHECK(r["explores"] == r["exploits"]);
  CHECK(r["best"]["trial"] == h.members.at(3).id);
  CHECK(r["best"]["value"].get<double>() == doctest::Approx(0.98));
  CHECK(r["best"]["test_accuracy"].get<double>() == doctest::Approx(0.97));
  CHECK(r["best"]["test_metric"] == "test_accuracy");  // the objective's val_accuracy, as its held-out figure
  nlohmann::json p0 = params0, p1 = exploit.params;
  p0.erase("epochs");
  p1.erase("epochs");
  const nlohmann::json expected = nlohmann::json::array({
      {{"from_step", 0}, {"to_step", 2}, {"params", p0}, {"trial", h.members.at(0).id}},
      {{"from_step", 2}, {"to_step", 4}, {"params", p0}, {"trial", h.members.at(0).id}},
      {{"from_step", 4}, {"to_step", 6}, {"params", p1}, {"trial", h.members.at(3).id}},
  });
  CHECK(r["schedule"] == expected);

  auto replay = workflow::replay_schedule(r["schedule"], "epochs");
  require_ok(replay);
  REQUIRE(replay->size() == 3);
  CHECK((*replay)[0].at("epochs") == 2);
  CHECK((*replay)[0].at("lr") == p0.at("lr"));
  CHECK((*replay)[2].at("epochs") == 6);
  CHECK((*replay)[2].at("momentum") == p1.at("momentum"));
  nlohmann::json gap = r["schedule"];
  gap.erase(1);
  CHECK(workflow::replay_schedule(gap, "epochs").error().code() == Errc::kInvalidArgument);

  // A restarted master computes the same result.
  auto fresh = h.restarted();
  auto again = fresh->result(h.context(true));
  require_ok(again);
  CHECK(*again == r);
}

TEST_CASE("pbt: the stage kind is registered, and its settings are checked") {
  auto names = workflow::stage_kind_names();
  CHECK(std::find(names.begin(), names.end(), "pbt") != names.end());
  auto s = workflow::pbt_settings("p", {{"population", 6}, {"perturb", nlohmann::json::array({0.5, 2.0})}}, {{"kind", "mlp"}, {"epochs", 12}});
  require_ok(s);
  CHECK(s->population == 6);
  CHECK(s->ready == 2);
  CHECK(s->steps == 12);
  CHECK(s->perturb_low == 0.5);
  CHECK(s->perturb_high == 2.0);
  CHECK(workflow::pbt_settings("p", {{"population", 1}}, {{"kind", "mlp"}, {"epochs", 4}}).error().code() == Errc::kConfig);
  CHECK(workflow::pbt_settings("p", {{"quantile", 0.7}}, {{"kind", "mlp"}, {"epochs", 4}}).error().code() == Errc::kConfig);
  CHECK(workflow::pbt_settings("p", {{"perturb", nlohmann::json::array({0.8})}}, {{"kind", "mlp"}, {"epochs", 4}}).error().code() == Errc::kConfig);
  CHECK(workflow::pbt_settings("p", nlohmann::json::object(), nlohmann::json::object()).error().code() == Errc::kConfig);
  // The step setting is the catalog's (config/trainer_kinds.h), not a literal: mlp's epochs, sleep's
  // steps, command's max_step (the step its program trains to: HPCTUNE_MAX_STEP); a kind with no
  // step setting would be refused naming trainer.kind.
  CHECK(s->step_key == "epochs");
  CHECK(s->checkpoint_directory.empty());  // the built-ins' checkpoint-stage*.bin files
  auto sleep = workflow::pbt_settings("p", nlohmann::json::object(), {{"kind", "sleep"}, {"steps", 9}});
  require_ok(sleep);
  CHECK(sleep->step_key == "steps");
  CHECK(sleep->steps == 9);
  auto command = workflow::pbt_settings("p", nlohmann::json::object(), {{"kind", "command"}, {"command", "./t"}, {"max_step", 6}});
  require_ok(command);
  CHECK(command->step_key == "max_step");
  CHECK(command->steps == 6);
  CHECK(command->checkpoint_directory == "checkpoint");  // the program's tree, snapshotted whole
  // max_step 0 (no limit) gives no steps: the stage's steps must be given.
  auto unbounded = workflow::pbt_settings("p", nlohmann::json::object(), {{"kind", "command"}, {"command", "./t"}});
  REQUIRE_FALSE(unbounded.ok());
  CHECK(unbounded.error().message().find("steps") != std::string::npos);
  CHECK_FALSE(workflow::pbt_settings("p", nlohmann::json::object(), {{"kind", "no such kind"}}).ok());

  // A campaign's view with `epochs` in its space is refused; a good one builds a stage.
  config::CampaignConfig view;
  view.objectives = {{"val_accuracy", true}};
  view.trainer = {{"kind", "mlp"}, {"epochs", 6}};
  view.space = pbt_space();
  auto stage = workflow::make_pbt_stage("p", {{"population", 5}}, view);
  require_ok(stage);
  CHECK((*stage)->max_trials() == 5);
  CHECK((*stage)->trainer() == view.trainer);
  REQUIRE((*stage)->source() != nullptr);
  CHECK((*stage)->source()->kind() == "pbt");
  search::ParamSpec epochs = numeric("epochs", search::ParamType::kInt, 1, 9);
  view.space = search::Space::create({epochs}).value();
  CHECK(workflow::make_pbt_stage("p", {}, view).error().code() == Errc::kConfig);
  // Without trial directories the stage cannot start.
  scheduler::StageContext ctx;
  CHECK((*stage)->begin(ctx).error().code() == Errc::kInvalidArgument);
}

TEST_CASE("pbt: a schedule is replayed: every member trains through its intervals, no exploit, no explore") {
  PbtSpec spec = pbt_spec();
  const nlohmann::json schedule = nlohmann::json::parse(R"([
      {"from_step": 0, "to_step": 2, "params": {"lr": 0.1, "momentum": 0.5, "act": "relu"}},
      {"from_step": 2, "to_step": 4, "params": {"lr": 0.05, "momentum": 0.6, "act": "relu"}},
      {"from_step": 4, "to_step": 7, "params": {"lr": 0.02, "momentum": 0.9, "act": "tanh"}}])");
  auto settings = workflow::pbt_settings("again", {{"population", 4}, {"ready", 2}, {"schedule", schedule}},
                                         {{"kind", "mlp"}, {"epochs", 3}});
  require_ok(settings);
  CHECK(settings->steps == 7);  // the schedule's end, not the trainer's epochs
  CHECK(settings->boundary(2));
  CHECK(settings->boundary(7));
  CHECK_FALSE(settings->boundary(6));
  spec.settings = *settings;
  Harness h(spec);
  h.start();
  nlohmann::json first = schedule[0]["params"];
  first["epochs"] = 2;
  for (const auto& [seq, m] : h.members) CHECK(m.params == first);
  for (int64_t seq = 0; seq < 4; ++seq) h.write_checkpoint(seq);
  // The worst member does not exploit the best: it goes on with the schedule's next interval.
  for (int64_t seq = 0; seq < 4; ++seq) {
    Verdict v = h.report(seq, 2, 0.5 + 0.1 * static_cast<double>(seq));
    REQUIRE(v.kind == Verdict::Kind::kPause);
    CHECK_FALSE(v.note.contains("pbt_exploit"));
    CHECK(v.lineage_parent == 0);
    nlohmann::json second = schedule[1]["params"];
    second["epochs"] = 4;
    CHECK(v.params == second);
    CHECK(v.resume_from == h.dir(seq) + "/pbt/000-step-2");
  }
  auto bad = workflow::pbt_settings("again", {{"schedule", nlohmann::json::parse(R"([{"from_step": 1, "to_step": 2, "params": {}}])")}},
                                    {{"kind", "mlp"}, {"epochs", 3}});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message().find("schedule") != std::string::npos);
}

TEST_CASE("pbt: older_snapshots false: a bottom member does not exploit a snapshot older than its own step") {
  PbtSpec spec = pbt_spec();
  spec.settings.older_snapshots = false;
  Harness h(spec);
  first_round(h);  // every member paused at step 2; member 0 the best
  // Member 3 reaches step 4 first and is the worst: the only top snapshot is member 0's at step 2.
  // Going back to it would train steps 3-4 again, and a member could do so forever.
  h.write_checkpoint(3);
  Verdict v = h.report(3, 4, 0.05);
  REQUIRE(v.kind == Verdict::Kind::kPause);
  CHECK_FALSE(v.note.contains("pbt_exploit"));
  CHECK(v.note.contains("pbt_continue"));
  CHECK(v.params.at("epochs") == 6);
  CHECK(v.resume_from == h.dir(3) + "/pbt/001-step-4");
}

// copy_file_into copies in the kernel (a reflink, or copy_file_range), by hand where the kernel
// cannot (another file system: /dev/shm to the test's folder): the same bytes, read-only, whatever
// the size (empty, one byte, more than one 64 KiB buffer and not a multiple of it).
TEST_CASE("pbt: a snapshot's file copy gives the same bytes, in the kernel or by hand across file systems") {
  TempDir tmp;
  hpctune::Rng rng(7);
  std::vector<std::string> sources{tmp.path};
  if (fs::is_directory("/dev/shm")) sources.push_back("/dev/shm");
  for (const std::string& where : sources) {
    for (const std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{3 * 65536 + 17}}) {
      CAPTURE(where);
      CAPTURE(size);
      const std::string name = "hpctune-copy-" + std::to_string(::getpid()) + "-" + std::to_string(size) +
                               (where == tmp.path ? "-here" : "-shm");
      const std::string from = where + "/" + name + ".src";
      std::string bytes(size, '\0');
      for (char& c : bytes) c = static_cast<char>(rng.below(256));
      std::ofstream(from, std::ios::binary) << bytes;
      const int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
      const int dir = ::open(tmp.path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      REQUIRE(in >= 0);
      REQUIRE(dir >= 0);
      const auto st = hpctune::workflow::copy_file_into(in, from, dir, name, tmp.path + "/" + name);
      ::close(in);
      ::close(dir);
      fs::remove(from);
      REQUIRE_MESSAGE(st.ok(), st.error().message());
      std::ifstream got(tmp.path + "/" + name, std::ios::binary);
      CHECK(std::string(std::istreambuf_iterator<char>(got), {}) == bytes);
      struct stat sb {};
      REQUIRE(::stat((tmp.path + "/" + name).c_str(), &sb) == 0);
      CHECK((sb.st_mode & 0777) == 0400);
    }
  }
}

TEST_CASE("pbt: a program's checkpoint directory is snapshotted whole and read-only; links refused; a left .tmp redone") {
  PbtSpec spec = pbt_spec();
  spec.settings.step_key = "max_step";            // a command's (the catalog's step setting)
  spec.settings.checkpoint_directory = "checkpoint";  // the catalog's checkpoints.directory
  Harness h(spec);
  h.start();
  auto write_tree = [&](int64_t seq, const std::string& text) {
    const std::string ck = h.dir(seq) + "/checkpoint";
    fs::create_directories(ck + "/sub/deeper");
    std::ofstream(ck + "/state.json") << text;
    std::ofstream(ck + "/sub/deeper/w.bin", std::ios::binary) << std::string("\0\1\2", 3) + text;
    return ck;
  };
  CHECK(h.report(0, 1, 0.5).kind == Verdict::Kind::kContinue);
  const std::string ck = write_tree(0, "step 2 of member 0");
  Verdict v = h.report(0, 2, 0.9);
  REQUIRE(v.kind == Verdict::Kind::kPause);
  CHECK(v.params.at("max_step") == 4);
  const std::string dest = v.resume_from;

  SUBCASE("copied whole, read-only; the member's own checkpoint emptied") {
    // A copy cut short by a master killed mid-copy (read-only parts included): removed and redone.
    fs::create_directories(dest + ".tmp/half");
    std::ofstream(dest + ".tmp/half/junk") << "half";
    fs::permissions(dest + ".tmp/half", fs::perms::owner_read | fs::perms::owner_exec);
    h.pause(0);
    CHECK_FALSE(fs::exists(dest + ".tmp"));
    CHECK(read_file(dest + "/state.json") == "step 2 of member 0");
    CHECK(read_file(dest + "/sub/deeper/w.bin") == std::string("\0\1\2step 2 of member 0", 21));
    CHECK_FALSE(fs::exists(dest + "/half"));
    auto mode = [](const std::string& p) { return fs::status(p).permissions() & fs::perms::all; };
    CHECK(mode(dest) == (fs::perms::owner_read | fs::perms::owner_exec));
    CHECK(mode(dest + "/sub/deeper") == (fs::perms::owner_read | fs::perms::owner_exec));
    CHECK(mode(dest + "/state.json") == fs::perms::owner_read);
    CHECK(mode(dest + "/sub/deeper/w.bin") == fs::perms::owner_read);
    CHECK(fs::is_directory(ck));
    CHECK(fs::is_empty(ck));
    // Told again (a restarted master): the snapshot is kept as it was, the empty directory is fine.
    require_ok(h.source->on_paused(h.view(0), 2));
    CHECK(read_file(dest + "/state.json") == "step 2 of member 0");
    require_ok(workflow::remove_snapshot_tree(h.run_dir));
    CHECK_FALSE(fs::exists(h.run_dir));
  }
  SUBCASE("a link, or a FIFO, anywhere in the tree is refused, and nothing is snapshotted") {
    const std::string outside = h.tmp.file("outside.bin");
    std::ofstream(outside) << "someone else's file";
    std::string planted = ck + "/sub/deeper/planted", why;
    SUBCASE("a symbolic link to a file") {
      fs::create_symlink(outside, planted);
      why = "symbolic link";
    }
    SUBCASE("a symbolic link to a directory") {
      fs::create_directory_symlink(h.tmp.path, planted);
      why = "symbolic link";
    }
    SUBCASE("a relative symbolic link out through '..'") {
      fs::create_symlink("../../../../outside.bin", planted);
      why = "out of the checkpoint directory";
    }
    SUBCASE("a FIFO") {
      REQUIRE(::mkfifo(planted.c_str(), 0600) == 0);
      why = "not a regular file";
    }
    auto s = h.source->on_paused(h.view(0), 2);
    REQUIRE_FALSE(s.ok());
    CHECK(s.error().code() == Errc::kFailed);
    INFO(s.error().message());
    CHECK(s.error().message().find("pbt: trial " + std::to_string(h.members.at(0).id) + " at step 2: ") == 0);
    CHECK(s.error().message().find(planted) != std::string::npos);
    CHECK(s.error().message().find(why) != std::string::npos);
    CHECK_FALSE(fs::exists(dest));
    CHECK(fs::exists(ck + "/state.json"));  // the member's own checkpoint is left as it was
    require_ok(workflow::remove_snapshot_tree(dest + ".tmp"));
  }
  SUBCASE("a link that stays inside the directory (last.ckpt -> epoch=5.ckpt) is kept as that link") {
    fs::create_symlink("state.json", ck + "/last.json");
    fs::create_directory_symlink("sub/deeper", ck + "/latest");
    h.pause(0);
    CHECK(fs::is_symlink(dest + "/last.json"));
    CHECK(fs::read_symlink(dest + "/last.json") == "state.json");
    CHECK(read_file(dest + "/last.json") == "step 2 of member 0");  // the snapshot's own file
    CHECK(fs::read_symlink(dest + "/latest") == "sub/deeper");
    CHECK(read_file(dest + "/latest/w.bin") == std::string("\0\1\2step 2 of member 0", 21));
    CHECK(fs::is_empty(ck));
  }
  SUBCASE("a program that saved nothing: a clear error naming the directory and who can") {
    fs::remove_all(ck);
    fs::create_directories(ck);
    auto s = h.source->on_paused(h.view(0), 2);
    REQUIRE_FALSE(s.ok());
    CHECK(s.error().code() == Errc::kFailed);
    INFO(s.error().message());
    CHECK(s.error().message().find("saved nothing in " + ck + " (HPCTUNE_CHECKPOINT_DIR)") != std::string::npos);
    CHECK(s.error().message().find("mlp, cnn, command with trainer.provides: [checkpoints]") != std::string::npos);
  }
}

TEST_CASE("pbt: a link planted at <trial>/pbt, at the snapshot or at its .tmp is refused; nothing outside is written") {
  // A trial's directory is writable by its own program (a command trainer's): before, a link at
  // <trial>/pbt had the master make the snapshot (and remove a stale .tmp) in the directory it
  // pointed to, and a link at the snapshot's own name counted as a snapshot already made.
  PbtSpec spec = pbt_spec();
  bool tree = false;
  SUBCASE("the built-ins' checkpoint-stage*.bin") {}
  SUBCASE("a program's checkpoint directory") {
    tree = true;
    spec.settings.step_key = "max_step";
    spec.settings.checkpoint_directory = "checkpoint";
  }
  CAPTURE(tree);
  Harness h(spec);
  h.start();
  auto save = [&] {
    if (!tree) {
      h.write_checkpoint(0);
      return h.dir(0) + "/checkpoint-stage0.bin";
    }
    fs::create_directories(h.dir(0) + "/checkpoint");
    std::ofstream(h.dir(0) + "/checkpoint/state.json") << "member 0 at step 2";
    return h.dir(0) + "/checkpoint/state.json";
  };
  CHECK(h.report(0, 1, 0.5).kind == Verdict::Kind::kContinue);
  const std::string saved = save();
  Verdict v = h.report(0, 2, 0.9);
  REQUIRE(v.kind == Verdict::Kind::kPause);
  const std::string dest = v.resume_from;
  REQUIRE(dest == h.dir(0) + "/pbt/000-step-2");
  // Someone else's directory, with what a stale copy's name would hold there.
  const std::string outside = h.tmp.file("outside");
  fs::create_directories(outside + "/000-step-2.tmp");
  std::ofstream(outside + "/000-step-2.tmp/keep") << "not the campaign's";
  auto untouched = [&] {
    std::vector<std::string> names;
    for (const auto& e : fs::recursive_directory_iterator(outside)) names.push_back(e.path().string());
    std::sort(names.begin(), names.end());
    CHECK(names == std::vector<std::string>{outside + "/000-step-2.tmp", outside + "/000-step-2.tmp/keep"});
    CHECK(read_file(outside + "/000-step-2.tmp/keep") == "not the campaign's");
  };
  auto refused = [&](const std::string& link) {
    auto s = h.source->on_paused(h.view(0), 2);
    REQUIRE_FALSE(s.ok());
    INFO(s.error().message());
    CHECK(s.error().code() == Errc::kFailed);
    CHECK(s.error().message().find("pbt: trial " + std::to_string(h.members.at(0).id) + " at step 2: ") == 0);
    CHECK(s.error().message().find(link) != std::string::npos);
    CHECK(s.error().message().find("symbolic link") != std::string::npos);
    CHECK(fs::exists(saved));  // the member's own checkpoint is left as it was
    untouched();
  };
  SUBCASE("<trial>/pbt links to another directory") {
    fs::create_directory_symlink(outside, h.dir(0) + "/pbt");
    refused(h.dir(0) + "/pbt");
  }
  SUBCASE("the snapshot's name links to another directory: not a snapshot made before") {
    fs::create_directories(h.dir(0) + "/pbt");
    fs::create_directory_symlink(outside + "/000-step-2.tmp", dest);
    refused(dest);
  }
  SUBCASE("the .tmp name links to another directory: the link is removed, not followed") {
    fs::create_directories(h.dir(0) + "/pbt");
    fs::create_directory_symlink(outside + "/000-step-2.tmp", dest + ".tmp");
    require_ok(h.source->on_paused(h.view(0), 2));
    CHECK_FALSE(fs::exists(fs::symlink_status(dest + ".tmp")));
    CHECK(fs::is_directory(fs::symlink_status(dest)));
    CHECK_FALSE(fs::exists(saved));
    untouched();
  }
  SUBCASE("<db>.trials/<trial> itself is a link: refused") {
    const std::string moved = h.tmp.file("moved");
    fs::rename(h.dir(0), moved);
    fs::create_directory_symlink(moved, h.dir(0));
    auto s = h.source->on_paused(h.view(0), 2);
    REQUIRE_FALSE(s.ok());
    INFO(s.error().message());
    CHECK(s.error().message().find("symbolic link") != std::string::npos);
    CHECK_FALSE(fs::exists(moved + "/pbt"));
  }
  require_ok(workflow::remove_snapshot_tree(h.run_dir));
}

TEST_CASE("pbt: a resumed stage counts a snapshot reached through a link planted at <trial>/pbt as gone") {
  // Before, a resumed stage saw its snapshots with fs::is_directory, which follows links: the
  // snapshots of a member whose program swapped its pbt directory for a link (its resume_from, in
  // another member's directory, passes the store's check) counted as made, to be exploited.
  Harness h(pbt_spec());
  first_round(h);
  second_round_exploit(h);  // member 3 resumes from member 0's step-4 snapshot
  const std::string own = h.dir(3) + "/pbt", moved = h.tmp.file("elsewhere");
  fs::rename(own, moved);
  fs::create_directory_symlink(moved, own);
  REQUIRE(fs::is_directory(own + "/000-step-2"));  // through the link
  std::vector<std::string> lines;
  scheduler::StageContext ctx = h.context(true);
  ctx.log = [&](const std::string& line) { lines.push_back(line); };
  PbtSource fresh(h.spec);
  require_ok(fresh.begin(ctx));
  std::string log;
  for (const std::string& line : lines) log += line + "\n";
  INFO(log);
  const std::string trial = std::to_string(h.members.at(3).id);
  CHECK(log.find("pbt: the snapshot " + own + "/000-step-2 of trial " + trial + " is gone") != std::string::npos);
  CHECK(log.find("pbt: the snapshot " + own + "/001-step-4 of trial " + trial + " is gone") != std::string::npos);
  CHECK(log.find(h.dir(0)) == std::string::npos);  // member 0's own are there
}

TEST_CASE("pbt: a snapshot whose <trial>/pbt became a link after it was made is not exploited") {
  // The member's program runs on in its directory after the snapshot: before, the exploit took the
  // snapshot by its path, so a link put in place of <trial>/pbt had the worst member start from
  // whatever the link's directory holds (a command's program reads its resume_from as it finds it).
  Harness h(pbt_spec());
  first_round(h);  // every member paused at step 2; member 0 the best: its snapshot is the one to take
  const std::string own = h.dir(0) + "/pbt", moved = h.tmp.file("elsewhere");
  fs::rename(own, moved);
  fs::create_directory_symlink(moved, own);
  h.write_checkpoint(3);
  Verdict v = h.report(3, 4, 0.05);  // the worst of four: it would exploit member 0
  INFO(v.note.dump());
  CHECK_FALSE(v.note.contains("pbt_exploit"));
  CHECK(v.lineage_parent != h.members.at(0).id);
  CHECK(v.resume_from.find(own) == std::string::npos);
}

TEST_CASE("pbt: a bottom member exploits a better member's older snapshot: its step goes back, exact bytes") {
  Harness h(pbt_spec());
  const std::string bytes0 = first_round(h);  // every member paused at step 2; member 0 the best (0.9)
  // Member 3 reaches step 4 first and is the worst there (0.05 < member 0's 0.9 at step 2): it
  // takes member 0's step-2 snapshot, goes back to step 2 and trains to step 4 again.
  h.write_checkpoint(3);
  Verdict v = h.report(3, 4, 0.05);
  REQUIRE(v.kind == Verdict::Kind::kPause);
  REQUIRE(v.note.contains("pbt_exploit"));
  CHECK(v.note.at("pbt_exploit").at("source_step") == 2);
  CHECK(v.note.at("pbt_exploit").at("step") == 4);
  CHECK(v.params.at("epochs") == 4);  // from step 2, one interval
  CHECK(v.resume_from == h.dir(0) + "/pbt/000-step-2");
  CHECK(read_file(v.resume_from + "/checkpoint-stage0.bin") == bytes0);
  CHECK(v.lineage_parent == h.members.at(0).id);
  h.pause(3);
  // Member 3's next interval starts at step 2 again: it counts as the least advanced.
  CHECK(h.source->resume_next({3}) == std::optional<int64_t>(3));
}

TEST_CASE("pbt: in step: the least advanced paused member runs first, none more than max_lead intervals ahead") {
  Harness h(pbt_spec());
  first_round(h);  // all four paused at step 2 (their next intervals start there)
  // Every member is at step 2: the lowest seq first.
  CHECK(h.source->resume_next({2, 0, 1}) == std::optional<int64_t>(0));
  // Member 0 trains to 4 and pauses: it is one interval ahead of members 1-3 and must wait.
  h.write_checkpoint(0);
  REQUIRE(h.report(0, 4, 0.95).kind == Verdict::Kind::kPause);
  h.pause(0);
  CHECK(h.source->resume_next({0}) == std::nullopt);
  CHECK(h.source->resume_next({0, 1}) == std::optional<int64_t>(1));
  // With no limit it may run ahead.
  PbtSpec unlimited = pbt_spec();
  unlimited.settings.max_lead = 0;
  Harness u(unlimited);
  first_round(u);
  u.write_checkpoint(0);
  REQUIRE(u.report(0, 4, 0.95).kind == Verdict::Kind::kPause);
  u.pause(0);
  CHECK(u.source->resume_next({0}) == std::optional<int64_t>(0));
}

TEST_CASE("pbt: new members run before paused ones") {
  Harness h(pbt_spec());
  auto first = h.source->ask(2);
  require_ok(first);
  REQUIRE(first->size() == 2);
  // Two of four members asked: the held ones wait for the other two to be asked.
  CHECK(h.source->resume_next({0, 1}) == std::nullopt);
}
