// Early stopping that pauses (workflow/promotion_source.h): each attempt trains to the trial's next
// rung and pauses there; resume_next() promotes a held trial once it is in the top of its rung, the
// highest rung first; with nothing new to propose it continues the most promising one; the step
// budget ends both. No store, no files: the source is driven as the scheduler drives it.
#include <doctest/doctest.h>

#include "search/early_stopping.h"
#include "search/searcher.h"
#include "tests/param_specs.h"
#include "workflow/promotion_source.h"

using namespace hpctune;
using scheduler::Verdict;

namespace {

struct Rig {
  explicit Rig(int64_t max_trials, int64_t max_steps = 0) {
    search::SearchSpec spec;
    spec.algorithm = "random";
    auto space = search::Space::create({testing::flt("lr", 0.001, 0.1, true)});
    REQUIRE(space.ok());
    spec.space = space.value();
    spec.objectives = {{"val_accuracy", true}};
    spec.seed = 3;
    spec.max_trials = max_trials;
    auto made = search::make_searcher(spec);
    REQUIRE(made.ok());
    searcher = std::move(made).value();
    search::StopperSpec ss;
    ss.kind = "asha";
    ss.settings = {{"grace_period", 1}, {"reduction_factor", 3.0}, {"max_t", 9}, {"mode", "pause"}};
    auto st = search::make_stopper(ss);
    REQUIRE(st.ok());
    stopper = std::move(st).value();
    REQUIRE(stopper->pauses());
    CHECK(stopper->milestones(0) == std::vector<int64_t>{1, 3});
    workflow::PromotionOptions o;
    o.step_key = "epochs";
    o.max_t = 9;
    o.max_trials = max_trials;
    o.max_steps = max_steps;
    source = std::make_unique<workflow::PromotionSource>(*searcher, *stopper, o);
  }

  // Asks one trial: its first attempt trains to the first rung.
  int64_t ask() {
    auto got = source->ask(1);
    REQUIRE(got.ok());
    REQUIRE(got->size() == 1);
    params[got->front().seq] = got->front().params;
    CHECK(got->front().params.at("epochs") == 1);
    // The views show the step this stage set as a run setting, not as a searched parameter.
    CHECK(got->front().meta.value("stage_step_setting", "") == "epochs");
    return got->front().seq;
  }

  // Reports steps from+1 .. to of trial seq, the last with `value`; the verdict at `to`.
  Verdict train(int64_t seq, int64_t from, int64_t to, double value) {
    scheduler::TrialView view{100 + seq, seq, 1, &params[seq], "/run/" + std::to_string(seq)};
    Verdict v;
    for (int64_t k = from + 1; k <= to; ++k) {
      v = source->on_report(view, k, k == to ? value : 0.0);
      if (k < to) CHECK(v.kind == Verdict::Kind::kContinue);
    }
    if (v.kind == Verdict::Kind::kPause) params[seq] = v.params;
    return v;
  }

  std::unique_ptr<search::Searcher> searcher;
  std::unique_ptr<search::EarlyStopper> stopper;
  std::unique_ptr<workflow::PromotionSource> source;
  std::map<int64_t, nlohmann::json> params;
};

}  // namespace

TEST_CASE("promotion: every attempt pauses at its rung with that rung's snapshot, and goes on to the next") {
  Rig r(10);
  const int64_t a = r.ask();
  Verdict v = r.train(a, 0, 1, 0.5);
  REQUIRE(v.kind == Verdict::Kind::kPause);
  CHECK(v.resume_from == "/run/" + std::to_string(a) + "/rungs/step-1");
  CHECK(v.params.at("epochs") == 3);
  CHECK(v.note.at("rung_paused").at("in_top") == true);  // alone at its rung
  // Resumed, it trains 2..3 and pauses at rung 3; then 4..9, where it ends (no pause at max_t).
  v = r.train(a, 1, 3, 0.6);
  REQUIRE(v.kind == Verdict::Kind::kPause);
  CHECK(v.resume_from == "/run/" + std::to_string(a) + "/rungs/step-3");
  CHECK(v.params.at("epochs") == 9);
  CHECK(r.train(a, 3, 9, 0.7).kind == Verdict::Kind::kContinue);
  CHECK(r.source->steps_consumed() == 9);
}

