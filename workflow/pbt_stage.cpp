// The population-based training stage (pbt_stage.h).
#include "workflow/pbt_stage.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <dirent.h>
#include <fcntl.h>
#include <limits>
#include <set>

#include "common/rng.h"
#include "config/trainer_kinds.h"
#include "store/store.h"
#include "workflow/checkpoint_snapshot.h"
#include "workflow/stage_settings.h"
#include "workflow/trial_files.h"

namespace hpctune::workflow {
namespace {

// Independent streams of the stage seed: the members' first params, and each decision.
constexpr uint64_t kInitStream = 0x5042'5449'4e49'5421ULL;
constexpr uint64_t kDecisionStream = 0x5042'5444'4543'4944ULL;

constexpr const char* kLineageRelation = "pbt_exploit";

std::string snapshot_dir(const std::string& trial_dir, int64_t ordinal, int64_t step) {
  char name[64];
  std::snprintf(name, sizeof name, "pbt/%03lld-step-%lld", static_cast<long long>(ordinal), static_cast<long long>(step));
  return trial_dir + "/" + name;
}

// The params without the trainer's step setting (the stage's, not a hyperparameter).
search::Params without_step(search::Params p, const std::string& step_key) {
  if (p.is_object()) p.erase(step_key);
  return p;
}

}  // namespace

PbtSource::PbtSource(PbtSpec spec) : spec_(std::move(spec)) {}

search::Params PbtSource::initial_params(int64_t seq) const {
  Rng rng(derive_seed(spec_.seed ^ kInitStream, static_cast<uint64_t>(seq)));
  if (!spec_.settings.replay.empty()) return spec_.settings.replay.front();
  search::Params p = spec_.space.sample(rng);
  p[spec_.settings.step_key] = std::min(spec_.settings.ready, spec_.settings.steps);
  return p;
}

PbtSource::Member& PbtSource::member(int64_t seq) {
  Member& m = members_[seq];
  m.seq = seq;
  return m;
}

const PbtSource::Member* PbtSource::find_member(int64_t seq) const {
  auto it = members_.find(seq);
  return it == members_.end() ? nullptr : &it->second;
}

const PbtSource::Member* PbtSource::member_of_trial(int64_t trial_id) const {
  for (const auto& [seq, m] : members_)
    if (m.trial_id == trial_id && trial_id != 0) return &m;
  return nullptr;
}

// NaN (a member whose training diverged) is worst: it ranks last and copies a top member.
bool PbtSource::better(double a, double b) const {
  if (std::isnan(a) || std::isnan(b)) return !std::isnan(a) && std::isnan(b);
  return spec_.objective.maximize ? a > b : a < b;
}

const PbtSource::Decision* PbtSource::latest_snapshot(const Member& m) const {
  // Still there, and not through a link: the member's program can replace <trial>/pbt after the
  // snapshot was made.
  for (auto it = m.decisions.rbegin(); it != m.decisions.rend(); ++it)
    if (it->snapshot_made && snapshot_present(m.trial_dir, it->snapshot)) return &*it;
  return nullptr;
}

Result<std::vector<search::Suggestion>> PbtSource::ask(std::size_t n) {
  std::vector<search::Suggestion> out;
  while (out.size() < n && next_seq_ < spec_.settings.population) {
    search::Suggestion s;
    s.seq = next_seq_;
    s.params = initial_params(next_seq_);
    s.meta[trainers::kStageStepMeta] = spec_.settings.step_key;  // the views show it as the run setting max_step
    member(next_seq_);
    out.push_back(std::move(s));
    ++next_seq_;
  }
  return out;
}

scheduler::Verdict PbtSource::verdict_of(const Decision& d, int64_t lineage_parent) {
  scheduler::Verdict v = scheduler::Verdict::pause(d.params, d.resume_from);
  v.resume_step = d.from_step;
  if (d.exploit) {
    v.lineage_parent = lineage_parent;
    v.lineage_relation = kLineageRelation;
  }
  return v;
}

std::string PbtSource::report_judge() const { return kPbtReportJudge; }

std::optional<int64_t> PbtSource::step_target(const scheduler::TrialView& trial) const {
  const PbtSettings& s = spec_.settings;
  const std::optional<int64_t> step = scheduler::int_param(trial, s.step_key);
  if (!step || *step <= 0 || *step >= s.steps || !s.boundary(*step)) return std::nullopt;  // the last interval ends done
  return step;
}

scheduler::Verdict PbtSource::on_report(const scheduler::TrialView& trial, int64_t step, double value) {
  Member& m = member(trial.seq);
  m.trial_id = trial.trial_id;
  if (!trial.trial_dir.empty()) m.trial_dir = trial.trial_dir;
  const PbtSettings& s = spec_.settings;
  if (!s.boundary(step)) return scheduler::Verdict::carry_on();
  // A boundary short of the end of this attempt's interval (where it stops by itself): the program
  // counts its steps from 0 again after loading a checkpoint. Only its interval's end is judged, so
  // each attempt pauses where its decision was made.
  if (const auto end = scheduler::int_param(trial, s.step_key); end && step < *end) return scheduler::Verdict::carry_on();
  m.latest = value;
  if (step >= s.steps || m.trial_dir.empty()) return scheduler::Verdict::carry_on();
  // The same boundary again before its pause was recorded (the attempt was lost after reporting
  // it and ran again): the decision stands; it was recorded the first time.
  if (!m.decisions.empty() && !m.decisions.back().paused && m.decisions.back().step == step) {
    const Decision& d = m.decisions.back();
    const Member* source = d.exploit ? find_member(d.source_seq) : nullptr;
    return verdict_of(d, source ? source->trial_id : 0);
  }
  return decide(m, trial, step, value);
}

scheduler::Verdict PbtSource::decide(Member& m, const scheduler::TrialView& trial, int64_t step, double value) {
  const PbtSettings& s = spec_.settings;
  Decision d;
  d.ordinal = static_cast<int64_t>(m.decisions.size());
  d.step = step;
  d.attempt = trial.attempt;
  d.value = value;
  d.trained = trial.params && trial.params->is_object() ? *trial.params : search::Params::object();
  d.snapshot = snapshot_dir(m.trial_dir, d.ordinal, step);
  Rng rng(derive_seed(derive_seed(spec_.seed ^ kDecisionStream, static_cast<uint64_t>(m.seq)),
                      static_cast<uint64_t>(d.ordinal)));

  // The ranking by latest boundary score, best first; ties to the lower seq.
  std::vector<const Member*> ranked;
  for (const auto& [seq, other] : members_)
    if (other.latest) ranked.push_back(&other);
  std::stable_sort(ranked.begin(), ranked.end(),
                   [&](const Member* a, const Member* b) { return better(*a->latest, *b->latest); });
  const auto n = static_cast<int64_t>(ranked.size());
  const int64_t q = quantile_size(n, s.quantile);
  const auto pos = std::find(ranked.begin(), ranked.end(), &m) - ranked.begin();
  std::vector<std::pair<const Member*, const Decision*>> sources;
  if (q > 0 && pos >= n - q) {
    // Members are compared at their latest reports; a better member's snapshot may be older than
    // this member's step (it then trains those steps again from better weights: in step, a source
    // is at most max_lead intervals behind, and the slowest always advance, so every member ends).
    // With older_snapshots off, never backwards: each attempt ends `ready` steps further on.
    for (int64_t i = 0; i < q; ++i) {
      const Decision* snap = latest_snapshot(*ranked[i]);
      if (snap != nullptr && (s.older_snapshots || snap->step >= step)) sources.emplace_back(ranked[i], snap);
    }
  }

  scheduler::Verdict v;
  if (!s.replay.empty()) {
    // A replay: the next interval of the schedule, from this member's own weights.
    d.from_step = step;
    d.params = d.trained;
    for (const auto& p : s.replay) {
      if (p.at(s.step_key).get<int64_t>() > step) {
        d.params = p;
        break;
      }
    }
    d.resume_from = d.snapshot;
    v = verdict_of(d, 0);
    nlohmann::json event = decision_event(d, m);
    event["replay"] = true;
    v.note = {{"pbt_continue", std::move(event)}};
    m.decisions.push_back(std::move(d));
    return v;
  }
  if (!sources.empty()) {
    const auto& [src, snap] = sources[rng.below(sources.size())];
    // The source's weights and the params they were trained with, together.
    const Explored e = explore(spec_.space, snap->trained, s, rng);
    d.exploit = true;
    d.source_seq = src->seq;
    d.source_ordinal = snap->ordinal;
    d.source_step = snap->step;
    d.source_value = snap->value;
    d.from_step = snap->step;
    d.params = e.params;
    d.params[s.step_key] = std::min(snap->step + s.ready, s.steps);
    d.resume_from = snap->snapshot;
    v = verdict_of(d, src->trial_id);
    nlohmann::json exploit = decision_event(d, m);
    v.note = {{"pbt_exploit", std::move(exploit)},
              {"pbt_explore",
               {{"target", m.trial_id}, {"step", step}, {"source", src->trial_id}, {"old", e.old_values},
                {"new", e.new_values}, {"resampled", e.resampled}}}};
  } else {
    d.from_step = step;
    d.params = d.trained;
    d.params[s.step_key] = std::min(step + s.ready, s.steps);
    d.resume_from = d.snapshot;
    v = verdict_of(d, 0);
    v.note = {{"pbt_continue", decision_event(d, m)}};
  }
  m.decisions.push_back(std::move(d));
  return v;
}

std::optional<int64_t> PbtSource::resume_next(const std::vector<int64_t>& held) {
  // Members not asked yet are at step 0, the least advanced: they go first (ask()).
  if (next_seq_ < spec_.settings.population) return std::nullopt;
  int64_t slowest = std::numeric_limits<int64_t>::max();
  for (const auto& [seq, m] : members_)
    if (!m.final) slowest = std::min(slowest, progress(m));
  std::optional<int64_t> best;
  int64_t best_progress = 0;
  for (int64_t seq : held) {
    const Member* m = find_member(seq);
    if (m == nullptr || m->final) continue;
    const int64_t p = progress(*m);
    if (!best || p < best_progress || (p == best_progress && seq < *best)) {
      best = seq;
      best_progress = p;
    }
  }
  // In step: its next interval ends at most max_lead intervals past the slowest's weights.
  const int64_t lead = spec_.settings.max_lead;
  if (best && lead > 0 && best_progress > slowest + (lead - 1) * spec_.settings.ready) return std::nullopt;
  return best;
}

// A decision as its event records it: what is shown, and what a restarted master rebuilds it from.
// Its paths are relative to the trial directory (store::path_to_record: a moved campaign resumes).
nlohmann::json PbtSource::decision_event(const Decision& d, const Member& m) const {
  const std::string resume_from = store::path_to_record(run_dir_, d.resume_from);
  nlohmann::json j = {{"target", m.trial_id},
                      {"step", d.step},
                      {"ordinal", d.ordinal},
                      {"attempt", d.attempt},
                      {"trained_params", d.trained},
                      {"snapshot", store::path_to_record(run_dir_, d.snapshot)},
                      {"params", d.params},
                      {"resume_from", resume_from}};
  if (d.exploit) {
    const Member* src = find_member(d.source_seq);
    j["source"] = src ? src->trial_id : 0;
    j["source_step"] = d.source_step;
    j["source_value"] = d.source_value;
    j["source_ordinal"] = d.source_ordinal;
    j["target_value"] = d.value;
    j["checkpoint"] = resume_from;
  } else {
    j["value"] = d.value;
  }
  return j;
}

Status PbtSource::on_paused(const scheduler::TrialView& trial, int64_t step) {
  Member& m = member(trial.seq);
  if (!trial.trial_dir.empty()) m.trial_dir = trial.trial_dir;
  Decision* d = nullptr;
  for (Decision& x : m.decisions)
    if (!x.paused && x.step == step) d = &x;
  // Told twice of the same pause: the snapshot is kept as it was made.
  if (!d && !m.decisions.empty() && m.decisions.back().step == step) d = &m.decisions.back();
  if (!d) {
    // The steps come from the trainer's reports: a program that counts from 0 again after loading
    // its checkpoint reports past its decision before it stops. The trial fails (fail_paused), not
    // the campaign.
    std::string decided;
    for (const Decision& x : m.decisions)
      if (!x.paused) decided += (decided.empty() ? "" : ", ") + std::to_string(x.step);
    return err(Errc::kFailed, "pbt: trial " + std::to_string(trial.trial_id) + " paused at step " + std::to_string(step) +
                                  ", where the stage decided no pause (" +
                                  (decided.empty() ? std::string("none pending") : "pending at step " + decided) +
                                  "): does the program report the trial's step, counting on from the checkpoint it "
                                  "resumes from (HPCTUNE_RESUME_FROM), and stop at HPCTUNE_MAX_STEP?");
  }
  const std::string what = "pbt: trial " + std::to_string(trial.trial_id) + " at step " + std::to_string(step) + ": ";
  HPCTUNE_TRY(snapshot_trial_checkpoint(m.trial_dir, spec_.settings.checkpoint_directory, d->snapshot, what));
  d->paused = true;
  d->snapshot_made = true;
  return {};
}

void PbtSource::tell(const search::Observation& observation) { member(observation.seq).final = true; }

void PbtSource::restore(const std::vector<search::Record>& history) {
  for (const search::Record& r : history) {
    next_seq_ = std::max(next_seq_, r.suggestion.seq + 1);
    Member& m = member(r.suggestion.seq);
    if (r.observation) m.final = true;
  }
}

nlohmann::json PbtSource::state() const {
  int64_t exploits = 0, decisions = 0;
  for (const auto& [seq, m] : members_) {
    decisions += static_cast<int64_t>(m.decisions.size());
    for (const Decision& d : m.decisions) exploits += d.exploit ? 1 : 0;
  }
  return {{"members", members_.size()}, {"decisions", decisions}, {"exploits", exploits}};
}

// --- restart ------------------------------------------------------------------------------------

Status PbtSource::load_decision(const std::string& kind, const nlohmann::json& detail,
                                const std::map<int64_t, int64_t>& seq_of_trial) {
  auto bad = [&](const std::string& why) {
    return err(Errc::kInvalidArgument, "pbt: a recorded " + kind + " event " + why + ": " + detail.dump());
  };
  auto integer = [&](const char* key) -> std::optional<int64_t> {
    if (!detail.contains(key) || !detail.at(key).is_number_integer()) return std::nullopt;
    return detail.at(key).get<int64_t>();
  };
  if (!detail.is_object()) return bad("is not an object");
  const auto target = integer("target");
  if (!target) return bad("names no target trial");
  auto seq = seq_of_trial.find(*target);
  if (seq == seq_of_trial.end()) return {};  // another stage's
  Member& m = member(seq->second);
  const auto ordinal = integer("ordinal"), step = integer("step"), attempt = integer("attempt");
  if (!ordinal || !step || !attempt || !detail.contains("params") || !detail.contains("trained_params") ||
      !detail.contains("snapshot") || !detail.contains("resume_from"))
    return bad("lacks ordinal, step, attempt, params, trained_params, snapshot or resume_from");
  // The database may have been edited or crafted: a path that is not text, a value that is not a
  // number, is refused here rather than converted (which would throw).
  if (!detail.at("snapshot").is_string() || !detail.at("resume_from").is_string())
    return bad("has a snapshot or resume_from that is not a path");
  // A value: a number, or null (how JSON records a NaN, a diverged member's).
  auto value_of = [&](const char* key) -> std::optional<double> {
    const auto& v = detail.at(key);
    if (v.is_null()) return std::numeric_limits<double>::quiet_NaN();
    return v.is_number() ? std::optional<double>(v.get<double>()) : std::nullopt;
  };
  if (detail.contains("value") && !value_of("value")) return bad("has a value that is not a number");
  // A decision applied again to a re-run attempt is recorded once more: the first one holds.
  if (*ordinal < static_cast<int64_t>(m.decisions.size())) return {};
  if (*ordinal > static_cast<int64_t>(m.decisions.size()))
    return bad("skips from decision " + std::to_string(m.decisions.size()) + " of trial " + std::to_string(*target));
  Decision d;
  d.ordinal = *ordinal;
  d.step = *step;
  d.attempt = *attempt;
  d.trained = detail.at("trained_params");
  d.params = detail.at("params");
  // Where the paths are now: relative to the trial directory, or absolute as older versions wrote
  // them (below an earlier place of the trial directory: the same below this one). Checked below.
  d.snapshot = store::recorded_path_at(run_dir_, detail.at("snapshot").get<std::string>());
  d.resume_from = store::recorded_path_at(run_dir_, detail.at("resume_from").get<std::string>());
  d.from_step = d.step;
  if (kind == "pbt_exploit") {
    const auto source = integer("source"), source_ordinal = integer("source_ordinal"), source_step = integer("source_step");
    if (!source || !source_ordinal || !source_step || !detail.contains("target_value") ||
        !detail.contains("source_value"))
      return bad("lacks its source, source_ordinal, source_step, source_value or target_value");
    const auto source_value = value_of("source_value"), target_value = value_of("target_value");
    if (!source_value || !target_value) return bad("has a source_value or target_value that is not a number");
    auto src = seq_of_trial.find(*source);
    if (src == seq_of_trial.end()) return bad("names a source trial outside the stage");
    d.exploit = true;
    d.source_seq = src->second;
    d.source_ordinal = *source_ordinal;
    d.source_step = *source_step;
    d.from_step = *source_step;
    d.source_value = *source_value;
    d.value = *target_value;
  } else {
    d.value = detail.contains("value") ? *value_of("value") : 0.0;
  }
  // The snapshot a decision makes and the one it starts from are named by the decisions
  // (snapshot_dir): any other path (an edited or crafted database) would have the master copy a
  // checkpoint there, or the member's next attempt start from any file of the user.
  const std::string own = snapshot_dir(m.trial_dir, d.ordinal, d.step);
  const std::string from =
      d.exploit ? snapshot_dir(member(d.source_seq).trial_dir, d.source_ordinal, d.source_step) : own;
  if (d.snapshot != own || d.resume_from != from)
    return bad("has a snapshot or resume_from other than the decision's own (" + own + ", from " + from + ")");
  m.decisions.push_back(std::move(d));
  return {};
}

Status PbtSource::begin(const scheduler::StageContext& ctx) {
  if (ctx.run_dir.empty()) {
    return err(Errc::kInvalidArgument,
               "a pbt stage needs the trials' directories (their checkpoints are its snapshots), and this campaign "
               "keeps none (hpctune simulate keeps no trial files: it does not simulate checkpoints yet)");
  }
  run_dir_ = ctx.run_dir;
  if (!ctx.resuming || ctx.store == nullptr) return {};
  store::Store& db = *ctx.store;
  HPCTUNE_ASSIGN(std::vector<store::TrialRow> rows, db.trials(ctx.campaign_id));
  members_.clear();
  std::map<int64_t, int64_t> seq_of_trial;
  for (const store::TrialRow& row : rows) {
    if (row.stage_id != ctx.stage_id) continue;
    Member& m = member(row.seq);
    m.trial_id = row.id;
    m.trial_dir = ctx.trial_dir(row.id);
    m.final = store::is_final(row.state);
    seq_of_trial[row.id] = row.seq;
    next_seq_ = std::max(next_seq_, row.seq + 1);
  }
  HPCTUNE_ASSIGN(std::vector<store::EventRow> events, db.events(ctx.campaign_id, 0));
  for (const store::EventRow& e : events) {
    if (e.kind == "pbt_exploit" || e.kind == "pbt_continue") {
      HPCTUNE_TRY(load_decision(e.kind, e.detail, seq_of_trial));
    } else if (e.kind == "trial_paused") {
      auto seq = seq_of_trial.find(e.trial_id);
      if (seq == seq_of_trial.end() || !e.detail.is_object() || !e.detail.contains("step")) continue;
      if (!e.detail.at("step").is_number_integer()) {
        return err(Errc::kInvalidArgument, "pbt: a recorded trial_paused event has a step that is not an integer: " +
                                               e.detail.dump());
      }
      const int64_t step = e.detail.at("step").get<int64_t>();
      for (Decision& d : member(seq->second).decisions) {
        if (!d.paused && d.step == step) {
          d.paused = true;
          break;
        }
      }
    }
  }
  // The latest boundary score of each member: its last recorded report at a boundary, in the order
  // reported (by attempt, then step). A decision's own value wins for its report: a paused
  // attempt's final metrics may have rewritten that row. A NaN (a diverged training; the store
  // reads a non-finite value back as NaN) counts, as it did live: it ranks the member worst.
  const PbtSettings& s = spec_.settings;
  for (auto& [seq, m] : members_) {
    for (Decision& d : m.decisions) {
      d.snapshot_made = d.paused && snapshot_present(m.trial_dir, d.snapshot);
      if (d.paused && !d.snapshot_made && ctx.log) {
        ctx.log("pbt: the snapshot " + d.snapshot + " of trial " + std::to_string(m.trial_id) +
                " is gone; it will not be exploited");
      }
    }
    HPCTUNE_ASSIGN(std::vector<store::MetricRow> reports, db.metrics(m.trial_id));
    for (const store::MetricRow& r : reports) {
      if (r.name != spec_.objective.metric) continue;
      if (r.step % s.ready != 0 && r.step < s.steps) continue;
      m.latest = std::isfinite(r.value) ? r.value : std::numeric_limits<double>::quiet_NaN();
      for (const Decision& d : m.decisions)
        if (d.attempt == r.attempt && d.step == r.step) m.latest = d.value;
    }
  }
  return {};
}

// --- the result -----------------------------------------------------------------------------

std::vector<ScheduleEntry> PbtSource::schedule_of(int64_t seq) const {
  // An interval is (member, the paused decision it follows, or -1 for the first one).
  auto paused_before = [&](const Member& m, int64_t ordinal) -> int64_t {
    for (int64_t i = std::min<int64_t>(ordinal, static_cast<int64_t>(m.decisions.size())) - 1; i >= 0; --i)
      if (m.decisions[static_cast<std::size_t>(i)].paused) return i;
    return -1;
  };
  std::vector<ScheduleEntry> out;
  const Member* m = find_member(seq);
  if (!m) return out;
  int64_t after = paused_before(*m, static_cast<int64_t>(m->decisions.size()));
  int64_t end = spec_.settings.steps;
  std::size_t guard = 1;
  for (const auto& [s, x] : members_) guard += x.decisions.size();
  while (m && guard-- > 0) {
    ScheduleEntry e;
    e.trial = m->trial_id;
    e.to_step = end;
    if (after < 0) {
      e.from_step = 0;
      e.params = without_step(initial_params(m->seq), spec_.settings.step_key);
      out.push_back(std::move(e));
      break;
    }
    const Decision& d = m->decisions[static_cast<std::size_t>(after)];
    e.from_step = d.from_step;
    e.params = without_step(d.params, spec_.settings.step_key);
    out.push_back(std::move(e));
    end = d.from_step;
    if (d.exploit) {
      m = find_member(d.source_seq);
      if (m) after = paused_before(*m, d.source_ordinal);
    } else {
      after = paused_before(*m, d.ordinal);
    }
  }
  std::reverse(out.begin(), out.end());
  return out;
}

Result<nlohmann::json> PbtSource::result(const scheduler::StageContext& ctx) const {
  int64_t exploits = 0;
  for (const auto& [seq, m] : members_)
    for (const Decision& d : m.decisions) exploits += d.exploit ? 1 : 0;
  nlohmann::json out = {{"population", spec_.settings.population},
                        {"steps", spec_.settings.steps},
                        {"ready", spec_.settings.ready},
                        {"exploits", exploits},
                        {"explores", exploits}};
  if (ctx.store == nullptr) return out;
  HPCTUNE_ASSIGN(std::vector<store::TrialRow> rows, ctx.store->trials(ctx.campaign_id));
  const store::TrialRow* best = nullptr;
  for (const store::TrialRow& row : rows) {
    if (row.stage_id != ctx.stage_id || row.state != store::TrialState::kDone || !row.objective) continue;
    if (!best || better(*row.objective, *best->objective)) best = &row;
  }
  if (!best) return out;
  nlohmann::json b = {{"trial", best->id}, {"value", *best->objective}};
  // Beside the objective, its held-out figure (val_accuracy: test_accuracy), named in "test_metric".
  const std::string test = held_out_metric(spec_.objective.metric);
  if (best->metrics.is_object() && best->metrics.contains(test)) {
    b["test_metric"] = test;
    b[test] = best->metrics[test];
  }
  out["best"] = std::move(b);
  out["schedule"] = schedule_to_json(schedule_of(best->seq));
  return out;
}

// --- the stage ----------------------------------------------------------------------------------

namespace {

class PbtStage final : public scheduler::StageRuntime {
 public:
  PbtStage(PbtSpec spec, nlohmann::json trainer)
      : population_(spec.settings.population), source_(std::move(spec)), trainer_(std::move(trainer)) {}
  scheduler::TrialSource* source() override { return &source_; }
  int64_t max_trials() const override { return population_; }
  nlohmann::json trainer() const override { return trainer_; }
  Status begin(const scheduler::StageContext& ctx) override { return source_.begin(ctx); }
  Result<nlohmann::json> finish(const scheduler::StageContext& ctx) override { return source_.result(ctx); }

 private:
  int64_t population_;
  PbtSource source_;
  nlohmann::json trainer_;
};

}  // namespace

Result<std::unique_ptr<scheduler::StageRuntime>> make_pbt_stage(const std::string& name, const nlohmann::json& settings,
                                                                const config::CampaignConfig& view) {
  HPCTUNE_ASSIGN(PbtSettings s, pbt_settings(name, settings, view.trainer));
  if (view.space.find(s.step_key)) {
    return err(Errc::kConfig, "stage '" + name + "' (pbt): the space may not hold '" + s.step_key +
                                  "': the stage sets it (ready, steps)");
  }
  if (view.objectives.empty()) return err(Errc::kConfig, "stage '" + name + "' (pbt): needs an objective");
  PbtSpec spec{s, view.space, view.objectives[0], view.seed};
  return std::unique_ptr<scheduler::StageRuntime>(new PbtStage(std::move(spec), view.trainer));
}

}  // namespace hpctune::workflow