TEST_CASE("promotion: a held trial goes on once it is in the top of its rung; the highest rung first") {
  Rig r(10);
  const int64_t a = r.ask(), b = r.ask(), c = r.ask();
  r.train(a, 0, 1, 0.9);  // first at rung 1: in the top
  r.train(b, 0, 1, 0.5);  // 2 at the rung: top 1 is a
  r.train(c, 0, 1, 0.4);  // 3 at the rung: top 1 is a
  // a is promotable, b and c are not; the search can still propose: nothing else goes on.
  CHECK(r.source->resume_next({b, c}) == std::nullopt);
  CHECK(r.source->resume_next({a, b, c}) == std::optional<int64_t>(a));
  // Three more arrive below b: with 6 at the rung the top 2 are a and b.
  for (int i = 0; i < 3; ++i) r.train(r.ask(), 0, 1, 0.1);
  CHECK(r.source->resume_next({b, c}) == std::optional<int64_t>(b));
  // a reached rung 3: a trial held there goes before one of rung 1.
  r.train(a, 1, 3, 0.95);
  CHECK(r.source->resume_next({b, a}) == std::optional<int64_t>(a));
}

TEST_CASE("promotion: with nothing new to propose the most promising held trial goes on; the budget ends it") {
  Rig r(3, /*max_steps=*/7);
  const int64_t a = r.ask(), b = r.ask(), c = r.ask();
  r.train(a, 0, 1, 0.9);
  r.train(b, 0, 1, 0.5);
  r.train(c, 0, 1, 0.7);
  // All 3 trials asked (max_trials): b and c are not in the top, c is the better one.
  CHECK(r.source->resume_next({b, c}) == std::optional<int64_t>(c));
  CHECK(!r.source->exhausted());
  r.train(c, 1, 3, 0.8);  // 3 + 2 steps: 5 of 7
  CHECK(r.source->steps_consumed() == 5);
  CHECK(r.source->resume_next({b, c}) == std::optional<int64_t>(c));
  r.train(c, 3, 5, 0.8);  // 7 of 7: spent
  CHECK(r.source->exhausted());
  CHECK(r.source->resume_next({a, b}) == std::nullopt);
  auto more = r.source->ask(1);
  REQUIRE(more.ok());
  CHECK(more->empty());
}

TEST_CASE("promotion: an attempt reserves the steps it will train, so the groups in flight do not carry the campaign past its budget") {
  // 5 steps left: of 8 free groups, 5 get a new trial (each trains 1 step, to rung 1); before, all 8.
  Rig r(10, /*max_steps=*/5);
  auto got = r.source->ask(8);
  REQUIRE(got.ok());
  REQUIRE(got->size() == 5);
  CHECK(r.source->steps_reserved() == 5);
  CHECK(r.source->exhausted());  // consumed and reserved reach the budget: nothing else starts
  CHECK(r.source->ask(1)->empty());
  for (const auto& s : *got) r.params[s.seq] = s.params;
  double value = 0.9;
  for (const auto& s : *got) r.train(s.seq, 0, 1, value -= 0.1);
  CHECK(r.source->steps_consumed() == 5);
  CHECK(r.source->steps_reserved() == 0);
  CHECK(r.source->state().at("steps_reserved") == 0);

  // Promotions reserve their next leg: 3 trials at rung 1 (3 steps), a budget of 12.
  Rig p(3, /*max_steps=*/12);
  const int64_t a = p.ask(), b = p.ask(), c = p.ask();
  p.train(a, 0, 1, 0.9);
  p.train(b, 0, 1, 0.5);
  p.train(c, 0, 1, 0.7);
  CHECK(p.source->resume_next({a, b, c}) == std::optional<int64_t>(a));  // 1 -> 3: 2 steps reserved
  CHECK(p.source->resume_next({b, c}) == std::optional<int64_t>(c));     // nothing new: the better one
  CHECK(p.source->resume_next({b}) == std::optional<int64_t>(b));
  CHECK(p.source->steps_reserved() == 6);
  p.train(a, 1, 3, 0.95);  // 5 consumed, 4 reserved (b and c): 3 steps left
  CHECK(!p.source->exhausted());
  // a's last leg (3 -> 9) needs 6: it starts, as the one attempt that may pass the budget...
  CHECK(p.source->resume_next({a}) == std::optional<int64_t>(a));
  CHECK(p.source->steps_reserved() == 10);
  // ...and nothing more does, where before c and b, back at rung 3, each went on to 9 as well.
  CHECK(p.source->exhausted());
  p.train(c, 1, 3, 0.8);
  p.train(b, 1, 3, 0.6);
  CHECK(p.source->resume_next({b, c}) == std::nullopt);
  CHECK(p.train(a, 3, 9, 0.97).kind == Verdict::Kind::kContinue);
  CHECK(p.source->steps_consumed() == 15);  // the budget, 12, and a's last leg past it
  CHECK(p.source->steps_reserved() == 0);
}
