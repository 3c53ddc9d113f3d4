#include "scheduler/scheduler.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <limits>
#include <set>
#include <utility>

#include "common/clock.h"
#include "common/device_list.h"
#include "common/rng.h"
#include "common/stats.h"
#include "common/text.h"
#include "config/trainer_kinds.h"
#include "launch/attempt_fence.h"
#include "search/pareto.h"

namespace hpctune::scheduler {
namespace {

// Reports of one attempt that reach the master within this many seconds of each other came together
// (a buffered program's block), not a step apart.
constexpr double kBunchedSpan = 0.05;

using store::TrialState;

nlohmann::json metrics_json(const protocol::Metrics& metrics) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : metrics) j[k] = v;
  return j;
}

bool better(double a, double b, bool maximize) { return maximize ? a > b : a < b; }

// Dropped-frame logging: per peer and window, this many lines, then one summary per window.
constexpr int64_t kNoiseLinesPerWindow = 3;
constexpr auto kNoiseWindow = std::chrono::seconds(10);
// Peers tracked one by one; beyond this, further peers share one entry (a flood of new
// connections must not grow the map without bound), so the log gets at most
// (kMaxNoisyPeers + 1) * (kNoiseLinesPerWindow + 1) lines of dropped frames per window, however many
// connections there are.
constexpr std::size_t kMaxNoisyPeers = 16;
const protocol::PeerId kOtherPeers = "\x01other";
// late_result_ignored events recorded per peer; later ones are only counted.
constexpr int64_t kMaxLateEventsPerPeer = 8;

// A routing id as short hex for the log.
std::string peer_text(const protocol::PeerId& peer) {
  if (peer == kOtherPeers) return "(other peers)";
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < peer.size() && i < 16; ++i) {
    const auto c = static_cast<unsigned char>(peer[i]);
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 0x0f]);
  }
  return out.empty() ? "(no id)" : out;
}

// A suggestion's meta "seed" (trial_source.h), when it gives one.
std::optional<uint64_t> meta_seed(const nlohmann::json& meta) {
  if (!meta.is_object()) return std::nullopt;
  auto it = meta.find("seed");
  if (it == meta.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<uint64_t>();
}

}  // namespace

std::string Scheduler::trial_dir(int64_t trial_id) const {
  return opt_.trials_dir.empty() ? std::string() : opt_.trials_dir + "/" + std::to_string(trial_id);
}

Scheduler::Scheduler(SchedulerOptions options, protocol::ServerTransport& transport, store::Store& store,
                     search::Searcher& searcher, search::EarlyStopper& stopper)
    : Scheduler(std::move(options), transport, store, std::make_unique<SearchSource>(searcher, stopper)) {}

Scheduler::Scheduler(SchedulerOptions options, protocol::ServerTransport& transport, store::Store& store,
                     TrialSource& source)
    : Scheduler(std::move(options), transport, store, std::unique_ptr<TrialSource>()) {
  stages_[0].source = &source;
}

Scheduler::Scheduler(SchedulerOptions options, protocol::ServerTransport& transport, store::Store& store,
                     std::vector<StageSource> stages)
    : Scheduler(std::move(options), transport, store, std::unique_ptr<TrialSource>()) {
  stages_.clear();
  for (const StageSource& st : stages) {
    Stage stage;
    stage.id = st.stage_id;
    stage.source = st.source;
    stage.max_trials = st.source ? st.max_trials : 0;
    stage.exhausted = st.source == nullptr;
    stage.active = st.active;
    stage.trainer = st.trainer;
    stages_.push_back(std::move(stage));
  }
}

void Scheduler::activate_stage(std::size_t index) {
  if (index < stages_.size() && !stages_[index].closed) stages_[index].active = true;
}

Status Scheduler::close_stage(std::size_t index, Clock::time_point now) {
  last_now_ = std::max(last_now_, now);
  if (index >= stages_.size() || stages_[index].closed) return {};
  Stage& st = stages_[index];
  st.closed = true;
  st.active = false;
  st.exhausted = true;
  auto of_stage = [&](int64_t id) {
    auto t = trials_.find(id);
    return t != trials_.end() && t->second.stage == index;
  };
  std::vector<int64_t> waiting;
  for (int64_t id : queue_)
    if (of_stage(id)) waiting.push_back(id);
  for (int64_t id : paused_)
    if (of_stage(id)) waiting.push_back(id);
  for (int64_t id : held_)
    if (of_stage(id)) waiting.push_back(id);
  if (waiting.empty()) return {};
  std::erase_if(queue_, of_stage);
  std::erase_if(paused_, of_stage);
  std::erase_if(held_, of_stage);
  for (int64_t id : waiting) {
    HPCTUNE_TRY(store_.mark_waiting_interrupted(id, trials_[id].attempt));
    ++interrupted_count_;
    trials_.erase(id);
  }
  return {};
}

bool Scheduler::stage_complete(std::size_t index) const {
  if (index >= stages_.size()) return false;
  const Stage& st = stages_[index];
  if (st.closed || !st.active || (!st.exhausted && st.created < st.max_trials)) return false;
  for (const auto& [id, t] : trials_) {
    if (t.stage == index) return false;
  }
  return true;
}

Scheduler::Scheduler(SchedulerOptions options, protocol::ServerTransport& transport, store::Store& store,
                     std::unique_ptr<TrialSource> owned)
    : opt_(std::move(options)),
      transport_(transport),
      store_(store),
      owned_source_(std::move(owned)),
      start_(opt_.wall.at),
      last_now_(opt_.wall.at) {
  Stage stage;
  stage.id = opt_.stage_id;
  stage.source = owned_source_.get();
  stage.max_trials = opt_.max_trials;
  stages_.push_back(std::move(stage));
  secret_ = opt_.secret;
  if (secret_.empty()) {
    // Left empty (tests): draw one. Without a random source no hello is ever accepted.
    if (auto drawn = protocol::random_hex(16); drawn.ok()) secret_ = drawn.value();
  }
}

Result<std::string> Scheduler::launch_credential(int64_t group) {
  if (secret_.empty()) return err(Errc::kIo, "no campaign secret: the system has no random source");
  HPCTUNE_ASSIGN(std::string token, protocol::random_hex(16));
  launch_tokens_[group] = token;
  return secret_ + "." + token;
}

std::string Scheduler::check_credential(const protocol::Hello& m) const {
  const auto dot = m.secret.find('.');
  const std::string_view given(m.secret);
  const std::string_view secret = given.substr(0, dot == std::string::npos ? given.size() : dot);
  const std::string_view token = dot == std::string::npos ? std::string_view() : given.substr(dot + 1);
  // Both parts are always compared, so the time taken does not tell which one was wrong.
  const bool secret_ok = !secret_.empty() && protocol::secrets_equal(secret, secret_);
  auto t = launch_tokens_.find(m.group);
  const bool token_ok = t != launch_tokens_.end() && protocol::secrets_equal(token, t->second);
  if (m.secret.empty()) return "it carries no secret";
  if (!secret_ok) return "it does not carry this campaign's secret";
  if (t == launch_tokens_.end()) return "group " + std::to_string(m.group) + " was not launched by this master";
  if (!token_ok) return "its token is not the one of group " + std::to_string(m.group) + "'s current launch";
  return "";
}

void Scheduler::note_noise(const protocol::PeerId& peer, const char* reason, const std::string& line,
                           Clock::time_point now) {
  const protocol::PeerId& key = noise_.count(peer) || noise_.size() < kMaxNoisyPeers ? peer : kOtherPeers;
  auto [it, fresh] = noise_.try_emplace(key);
  Noise& n = it->second;
  if (fresh) n.window_start = now;
  if (now - n.window_start >= kNoiseWindow) {
    flush_noise(now, false);
    return note_noise(peer, reason, line, now);  // its entry is gone: a new window
  }
  if (n.logged < kNoiseLinesPerWindow) {
    ++n.logged;
    log("peer " + peer_text(key) + ": " + line +
        (n.logged == kNoiseLinesPerWindow ? " (more from this peer: one summary every 10 s)" : ""));
    return;
  }
  ++n.quiet[reason];
}

void Scheduler::flush_noise(Clock::time_point now, bool all) {
  for (auto it = noise_.begin(); it != noise_.end();) {
    Noise& n = it->second;
    if (!all && now - n.window_start < kNoiseWindow) {
      ++it;
      continue;
    }
    if (!n.quiet.empty()) {
      int64_t total = 0;
      std::string by;
      for (const auto& [reason, k] : n.quiet) {
        total += k;
        by += (by.empty() ? "" : ", ") + std::to_string(k) + " " + reason;
      }
      const auto secs = std::chrono::duration_cast<std::chrono::seconds>(now - n.window_start).count();
      log("peer " + peer_text(it->first) + ": " + std::to_string(total) + " more frames dropped in the last " +
          std::to_string(secs) + " s (" + by + ")");
    }
    it = noise_.erase(it);
  }
}

Status Scheduler::note_late_result(const protocol::PeerId& peer, int64_t group, int64_t trial_id, int64_t attempt,
                                   const char* type, Clock::time_point now) {
  ++counters_.stale_results;
  const std::string line = std::string("ignored a late '") + type + "' for trial " + std::to_string(trial_id) +
                           " attempt " + std::to_string(attempt) + " (group " + std::to_string(group) +
                           "): the attempt is no longer current";
  if (++late_events_[peer] > kMaxLateEventsPerPeer) {
    note_noise(peer, "late results", line, now);
    return {};
  }
  log(line);
  return store_.add_event(opt_.campaign_id, "late_result_ignored", trial_id, attempt, group, {{"message", type}},
                          wall(now));
}

double Scheduler::wall(Clock::time_point now) {
  last_wall_ = std::max(opt_.wall.unix_at(now), std::nextafter(last_wall_, std::numeric_limits<double>::infinity()));
  return last_wall_;
}

void Scheduler::log(const std::string& line) const {
  if (log_) log_(line);
}

bool Scheduler::out_of_time(Clock::time_point now) const {
  return opt_.max_time_s > 0 && std::chrono::duration<double>(now - start_).count() >= opt_.max_time_s;
}

// Whether `metrics` (a trial's final ones, as recorded: NaN and infinity are null) hold the objective
// without a finite value: a training that diverged, not a trainer that reported nothing.
bool Scheduler::reported_nonfinite(const nlohmann::json& metrics) const {
  if (opt_.objectives.empty() || !metrics.is_object()) return false;
  auto it = metrics.find(opt_.objectives[0].metric);
  return it != metrics.end() && (it->is_null() || (it->is_number() && !std::isfinite(it->get<double>())));
}

std::optional<double> Scheduler::objective_of(const protocol::Metrics& metrics) const {
  auto value = judged_value(metrics);
  return value && std::isfinite(*value) ? value : std::nullopt;
}

// The objective of a report as the sources judge it: a NaN or infinite value (a diverged training)
// is NaN, which every judge ranks worst (early stopping prunes it, PBT replaces it), not skipped.
std::optional<double> Scheduler::judged_value(const protocol::Metrics& metrics) const {
  if (opt_.objectives.empty()) return std::nullopt;
  auto it = metrics.find(opt_.objectives[0].metric);
  if (it == metrics.end()) return std::nullopt;
  return std::isfinite(it->second) ? it->second : std::numeric_limits<double>::quiet_NaN();
}

Status Scheduler::restore(Clock::time_point now) {
  start_ = now;
  last_now_ = now;
  HPCTUNE_ASSIGN(auto rows, store_.trials(opt_.campaign_id));
  std::vector<std::vector<search::Record>> history(stages_.size());
  const double t = wall(now);
  std::map<int64_t, FinalTrial> final_trials;
  for (auto& row : rows) {
    // A trial of no stage (a database of before stages) belongs to the first one.
    std::size_t k = 0;
    while (k < stages_.size() && stages_[k].id != row.stage_id) ++k;
    if (k == stages_.size()) {
      if (row.stage_id != 0) {
        return err(Errc::kInvalidArgument, "trial " + std::to_string(row.id) + " belongs to stage " +
                                               std::to_string(row.stage_id) + ", which this master does not run");
      }
      k = 0;
    }
    Stage& stage = stages_[k];
    stage.seq_to_id[row.seq] = row.id;
    ++stage.created;
    max_generation_ = std::max(max_generation_, row.generation);
    search::Record rec;
    rec.suggestion.seq = row.seq;
    rec.suggestion.params = row.params;
    rec.suggestion.meta = row.meta.is_null() ? nlohmann::json::object() : row.meta;
    TrialState state = row.state;
    const bool requeued =
        state == TrialState::kAssigned || state == TrialState::kRunning || state == TrialState::kInterrupted;
    if (requeued) {
      // The attempt was cut short by the master's death or Ctrl-C: queue the trial again.
      const std::string why = state == TrialState::kInterrupted ? "interrupted" : "lost";
      // Neither an interruption (the user's doing) nor a master restart (SIGKILL, OOM, a full
      // disk) is the trial's fault: the attempt is recorded but not charged against max_attempts.
      if (state == TrialState::kInterrupted) {
        HPCTUNE_ASSIGN(state, store_.requeue_trial(row.id, row.attempt, "interrupted", "campaign interrupted",
                                                   opt_.max_attempts, t, /*charged=*/false));
      } else {
        HPCTUNE_ASSIGN(state, store_.requeue_trial(row.id, row.attempt, "lost", "master restarted",
                                                   opt_.max_attempts, t, /*charged=*/false));
      }
      HPCTUNE_TRY(store_.add_event(opt_.campaign_id, "trial_requeued", row.id, row.attempt, row.group_id,
                                   {{"reason", why}}, t));
      row.attempt += 1;
    }
    row.state = state;
    if (store::is_final(state)) {
      search::Observation obs;
      obs.seq = row.seq;
      obs.params = row.params;
      obs.step = row.step;
      obs.outcome = state == TrialState::kDone     ? search::Outcome::kCompleted
                    : state == TrialState::kPruned ? search::Outcome::kPruned
                                                   : search::Outcome::kFailed;
      if (state != TrialState::kFailed) {
        for (const auto& o : opt_.objectives) {
          auto it = row.metrics.find(o.metric);
          if (it != row.metrics.end() && it->is_number()) obs.values.push_back(it->get<double>());
        }
        if (obs.values.size() != opt_.objectives.size()) {
          obs.values.clear();
          obs.outcome = search::Outcome::kFailed;
        }
      }
      rec.observation = std::move(obs);
      final_trials[row.id] = {k, row.seq, row.finished_at};
      if (state == TrialState::kDone) note_done_values(row.id, row.metrics);
      if (state == TrialState::kDone) ++done_;
      if (state == TrialState::kPruned) ++pruned_;
      if (state == TrialState::kFailed) ++failed_;
      if (state == TrialState::kFailed && reported_nonfinite(row.metrics)) ++diverged_;
      if (state != TrialState::kFailed && row.objective && k == opt_.best_stage &&
          (!best_ || better(*row.objective, *best_, opt_.objectives[0].maximize))) {
        best_ = row.objective;
        best_trial_ = row.id;
      }
    } else {
      Trial trial;
      trial.id = row.id;
      trial.seq = row.seq;
      trial.params = row.params;
      trial.state = TrialState::kQueued;
      trial.attempt = row.attempt;
      trial.resume_from = row.resume_from;
      trial.stage = k;
      trial.seed = meta_seed(row.meta);
      trial.last_step = row.step;
      trial.rerun = requeued;
      const bool held = state == TrialState::kPaused && stage.source && stage.source->holds_paused();
      if (held) trial.state = TrialState::kPaused;
      trials_[row.id] = std::move(trial);
      if (held) held_.push_back(row.id);
      else queue_.push_back(row.id);
    }
    history[k].push_back(std::move(rec));
  }
  created_ = static_cast<int64_t>(rows.size());
  for (std::size_t k = 0; k < stages_.size(); ++k) {
    if (stages_[k].source) stages_[k].source->restore(history[k]);
  }
  // A source that holds paused trials resumes them from their checkpoints: what they reported
  // before stays part of their history (a pausing stopper's rungs).
  std::map<int64_t, FinalTrial> unfinished;
  for (const auto& [id, t] : trials_) {
    const TrialSource* src = stages_[t.stage].source;
    if (src != nullptr && src->holds_paused() && src->replays_reports()) unfinished[id] = {t.stage, t.seq, 0};
  }
  HPCTUNE_TRY(replay_reports(final_trials, unfinished));
  if (opt_.process_groups) HPCTUNE_TRY(restore_cohorts());
  if (!rows.empty()) log("resumed: " + std::to_string(rows.size()) + " trials recorded, " +
                         std::to_string(queue_.size()) + " queued again");
  return {};
}

Status Scheduler::handle(const protocol::PeerId& peer, std::string_view bytes, Clock::time_point now) {
  last_now_ = std::max(last_now_, now);
  auto decoded = protocol::decode(bytes);
  if (!decoded.ok()) {
    ++counters_.malformed;
    note_noise(peer, "malformed",
               "dropped a malformed frame (" + std::to_string(bytes.size()) + " bytes): " + decoded.error().message(), now);
    return {};
  }
  const protocol::Message& msg = decoded.value();
  if (auto* hello = std::get_if<protocol::Hello>(&msg)) return on_hello(peer, *hello, now);

  auto it = workers_.find(peer);
  if (it == workers_.end()) return on_stray(peer, msg, now);
  Worker& w = it->second;
  w.last_seen = now;

  return std::visit(
      [&](const auto& m) -> Status {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, protocol::Ready>) {
          if (w.trial_id != 0) {
            ++counters_.out_of_order;
            note_noise(peer, "out of order",
                       "group " + std::to_string(w.group) + " said ready while running trial " + std::to_string(w.trial_id),
                       now);
            return {};
          }
          mark_idle(w);
          return dispatch(now);
        } else if constexpr (std::is_same_v<T, protocol::Report>) {
          return on_report(w, m, now);
        } else if constexpr (std::is_same_v<T, protocol::Done>) {
          return on_done(w, m, now);
        } else if constexpr (std::is_same_v<T, protocol::Failed>) {
          return on_failed(w, m, now);
        } else if constexpr (std::is_same_v<T, protocol::Heartbeat>) {
          return on_heartbeat(w, m, now);
        } else {
          // welcome, assign, stop, shutdown travel master -> worker only.
          ++counters_.out_of_order;
          note_noise(peer, "out of order",
                     std::string("dropped a '") + protocol::type_name(msg) + "' from group " + std::to_string(w.group) +
                         ": only the master sends it",
                     now);
          return Status{};
        }
      },
      msg);
}

Status Scheduler::on_stray(const protocol::PeerId& peer, const protocol::Message& m, Clock::time_point now) {
  int64_t trial_id = 0, attempt = 0;
  if (auto* d = std::get_if<protocol::Done>(&m)) trial_id = d->trial_id, attempt = d->attempt;
  if (auto* f = std::get_if<protocol::Failed>(&m)) trial_id = f->trial_id, attempt = f->attempt;
  if (trial_id != 0 && lost_peers_.count(peer)) {
    // A result from a worker we declared lost (SIGSTOP, network partition): recorded as an event.
    return note_late_result(peer, -1, trial_id, attempt, protocol::type_name(m), now);
  }
  // A peer that never registered (or a lost one's other traffic): nothing of it reaches the store.
  ++counters_.unregistered;
  note_noise(peer, "unregistered",
             std::string("dropped a '") + protocol::type_name(m) + "' from a peer that never said hello", now);
  return {};
}

Status Scheduler::on_hello(const protocol::PeerId& peer, const protocol::Hello& m, Clock::time_point now) {
  if (m.version != protocol::kVersion) {
    ++counters_.bad_version;
    // Answered only when it carries the credential of a launch of this master (a worker of another
    // hpctune version it started): anyone else learns nothing, not even the version.
    if (const std::string why = check_credential(m); !why.empty()) {
      ++counters_.unauthenticated;
      note_noise(peer, "unauthenticated",
                 "refused a hello of protocol version " + std::to_string(m.version) + " without an answer: " + why, now);
      return {};
    }
    note_noise(peer, "bad version",
               "refused a worker speaking protocol version " + std::to_string(m.version) + " (this master speaks " +
                   std::to_string(protocol::kVersion) + ")",
               now);
    // A courtesy to the peer (it is refused either way): a failed send is only worth a log line.
    auto sent = transport_.send(peer, protocol::encode(protocol::Shutdown{
                                          "protocol version " + std::to_string(m.version) +
                                          " is not supported; the master speaks " + std::to_string(protocol::kVersion)}));
    if (!sent.ok()) log("could not tell that worker why: " + sent.error().to_string());
    return {};
  }
  // Not this campaign's launch of that group: no answer, no store write (the peer learns nothing).
  if (const std::string why = check_credential(m); !why.empty()) {
    ++counters_.unauthenticated;
    note_noise(peer, "unauthenticated", "refused a hello naming group " + std::to_string(m.group) + ": " + why, now);
    return {};
  }
  if (auto g = group_peer_.find(m.group); g != group_peer_.end() && g->second != peer) {
    auto live = workers_.find(g->second);
    if (live != workers_.end() && live->second.incarnation != m.incarnation) {
      // The group's process is alive and talking: a second incarnation is not expected until the
      // launcher reports the exit or the heartbeat times out.
      ++counters_.identity_refused;
      note_noise(peer, "identity refused",
                 "refused a hello naming group " + std::to_string(m.group) +
                     ": the group is registered and alive with another incarnation",
                 now);
      return {};
    }
    // The same worker process on a new connection (it reconnected): the old connection is gone.
    HPCTUNE_TRY(lose_worker(g->second, "group " + std::to_string(m.group) + " reconnected", now));
  }
  if (auto it = workers_.find(peer); it != workers_.end()) {
    // The same connection said hello twice: treat as a restart of that worker.
    HPCTUNE_TRY(lose_worker(peer, "said hello again", now));
  }
  lost_peers_.erase(peer);
  Worker w;
  w.peer = peer;
  w.incarnation = m.incarnation;
  w.group = m.group;
  for (const std::string& id : m.gpus) w.gpus += (w.gpus.empty() ? "" : ",") + id;
  w.last_seen = now;
  w.last_heartbeat_sent = now;
  workers_[peer] = w;
  group_peer_[m.group] = peer;
  ever_registered_[m.group] = true;
  protocol::Welcome welcome;
  welcome.master_incarnation = opt_.master_incarnation;
  welcome.heartbeat_interval_ms = opt_.heartbeat_interval.count();
  welcome.heartbeat_timeout_ms = opt_.heartbeat_timeout.count();
  send(workers_[peer], welcome);
  HPCTUNE_TRY(store_.upsert_group(opt_.campaign_id, m.group, opt_.backend, m.ranks_data, m.ranks_model, "registered",
                                  m.incarnation, 0, wall(now)));
  log("group " + std::to_string(m.group) + " registered (pid " + std::to_string(m.pid) + " on " + m.host + ")");
  return {};
}

Scheduler::Trial* Scheduler::current_trial(Worker& w, int64_t trial_id, int64_t attempt) {
  auto it = trials_.find(trial_id);
  if (w.trial_id != trial_id || it == trials_.end() || it->second.attempt != attempt || it->second.peer != w.peer) {
    return nullptr;
  }
  return &it->second;
}

Status Scheduler::on_heartbeat(Worker& w, const protocol::Heartbeat& m, Clock::time_point now) {
  if (w.trial_id == 0) return {};
  auto t = trials_.find(w.trial_id);
  if (t == trials_.end()) return {};
  if (m.trial_id == w.trial_id && m.attempt == t->second.attempt) {
    w.acknowledged = true;
    return {};
  }
  // The worker says it runs nothing (or something else) while this attempt is assigned to it: its
  // result was lost on the way, or the assign was. A heartbeat sent before the assign reached the
  // worker says the same, so that counts only once the worker has acknowledged the attempt (its
  // frames arrive in order), or when it has ignored it for a whole heartbeat timeout.
  if (!w.acknowledged && now - w.assigned_at <= opt_.heartbeat_timeout) return {};
  const std::string what = m.trial_id == 0 ? "idle" : "running trial " + std::to_string(m.trial_id) + " attempt " +
                                                          std::to_string(m.attempt);
  const std::string why = "group " + std::to_string(w.group) + " says it is " + what + " while trial " +
                          std::to_string(w.trial_id) + " attempt " + std::to_string(t->second.attempt) +
                          " was assigned to it";
  log(why + "; the attempt is lost");
  if (m.trial_id != 0) {  // confused: start it over (lose_worker erases w: copy its peer first)
    const protocol::PeerId peer = w.peer;
    return lose_worker(peer, why, now);
  }
  HPCTUNE_TRY(lose_attempt(w, why, now));
  mark_idle(w);
  return dispatch(now);
}

Status Scheduler::on_report(Worker& w, const protocol::Report& m, Clock::time_point now) {
  Trial* t = current_trial(w, m.trial_id, m.attempt);
  if (!t) {
    ++counters_.stale_results;
    note_noise(w.peer, "stale reports",
               "ignored a report for trial " + std::to_string(m.trial_id) + " attempt " + std::to_string(m.attempt) +
                   " that group " + std::to_string(w.group) + " does not run",
               now);
    return {};
  }
  w.acknowledged = true;
  const double tw = wall(now);
  if (t->state == TrialState::kAssigned) {
    t->state = TrialState::kRunning;
    HPCTUNE_TRY(store_.mark_running(t->id, t->attempt, tw));
  }
  // A report without metrics is the worker's "started" notice: nothing to record or judge.
  if (m.metrics.empty()) return {};
  if (t->resumed_at > 0 && m.step > 0 && m.step < t->resumed_at)
    HPCTUNE_TRY(note_restarted_steps(w, *t, m.step, tw));
  if (const auto last = source_of(*t).judged_until(); last && m.step > *last)
    HPCTUNE_TRY(note_step_past_judge(w, *t, m.step, *last, tw));
  t->last_step = m.step;
  t->last_metrics = m.metrics;
  if (t->reports++ == 0) t->first_report_w = tw;
  t->last_report_w = tw;
  if (t->first_report_step < 0) t->first_report_step = m.step;
  if (t->judged_from < 0 && !opt_.objectives.empty() && m.metrics.count(opt_.objectives[0].metric) > 0)
    t->judged_from = m.step;
  HPCTUNE_TRY(store_.add_metrics(t->id, t->attempt, m.step, m.metrics, tw));
  if (!t->stop_sent) {
    if (auto value = judged_value(m.metrics)) {
      TrialView view{t->id, t->seq, t->attempt, &t->params, trial_dir(t->id)};
      Verdict verdict = source_of(*t).on_report(view, m.step, *value);
      if (verdict.kind == Verdict::Kind::kPause) {
        t->stop_sent = true;
        send(w, protocol::Stop{t->id, t->attempt, protocol::StopReason::kPause});
        HPCTUNE_TRY(note_pause(w, *t, m.step, *value, std::move(verdict), {}, tw));
      } else if (verdict.kind == Verdict::Kind::kStop) {
        t->stop_sent = true;
        send(w, protocol::Stop{t->id, t->attempt, protocol::StopReason::kPruned});
        log("trial " + std::to_string(t->id) + " pruned at step " + std::to_string(m.step));
        // The decision itself, also when the trial finishes before the stop reaches it (it is then
        // recorded done).
        HPCTUNE_TRY(store_.add_event(opt_.campaign_id, "stop_requested", t->id, t->attempt, w.group,
                                     {{"reason", "pruned"}, {"step", m.step}, {"value", *value}}, tw));
      }
    }
  }
  return {};
}

void Scheduler::tell_searcher(const Trial& t, search::Outcome outcome, const protocol::Metrics& metrics, int64_t step) {
  search::Observation obs;
  obs.seq = t.seq;
  obs.params = t.params;
  obs.outcome = outcome;
  obs.step = step;
  if (outcome != search::Outcome::kFailed) {
    for (const auto& o : opt_.objectives) {
      auto it = metrics.find(o.metric);
      if (it == metrics.end()) {
        obs.values.clear();
        obs.outcome = search::Outcome::kFailed;
        break;
      }
      obs.values.push_back(it->second);
    }
  }
  source_of(t).tell(obs);
}

// A source paused trial t at `step` (judged on `value`): logged and recorded (the decision, what
// the source noted with it, the lineage it names); the pause takes effect when the attempt ends.
Status Scheduler::note_pause(const Worker& w, Trial& t, int64_t step, double value, Verdict verdict,
                             const nlohmann::json& extra, double tw) {
  log("trial " + std::to_string(t.id) + " paused at step " + std::to_string(step));
  nlohmann::json detail = {{"step", step}, {"value", value}, {"params", verdict.params},
                           {"resume_from", store::path_to_record(opt_.trials_dir, verdict.resume_from)}};
  if (extra.is_object()) detail.update(extra);
  HPCTUNE_TRY(store_.add_event(opt_.campaign_id, "pause_requested", t.id, t.attempt, w.group, detail, tw));
  // What the source decided with it (PBT's exploit and explore), an event per key.
  if (verdict.note.is_object()) {
    for (auto it = verdict.note.begin(); it != verdict.note.end(); ++it) {
      HPCTUNE_TRY(store_.add_event(opt_.campaign_id, it.key(), t.id, t.attempt, w.group, it.value(), tw));
    }
  }
  if (verdict.lineage_parent > 0) {
    HPCTUNE_TRY(store_.add_lineage(t.id, verdict.lineage_parent,
                                   verdict.lineage_relation.empty() ? "parent" : verdict.lineage_relation));
  }
  t.pause = std::move(verdict);
  return Status::Ok();
}

// The attempt ended by itself at the step its source set (step_target), its last report before
// that step (a program that reports every few steps, or counts its epochs from 0 and reports the
// epoch it just trained: at most step_target - 1): it is judged there on that report, which is
// recorded at that step too (so a resumed master replays it), and it pauses if its source says so.
// Before, such a trial ended done at its first rung or interval, and was never continued.
Status Scheduler::judge_at_target(const Worker& w, Trial& t, const protocol::Done& m, double tw) {
  const TrialView view{t.id, t.seq, t.attempt, &t.params, trial_dir(t.id)};
  const std::optional<int64_t> target = source_of(t).step_target(view);
  const int64_t reached = std::max(m.step, t.last_step);
  // Only an attempt that reported in this run (its value is of this leg), short of the target.
  if (!target || t.first_report_step < 0 || reached >= *target) return Status::Ok();
  const protocol::Metrics& metrics = m.metrics.empty() ? t.last_metrics : m.metrics;
  const std::optional<double> value = judged_value(metrics);
  if (!value) return Status::Ok();
  Verdict verdict = source_of(t).on_report(view, *target, *value);
  if (verdict.kind != Verdict::Kind::kPause) return Status::Ok();
  HPCTUNE_TRY(store_.add_metrics(t.id, t.attempt, *target, metrics, tw));
  t.last_step = *target;
  return note_pause(w, t, *target, *value, std::move(verdict), {{"reported_step", reached}}, tw);
}

// The attempt ran again after the last one was lost and reported nothing: the lost one trained to
// where this one would (a program that loads its checkpoint and finds no step left), so the
// trial's latest recorded report stands for this attempt, taken as if sent again (as the built-in
// trainers send theirs). Before, such a trial failed ("reported no metric") on every resume that
// found it at its rung or its end. true when there was one.
Result<bool> Scheduler::recall_last_report(Worker& w, Trial& t, Clock::time_point now) {
  HPCTUNE_ASSIGN(const std::vector<store::MetricRow> rows, store_.metrics(t.id));
  protocol::Report r{t.id, t.attempt, -1, {}};
  for (const auto& row : rows) {
    if (row.step > r.step) r.metrics.clear(), r.step = row.step;
    if (row.step == r.step) r.metrics[row.name] = row.value;  // the latest attempt's, in order
  }
  if (r.step < 0 || r.metrics.empty()) return false;
  log("trial " + std::to_string(t.id) + " attempt " + std::to_string(t.attempt) +
      " reported nothing after a lost attempt: its last report (step " + std::to_string(r.step) + ") stands");
  HPCTUNE_TRY(on_report(w, r, now));
  return true;
}

// What the attempt says happened inside it (done.events: a data replica that died and was
// dropped) as events of the attempt, and its done.sync_mode on the trial.
Status Scheduler::record_trial_events(const Worker& w, const Trial& t, const protocol::Done& m, double tw) {
  for (const protocol::TrialEvent& e : m.events) {
    HPCTUNE_TRY(store_.add_event(opt_.campaign_id, e.kind, t.id, t.attempt, w.group, e.detail, tw));
    log("trial " + std::to_string(t.id) + " attempt " + std::to_string(t.attempt) + ": " + e.kind + " " + e.detail.dump());
  }
  if (!m.sync_mode.empty()) HPCTUNE_TRY(store_.set_sync_mode(t.id, m.sync_mode));
  return Status::Ok();
}

Status Scheduler::on_done(Worker& w, const protocol::Done& m, Clock::time_point now) {
  Trial* t = current_trial(w, m.trial_id, m.attempt);
  if (!t) return note_late_result(w.peer, w.group, m.trial_id, m.attempt, "done", now);
  if (failpoint_) failpoint_("after-result");
  bool recalled = false;
  if (t->rerun && t->last_step <= 0 && !m.stopped) {  // nothing past step 0 (a report of the loaded model)
    HPCTUNE_ASSIGN(recalled, recall_last_report(w, *t, now));
  }
  const double tw = wall(now);
  if (!t->pause && !t->stop_sent && !m.stopped) HPCTUNE_TRY(judge_at_target(w, *t, m, tw));
  HPCTUNE_TRY(note_overhead(w, *t, tw));
  HPCTUNE_TRY(note_bunched_reports(w, *t, tw));
  // A pause decided for this attempt wins also when the trainer ended by itself before the stop
  // reached it (a PBT interval ends exactly where the pause is decided).
  if (t->pause) return pause_attempt(w, *t, m, now);
  // A trial pruned by us comes back with the metrics it had; use its last report if it sent none.
  protocol::Metrics metrics = m.metrics.empty() ? t->last_metrics : m.metrics;
  if (recalled) metrics.insert(t->last_metrics.begin(), t->last_metrics.end());  // its own keys (train_seconds) kept
  auto objective = objective_of(metrics);
  TrialState state = (m.stopped && t->stop_sent) ? TrialState::kPruned : TrialState::kDone;
  std::string error;
  bool diverged = false;  // failed with the objective reported as NaN or infinity
  if (!objective && !opt_.objectives.empty()) {
    state = TrialState::kFailed;
    // Name what it did report: a misspelt metric name is the usual cause.
    std::string reported;
    for (const auto& [name, value] : metrics) reported += (reported.empty() ? "" : ", ") + name;
    const auto nonfinite = metrics.find(opt_.objectives[0].metric);
    diverged = nonfinite != metrics.end();  // reported, as NaN or infinity (a program's diverged loss)
    if (diverged)
      error = "the trial's last '" + opt_.objectives[0].metric + "' (step " + std::to_string(std::max(m.step, t->last_step)) +
              ") was " + (std::isnan(nonfinite->second) ? "NaN" : "infinite") + ": its training diverged";
    else
      error = "the trial reported no '" + opt_.objectives[0].metric + "' metric (" +
              (reported.empty() ? std::string("it reported no metrics") : "it reported: " + reported) + ")";
    // No report came while it ran: a program that prints none, or prints them where they do not count,
    // or one that reports every few steps and was to stop before its first report.
    if (t->last_metrics.empty()) {
      error += "; no report reached the master while it ran: a program prints 'hpctune-report {json}' lines on "
               "standard output (hpctune trial DB ID shows its logs)";
      const TrialView view{t->id, t->seq, t->attempt, &t->params, trial_dir(t->id)};
      if (const auto target = source_of(*t).step_target(view)) {
        error += "; it was to train to step " + std::to_string(*target) +
                 " and stop there (HPCTUNE_MAX_STEP: its first rung or interval), so it must report by then";
      }
    }
  }
  for (const auto& a : m.artifacts) {
    HPCTUNE_TRY(store_.add_artifact(t->id, t->attempt, a.kind, a.path, a.bytes, tw));
  }
  HPCTUNE_TRY(record_trial_events(w, *t, m, tw));
  HPCTUNE_TRY(note_unjudged(w, *t, tw));
  HPCTUNE_ASSIGN(bool applied, store_.finish_trial(t->id, t->attempt, state, metrics_json(metrics), objective,
                                                   std::max(m.step, t->last_step), error, tw));
  if (applied) {
    if (state == TrialState::kDone) source_of(*t).on_result(t->seq, metrics_json(metrics));
    tell_searcher(*t, state == TrialState::kDone ? search::Outcome::kCompleted
                      : state == TrialState::kPruned ? search::Outcome::kPruned
                                                     : search::Outcome::kFailed,
                  metrics, std::max(m.step, t->last_step));
    if (state == TrialState::kDone) ++done_;
    if (state == TrialState::kDone && objective) HPCTUNE_TRY(note_constant_objective(w, *t, *objective, tw));
    if (state == TrialState::kPruned) ++pruned_;
    if (state == TrialState::kFailed) {
      ++failed_;
      if (diverged) ++diverged_;
      log("trial " + std::to_string(t->id) + " failed: " + error);
      note_failure(t->id, error);
    }
    if (objective && state != TrialState::kFailed && t->stage == opt_.best_stage &&
        (!best_ || better(*objective, *best_, opt_.objectives[0].maximize))) {
      best_ = objective;
      best_trial_ = t->id;
    }
    if (state == TrialState::kDone) note_done_values(t->id, metrics_json(metrics));
    HPCTUNE_TRY(after_finish(now));
  }
  trials_.erase(t->id);
  w.trial_id = 0;
  if (m.group_ends) {
    // It lost a rank and ends now: its exit, and the launcher's restart, follow.
    log("group " + std::to_string(w.group) + " ends after trial " + std::to_string(m.trial_id) +
        " (it lost a rank): nothing more is assigned to it");
  } else {
    mark_idle(w);
  }
  return dispatch(now);
}

// A trial of a stage whose source judges the objective in its reports (early stopping, pbt) ended
// after step reports none of which carried it before the last: the source never judged it while it
// ran, and will judge no trial of a program that reports the objective only at its end. Said once per
// stage: a log line and a `reports_unjudged` event {metric, judge, reported: the last report's metrics}.
Status Scheduler::note_unjudged(const Worker& w, Trial& t, double tw) {
  Stage& st = stages_[t.stage];
  const bool judged = t.judged_from >= 0 && (t.judged_from < t.last_step || t.first_report_step == t.last_step);
  if (judged || t.last_metrics.empty() || opt_.objectives.empty() || st.source == nullptr) return Status::Ok();
  const std::string judge = st.source->report_judge();
  if (judge.empty()) return Status::Ok();
  if (!st.warned.insert("reports_unjudged").second) return Status::Ok();
  std::vector<std::string> reported;
  for (const auto& [name, value] : t.last_metrics) reported.push_back(name);
  const std::string& metric = opt_.objectives[0].metric;
  log("warning: trial " + std::to_string(t.id) + " reported '" + metric + "' in no step before its last (step " +
      std::to_string(t.last_step) + ": " + join(reported, ", ") + "), so " + judge + " never judged it while it ran: report '" +
      metric + "' with every step, or make a metric reported every step the objective");
  return store_.add_event(opt_.campaign_id, "reports_unjudged", t.id, t.attempt, w.group,
                          {{"metric", metric}, {"judge", judge}, {"reported", reported}}, tw);
}

// An attempt that resumed from its pause's checkpoint at step `resumed_at` reported an earlier
// step: its program counts its steps from the start again after loading the checkpoint (or ignores
// the checkpoint and trains from scratch). Its reports repeat steps already recorded, so the rungs
// and intervals compare it with trials that trained fewer steps and the steps consumed (max_steps)
// undercount what it trains. Said once per stage, as a warning and a `steps_restarted` event.
Status Scheduler::note_restarted_steps(const Worker& w, const Trial& t, int64_t step, double tw) {
  Stage& st = stages_[t.stage];
  if (!st.warned.insert("steps_restarted").second) return Status::Ok();
  log("warning: trial " + std::to_string(t.id) + " attempt " + std::to_string(t.attempt) +
      " resumed from its checkpoint at step " + std::to_string(t.resumed_at) + " (HPCTUNE_RESUME_FROM) but reported step " +
      std::to_string(step) + ": its program counts steps from the start again, or trains from scratch; keep the step " +
      "in the checkpoint and go on from it, or steps already trained are trained and counted again");
  return store_.add_event(opt_.campaign_id, "steps_restarted", t.id, t.attempt, w.group,
                          {{"resumed_at", t.resumed_at}, {"reported_step", step}}, tw);
}

// A report at a step past the last one the stage's judge looks at (early stopping's max_t): the
// judge ignores it, as a trial's result, so a program that counts its steps in another unit than
// max_t (batches or samples against epochs) is never judged, and nothing is stopped or paused.
// Said once per stage, as a warning and a `steps_past_judge` event.
Status Scheduler::note_step_past_judge(const Worker& w, const Trial& t, int64_t step, int64_t last, double tw) {
  Stage& st = stages_[t.stage];
  if (st.source == nullptr || !st.warned.insert("steps_past_judge").second) return Status::Ok();
  const std::string judge = st.source->report_judge();
  log("warning: trial " + std::to_string(t.id) + " reported step " + std::to_string(step) +
      ", past early_stopping.max_t (" + std::to_string(last) + "), the last step " + judge + " judges: it judges no " +
      "report past it, so a program that counts its steps in another unit (batches against max_t's epochs, say) has " +
      "none of its trials stopped; report steps in max_t's unit, or set max_t to the program's last step");
  return store_.add_event(opt_.campaign_id, "steps_past_judge", t.id, t.attempt, w.group,
                          {{"step", step}, {"last_step", last}, {"judge", judge}}, tw);
}

// The stage's first kSameValueTrials done trials with different parameters all reported exactly
// the same objective value: the parameters most likely never reach the program (it reads other
// names than the space's, or none, and trains the same model every time), or no trial learned
// anything; either way the search has nothing to go on. A trained model whose value moves with its
// parameters, or with the trial's seed, never repeats a value exactly. Said once per stage, as a
// warning and a `same_objective` event.
Status Scheduler::note_constant_objective(const Worker& w, const Trial& t, double value, double tw) {
  constexpr std::size_t kSameValueTrials = 5;
  Stage::SameValue& same = stages_[t.stage].same_value;
  if (same.settled) return Status::Ok();
  if (!same.value) {
    same.value = value;
    same.params = t.params;
    same.trials = {t.id};
    return Status::Ok();
  }
  if (value != *same.value) {
    same.settled = true;
    return Status::Ok();
  }
  if (t.params == same.params) return Status::Ok();  // the same configuration again (a retrain, a noisy repeat)
  same.trials.push_back(t.id);
  if (same.trials.size() < kSameValueTrials) return Status::Ok();
  same.settled = true;
  const std::string& metric = opt_.objectives[0].metric;
  log("warning: the first " + std::to_string(same.trials.size()) + " trials of this stage, each with other " +
      "parameters (trial " + std::to_string(t.id) + ": " + t.params.dump() + "), all reported " + metric + " = " +
      format_number(value) + " exactly: either their parameters do not reach the program (it reads hp.params() or " +
      "HPCTUNE_PARAMS under other names than the space's), or none of them learned anything (a chance-level " +
      "accuracy); the search has nothing to go on");
  return store_.add_event(opt_.campaign_id, "same_objective", t.id, t.attempt, w.group,
                          {{"metric", metric}, {"value", value}, {"trials", same.trials}}, tw);
}

// Attempts that spend most of their time outside their steps: the program starts (Python, its
// imports, its data) and ends once per attempt, which a program that stays alive (a trainer's
// persistent setting, with a loop over hp.trials()) pays once per group. Of the stage's first
// kOverheadAttempts attempts with 2 or more step reports: an attempt's k steps take k times the gap
// between its reports, (last - first) / (k - 1); the rest of its time, from its dispatch to its
// end, is overhead. When the median overhead is at least kOverheadShare of the median attempt and at
// least kOverheadSeconds, and the stage's trainer kind can keep its program alive
// (config::trainer_persistent_setting), said once per stage: a warning and an `attempt_overhead` event.
Status Scheduler::note_overhead(const Worker& w, const Trial& t, double tw) {
  constexpr std::size_t kOverheadAttempts = 5;
  constexpr double kOverheadSeconds = 0.5;
  constexpr double kOverheadShare = 1.0 / 3;  // examples/pytorch's 2-epoch pbt intervals: 44%
  Stage& st = stages_[t.stage];
  Stage::Overhead& o = st.overhead;
  if (o.settled || t.reports < 2 || t.dispatched_w <= 0 || tw < t.last_report_w) return Status::Ok();
  // Reports that came together tell nothing of a step's time (note_bunched_reports).
  if (t.last_report_w - t.first_report_w < kBunchedSpan) return Status::Ok();
  const double length = tw - t.dispatched_w;
  const double step = (t.last_report_w - t.first_report_w) / static_cast<double>(t.reports - 1);
  o.overhead_s.push_back(std::max(0.0, length - step * static_cast<double>(t.reports)));
  o.attempt_s.push_back(length);
  if (o.attempt_s.size() < kOverheadAttempts) return Status::Ok();
  o.settled = true;
  auto centi = [](double seconds) { return std::round(seconds * 100) / 100; };  // as said: 1.03 s
  const double overhead = centi(median_of(o.overhead_s)), attempt = centi(median_of(o.attempt_s));
  const nlohmann::json& trainer = st.trainer.is_object() ? st.trainer : opt_.trainer;
  const nlohmann::json kind = trainer.is_object() ? trainer.value("kind", nlohmann::json()) : nlohmann::json();
  const std::string setting = kind.is_string() ? config::trainer_persistent_setting(kind.get<std::string>()) : "";
  if (setting.empty() || overhead < kOverheadSeconds || overhead < kOverheadShare * attempt) return Status::Ok();
  const bool persistent = trainer.contains(setting) && trainer[setting].is_boolean() && trainer[setting].get<bool>();
  const std::string share = std::to_string(static_cast<int>(std::lround(100.0 * overhead / attempt)));
  log("warning: the first " + std::to_string(o.attempt_s.size()) + " attempts of this stage spent " + share +
      "% of their time outside their steps (median " + format_number(overhead) + " s of " + format_number(attempt) +
      " s): starting and ending the program, which runs afresh for each attempt" +
      (persistent ? " although trainer." + setting + " is on: loop over hp.trials() (tools/python/hpctune_report.py) "
                    "and load the data before the loop"
                  : "; with trainer." + setting + ": true and a loop over hp.trials() (tools/python/hpctune_report.py) "
                    "one program per group serves the trials and intervals in turn"));
  return store_.add_event(opt_.campaign_id, "attempt_overhead", t.id, t.attempt, w.group,
                          {{"overhead_s", overhead}, {"attempt_s", attempt}, {"attempts", o.attempt_s.size()},
                           {"setting", setting}, {"persistent", persistent}},
                          tw);
}

// An attempt whose reports all came together at its end, after it had run a while: its program
// buffers its standard output (C's stdio on a pipe, a Python with PYTHONUNBUFFERED empty), so the
// stage's judge (early stopping, pbt) saw its steps only once it had trained all of them, and could
// stop or pause it at none. Said once per stage, where a judge reads the reports: a warning and a
// `reports_bunched` event.
Status Scheduler::note_bunched_reports(const Worker& w, const Trial& t, double tw) {
  constexpr int64_t kReports = 3;
  constexpr double kRan = 1.0, kAtEnd = 0.5;  // seconds
  Stage& st = stages_[t.stage];
  if (st.source == nullptr || t.reports < kReports || t.dispatched_w <= 0) return Status::Ok();
  const double span = t.last_report_w - t.first_report_w, ran = t.first_report_w - t.dispatched_w;
  if (span >= kBunchedSpan || ran < kRan || tw - t.last_report_w >= kAtEnd) return Status::Ok();
  const std::string judge = st.source->report_judge();
  if (judge.empty() || !st.warned.insert("reports_bunched").second) return Status::Ok();
  const auto ms = static_cast<int64_t>(std::lround(span * 1000));
  log("warning: trial " + std::to_string(t.id) + "'s " + std::to_string(t.reports) + " reports (steps " +
      std::to_string(t.first_report_step) + " to " + std::to_string(t.last_step) + ") all came within " +
      std::to_string(ms) + " ms at its end, after " + format_number(std::round(ran * 10) / 10) +
      " s, so " + judge + " judged it only once it had trained every step: where its program buffers its " +
      "standard output, print each report line with a flush (print(..., flush=True), fflush(stdout), std::endl)");
  return store_.add_event(opt_.campaign_id, "reports_bunched", t.id, t.attempt, w.group,
                          {{"reports", t.reports}, {"first_step", t.first_report_step}, {"last_step", t.last_step},
                           {"span_s", span}, {"after_s", ran}, {"judge", judge}},
                          tw);
}

// The attempt ended on our pause: the trial waits, paused, for the next tick, then runs again on
// any free group as the next attempt, with the source's parameters, from its checkpoint.
Status Scheduler::pause_attempt(Worker& w, Trial& t, const protocol::Done& m, Clock::time_point now) {
  const double tw = wall(now);
  const Verdict pause = *t.pause;
  for (const auto& a : m.artifacts) HPCTUNE_TRY(store_.add_artifact(t.id, t.attempt, a.kind, a.path, a.bytes, tw));
  HPCTUNE_TRY(record_trial_events(w, t, m, tw));
  if (!m.metrics.empty()) HPCTUNE_TRY(store_.add_metrics(t.id, t.attempt, std::max(m.step, t.last_step), m.metrics, tw));
  const nlohmann::json params = pause.params.is_object() ? pause.params : t.params;
  HPCTUNE_ASSIGN(bool applied, store_.pause_trial(t.id, t.attempt, params, pause.resume_from,
                                                  "paused at step " + std::to_string(std::max(m.step, t.last_step)), tw));
  if (applied) {
    HPCTUNE_TRY(store_.add_event(opt_.campaign_id, "trial_paused", t.id, t.attempt, w.group,
                                 {{"step", std::max(m.step, t.last_step)}, {"old_params", t.params}, {"params", params},
                                  {"resume_from", store::path_to_record(opt_.trials_dir, pause.resume_from)}},
                                 tw));
    source_of(t).on_attempt_end(t.seq);
    TrialView view{t.id, t.seq, t.attempt, &t.params, trial_dir(t.id)};
    if (auto st = source_of(t).on_paused(view, std::max(m.step, t.last_step)); !st.ok()) {
      // What the trial's program left is refused (a link out of its checkpoint directory, nothing
      // saved): the trial fails as if its program had, and the campaign goes on.
      if (st.error().code() != Errc::kFailed) return st;
      return fail_paused(w, t, st.error().message(), now);
    }
    t.attempt += 1;
    t.rerun = false;
    t.paused_at = pause.resume_step >= 0 ? pause.resume_step : std::max(m.step, t.last_step);
    t.params = params;
    t.resume_from = pause.resume_from;
    t.state = TrialState::kPaused;
    t.peer.clear();
    t.pause.reset();
    paused_.push_back(t.id);
  }
  w.trial_id = 0;
  mark_idle(w);
  return dispatch(now);
}

// The trial just paused (its next attempt, t.attempt + 1, waits) cannot go on: it fails with `error`.
Status Scheduler::fail_paused(Worker& w, Trial& t, const std::string& error, Clock::time_point now) {
  return fail_attempt(w, t, t.attempt + 1, error, error, now);
}

Status Scheduler::on_failed(Worker& w, const protocol::Failed& m, Clock::time_point now) {
  Trial* t = current_trial(w, m.trial_id, m.attempt);
  if (!t) return note_late_result(w.peer, w.group, m.trial_id, m.attempt, "failed", now);
  std::string error = m.error;
  if (!m.stderr_tail.empty()) error += "\n--- stderr (last lines) ---\n" + m.stderr_tail;
  std::string shown = m.error;  // the trainer's error may end in the stderr lines' newline
  while (!shown.empty() && std::isspace(static_cast<unsigned char>(shown.back()))) shown.pop_back();
  return fail_attempt(w, *t, t->attempt, error, shown, now);
}

// `attempt` of the worker's trial `t` fails with `error` (recorded) and `shown` (logged); the
// worker is idle again.
Status Scheduler::fail_attempt(Worker& w, Trial& t, int64_t attempt, const std::string& error, const std::string& shown,
                               Clock::time_point now) {
  HPCTUNE_ASSIGN(bool applied, store_.finish_trial(t.id, attempt, TrialState::kFailed, metrics_json(t.last_metrics),
                                                   std::nullopt, t.last_step, error, wall(now)));
  if (applied) {
    ++failed_;
    tell_searcher(t, search::Outcome::kFailed, {}, t.last_step);
    log("trial " + std::to_string(t.id) + " failed: " + shown);
    note_failure(t.id, shown);
    HPCTUNE_TRY(after_finish(now));
  }
  trials_.erase(t.id);
  w.trial_id = 0;
  mark_idle(w);
  return dispatch(now);
}

// Asks each stage in turn (in their order) until `n` trials are queued or none has more.
Status Scheduler::ask_more(std::size_t n, Clock::time_point now) {
  for (std::size_t k = 0; k < stages_.size() && n > 0 && !fatal_; ++k) {
    const std::size_t before = queue_.size();
    HPCTUNE_TRY(ask_stage(stages_[k], k, n, now));
    n -= std::min(n, queue_.size() - before);
  }
  return {};
}

Status Scheduler::ask_stage(Stage& stage, std::size_t stage_index, std::size_t n, Clock::time_point now) {
  const int64_t room = stage.max_trials - stage.created;
  if (room <= 0 || stage.exhausted || !stage.active || stage.source == nullptr) return {};
  n = std::min<std::size_t>(n, static_cast<std::size_t>(room));
  TrialSource& source = *stage.source;
  auto asked = source.ask(n);
  if (!asked.ok()) {
    // The algorithm failed: no more trials. The error is logged and recorded now, and ends the
    // campaign once this turn is committed (Master), so nothing received in the turn is lost.
    // A run-time failure whatever the algorithm called it (exit 1, not a config error).
    Error e(Errc::kFailed, "the " + source.kind() + " stage failed: " + asked.error().to_string());
    log(e.message());
    HPCTUNE_TRY(store_.add_event(opt_.campaign_id, "source_failed", 0, 0, -1,
                                 {{"stage", stage.id}, {"error", e.to_string()}}, wall(now)));
    stage.exhausted = true;
    if (!fatal_) fatal_ = std::move(e);
    return {};
  }
  std::vector<search::Suggestion> suggestions = std::move(asked).value();
  if (suggestions.empty() && source.exhausted()) stage.exhausted = true;
  const double tw = wall(now);
  bool new_generation = false;
  for (auto& s : suggestions) {
    store::TrialRow row;
    row.campaign_id = opt_.campaign_id;
    row.stage_id = stage.id;
    row.seq = s.seq;
    row.params = s.params;
    row.meta = s.meta;
    row.state = TrialState::kQueued;
    row.attempt = 1;
    row.created_at = tw;
    if (s.meta.contains("generation") && s.meta["generation"].is_number_integer()) {
      row.generation = s.meta["generation"].get<int64_t>();
      if (row.generation > max_generation_) {
        // The first member of a newly bred generation: the one before it is complete.
        new_generation = max_generation_ >= 0;
        max_generation_ = row.generation;
      }
    }
    const nlohmann::json lineage = s.meta.value("lineage", nlohmann::json::array());
    if (lineage.is_array() && !lineage.empty() && lineage[0].is_object() && lineage[0].value("trial", 0) > 0) {
      row.parent_trial_id = lineage[0]["trial"].get<int64_t>();
    }
    HPCTUNE_ASSIGN(int64_t id, store_.insert_trial(row));
    stage.seq_to_id[s.seq] = id;
    if (lineage.is_array()) {
      for (const auto& l : lineage) {
        if (!l.is_object() || !l.contains("trial") || !l["trial"].is_number_integer()) continue;
        HPCTUNE_TRY(store_.add_lineage(id, l["trial"].get<int64_t>(), l.value("relation", std::string("parent"))));
      }
    }
    if (s.meta.contains("parents") && s.meta["parents"].is_array()) {
      // Parents are given as seq numbers: lineage links them by trial id.
      for (const auto& p : s.meta["parents"]) {
        if (!p.is_number_integer()) continue;
        auto parent = stage.seq_to_id.find(p.get<int64_t>());
        if (parent != stage.seq_to_id.end()) HPCTUNE_TRY(store_.add_lineage(id, parent->second, "parent"));
      }
    }
    if (failpoint_) failpoint_("after-trial-insert");
    Trial t;
    t.id = id;
    t.seq = s.seq;
    t.stage = stage_index;
    t.seed = meta_seed(s.meta);
    t.params = std::move(s.params);
    trials_[id] = std::move(t);
    queue_.push_back(id);
    ++created_;
    ++stage.created;
  }
  if (new_generation && opt_.search_state_every > 0) return save_search_state(now);
  return {};
}

// Every trial so far failed: the trainer or the config is broken, and running the whole budget
// would only repeat the failure. A trial whose training diverged (its objective NaN or infinite) ran
// and reported: its parameters failed, not the trainer (a learning rate searched over 1e-4..1e5,
// diverging above 0.05, fails 70% of the space, and 2 campaigns in 12 stopped after their first 5
// trials), so it counts a quarter: 20 of them alone stop it, as a program that reports NaN whatever
// its parameters should be.
void Scheduler::note_failure(int64_t trial_id, const std::string& reason) {
  constexpr int64_t kDivergedPerFailure = 4;
  const int64_t weight = kDivergedPerFailure * (failed_ - diverged_) + diverged_;
  if (opt_.max_failures <= 0 || !gave_up_.empty() || done_ + pruned_ > 0 || weight < kDivergedPerFailure * opt_.max_failures)
    return;
  gave_up_ = std::to_string(failed_) + " trials failed before any succeeded" +
             (diverged_ > 0 ? " (" + std::to_string(diverged_) + " of them diverged, each counted a quarter)" : "") +
             " (search.max_failures = " + std::to_string(opt_.max_failures) + ")";
  log("stopping: " + gave_up_ + "; no new trials are started (the last failure, trial " + std::to_string(trial_id) +
      ": " + reason.substr(0, reason.find('\n')) + ")");
}

void Scheduler::mark_idle(Worker& w) {
  w.idle = true;
  idle_.emplace(w.group, w.peer);
}

bool Scheduler::stage_busy(std::size_t stage) const {
  for (const auto& [id, t] : trials_) {
    if (t.stage != stage) continue;
    if (std::find(held_.begin(), held_.end(), id) == held_.end()) return true;
  }
  return false;
}

void Scheduler::take_resumptions(std::size_t n) {
  while (queue_.size() < n && !held_.empty()) {
    bool taken = false;
    for (std::size_t k = 0; k < stages_.size() && !taken; ++k) {
      Stage& st = stages_[k];
      if (st.source == nullptr || st.closed || !st.active) continue;
      std::vector<int64_t> seqs;
      for (int64_t id : held_) {
        const Trial& t = trials_.at(id);
        if (t.stage == k) seqs.push_back(t.seq);
      }
      if (seqs.empty()) continue;
      const std::optional<int64_t> seq = st.source->resume_next(seqs);
      if (!seq) continue;
      auto it = std::find_if(held_.begin(), held_.end(), [&](int64_t id) {
        const Trial& t = trials_.at(id);
        return t.stage == k && t.seq == *seq;
      });
      if (it == held_.end()) continue;  // a seq it was not offered: ignored
      queue_.push_back(*it);
      held_.erase(it);
      taken = true;
    }
    if (!taken) return;
  }
}

Status Scheduler::settle_held(Clock::time_point now) {
  std::vector<int64_t> ending;
  for (int64_t id : held_) {
    const Trial& t = trials_.at(id);
    const Stage& st = stages_[t.stage];
    const bool makes_more = !st.exhausted && st.created < st.max_trials && gave_up_.empty() && !out_of_time(now);
    if (!makes_more && !stage_busy(t.stage)) ending.push_back(id);
  }
  if (ending.empty()) return {};
  const double tw = wall(now);
  for (int64_t id : ending) {
    Trial& t = trials_.at(id);
    if (t.last_metrics.empty()) {
      // Restored after a restart: its last report is in the store.
      HPCTUNE_ASSIGN(auto rows, store_.metrics(id));
      std::pair<int64_t, int64_t> latest{0, 0};  // (attempt, step)
      for (const auto& r : rows) latest = std::max(latest, {r.attempt, r.step});
      t.last_step = latest.second;
      for (const auto& r : rows)
        if (std::pair{r.attempt, r.step} == latest) t.last_metrics[r.name] = r.value;
    }
    const auto objective = objective_of(t.last_metrics);
    HPCTUNE_ASSIGN(bool applied, store_.finish_trial(t.id, t.attempt, TrialState::kPruned, metrics_json(t.last_metrics),
                                                     objective, t.last_step, "", tw));
    std::erase(held_, id);
    if (applied) {
      HPCTUNE_TRY(store_.add_event(opt_.campaign_id, "held_trial_ended", t.id, t.attempt, -1,
                                   {{"step", t.last_step}, {"reason", "its stage resumes no held trial and makes no new one"}},
                                   tw));
      log("trial " + std::to_string(t.id) + " ends pruned at step " + std::to_string(t.last_step) +
          ": paused, and its stage will not resume it");
      ++pruned_;
      tell_searcher(t, search::Outcome::kPruned, t.last_metrics, t.last_step);
      HPCTUNE_TRY(after_finish(now));
    }
    trials_.erase(id);
  }
  return {};
}

Status Scheduler::dispatch(Clock::time_point now) {
  if (interrupted_ || dispatch_held_ || out_of_time(now) || !gave_up_.empty() || fatal_) return {};
  // The idle workers, in the order of their groups (idle_ is exact: counted, not scanned).
  const std::size_t idle = idle_.size();
  if (idle == 0) return {};
  // Retries first (the queue), then held trials their sources resume, then new trials.
  if (queue_.size() < idle) take_resumptions(idle);
  if (queue_.size() < idle) HPCTUNE_TRY(ask_more(idle - queue_.size(), now));
  if (queue_.size() < idle && !held_.empty()) {
    // A free group, and nothing to run: held trials no source will resume end now.
    HPCTUNE_TRY(settle_held(now));
    if (fatal_) return {};
  }
  const double tw = wall(now);
  std::map<int64_t, int64_t> reserved;  // packed dispatch: processes left to drain for a cohort
  while (!idle_.empty() && !queue_.empty()) {
    Worker* w = nullptr;
    int64_t id = 0;
    if (opt_.process_groups) {
      auto next = next_packed_assignment(reserved);
      if (!next) break;
      std::tie(w, id) = *next;
    } else {
      w = &workers_.at(idle_.begin()->second);
      id = queue_.front();
      queue_.pop_front();
    }
    Trial& t = trials_.at(id);
    protocol::Assign a;
    a.trial_id = t.id;
    a.attempt = t.attempt;
    // The first stage's seeds are the campaign's as before stages; later stages draw apart.
    if (t.seed) {
      a.seed = *t.seed;
    } else {
      a.seed = t.stage == 0 ? derive_seed(opt_.seed, static_cast<uint64_t>(t.seq))
                            : derive_seed(derive_seed(opt_.seed, 0x5747u + t.stage), static_cast<uint64_t>(t.seq));
    }
    a.params = t.params;
    if (stages_[t.stage].source != nullptr) stages_[t.stage].source->prepare_dispatch(t.seq, a.params);
    a.trainer = stages_[t.stage].trainer.is_object() ? stages_[t.stage].trainer : opt_.trainer;
    a.trial_dir = trial_dir(t.id);
    a.resume_from = t.resume_from;
    auto sent = transport_.send(w->peer, protocol::encode(a));
    if (!sent.ok()) {
      ++counters_.send_failures;
      queue_.push_front(id);
      HPCTUNE_TRY(lose_worker(w->peer, "unreachable: " + sent.error().message(), now));
      return dispatch(now);
    }
    // Any frame tells the worker the master is alive (it reads none of them as more): no heartbeat
    // is due for another interval. With 1 s trials and a 1 s heartbeat that halves what the master
    // sends to 2048 groups (bench/scale).
    w->last_heartbeat_sent = now;
    t.state = TrialState::kAssigned;
    t.peer = w->peer;
    t.stop_sent = false;
    t.first_report_step = -1;
    t.judged_from = -1;
    t.resumed_at = std::exchange(t.paused_at, 0);
    t.last_step = 0;
    t.last_metrics.clear();
    t.dispatched_w = wall(now);
    t.reports = 0;
    w->trial_id = id;
    w->idle = false;
    idle_.erase({w->group, w->peer});
    w->assigned_at = now;
    w->acknowledged = false;
    // The devices the launcher gave the group (local), else those its worker was given (a SLURM step's).
    std::string devices = opt_.group_devices ? format_device_list(opt_.group_devices(w->group)) : "";
    if (devices.empty()) devices = w->gpus;
    HPCTUNE_TRY(store_.mark_assigned(t.id, t.attempt, w->group, w->incarnation, tw, devices));
  }
  return {};
}

std::vector<int64_t> Scheduler::process_groups(int64_t group) const {
  return opt_.process_groups ? opt_.process_groups(group) : std::vector<int64_t>{group};
}

std::vector<int64_t> Scheduler::process_trials(int64_t group) const {
  std::vector<int64_t> ids;
  for (int64_t g : process_groups(group)) {
    auto peer = group_peer_.find(g);
    if (peer == group_peer_.end()) continue;
    auto w = workers_.find(peer->second);
    if (w != workers_.end() && w->second.trial_id != 0) ids.push_back(w->second.trial_id);
  }
  return ids;
}

Scheduler::ProcessLoad Scheduler::process_load(int64_t group) const {
  ProcessLoad load{group, 0, 0};
  for (int64_t g : process_groups(group)) load.first_group = std::min(load.first_group, g);
  for (int64_t id : process_trials(group)) {
    ++load.busy;
    if (auto t = trials_.find(id); t != trials_.end()) load.cohort = t->second.cohort;
  }
  return load;
}

std::optional<std::pair<Scheduler::Worker*, int64_t>> Scheduler::next_packed_assignment(
    std::map<int64_t, int64_t>& reserved) {
  for (auto q = queue_.begin(); q != queue_.end(); ++q) {
    const int64_t cohort = trials_.at(*q).cohort;
    // The first idle worker whose process is empty or runs this cohort, and is not left to drain
    // for another; for a cohort trial that finds none, the process with the fewest trials drains.
    std::optional<std::pair<int64_t, protocol::PeerId>> fit;
    std::optional<ProcessLoad> lightest;
    for (const auto& slot : idle_) {
      const ProcessLoad load = process_load(slot.first);
      auto r = reserved.find(load.first_group);
      if (r != reserved.end() && r->second != cohort) continue;
      if (load.busy == 0 || load.cohort == cohort) {
        fit = slot;
        break;
      }
      if (!lightest || load.busy < lightest->busy) lightest = load;
    }
    if (fit) {
      const int64_t id = *q;
      queue_.erase(q);
      Worker* w = &workers_.at(fit->second);
      return std::make_pair(w, id);
    }
    if (cohort != 0 && lightest) reserved.emplace(lightest->first_group, cohort);
  }
  return std::nullopt;
}

Status Scheduler::lose_process(int64_t group, const std::string& why, Clock::time_point now) {
  // The halves are recorded: a master stopped and resumed keeps them apart (restore_cohorts).
  if (const auto halves = note_process_loss(group); !halves.empty()) {
    HPCTUNE_TRY(store_.add_event(opt_.campaign_id, "trials_split", 0, 0, group, {{"reason", why}, {"halves", halves}},
                                 wall(now)));
  }
  // Every group of it at once, before any dispatch could give a dying group a trial.
  for (int64_t g : process_groups(group)) {
    auto peer = group_peer_.find(g);
    if (peer == group_peer_.end()) continue;
    HPCTUNE_TRY(lose_worker(peer->second, g == group ? why : "its process lost with group " + std::to_string(group) + " (" + why + ")", now));
  }
  return {};
}

std::vector<std::vector<int64_t>> Scheduler::note_process_loss(int64_t group) {
  std::vector<int64_t> lost;  // its trials not yet noted lost with this process
  for (int64_t id : process_trials(group)) {
    if (uncharged_losses_.count(id) == 0 && trials_.count(id) > 0) lost.push_back(id);
  }
  if (lost.size() < 2) return {};  // alone in its process: its loss is charged to it
  std::sort(lost.begin(), lost.end());
  const std::size_t half = (lost.size() + 1) / 2;
  const int64_t first = ++last_cohort_, second = ++last_cohort_;
  std::vector<std::vector<int64_t>> halves(2);
  std::string ids;
  for (std::size_t i = 0; i < lost.size(); ++i) {
    trials_.at(lost[i]).cohort = i < half ? first : second;
    halves[i < half ? 0 : 1].push_back(lost[i]);
    uncharged_losses_.insert(lost[i]);
    ids += (i == 0 ? "" : ", ") + std::to_string(lost[i]);
  }
  log("the process of group " + std::to_string(group) + " is lost with " + std::to_string(lost.size()) +
      " trials (" + ids + "): no attempt is charged; they run again in two halves, each without other trials "
      "beside it, until a trial lost alone in its process is found");
  return halves;
}

Status Scheduler::restore_cohorts() {
  HPCTUNE_ASSIGN(auto events, store_.events_of_kind(opt_.campaign_id, "trials_split", 0));
  int64_t skipped = 0;
  for (const store::EventRow& e : events) {
    // The database's detail is not trusted: anything but arrays of trial ids is skipped (counted).
    const nlohmann::json* halves = e.detail.is_object() && e.detail.contains("halves") ? &e.detail.at("halves") : nullptr;
    if (halves == nullptr || !halves->is_array()) {
      ++skipped;
      continue;
    }
    for (const nlohmann::json& half : *halves) {
      if (!half.is_array()) {
        ++skipped;
        continue;
      }
      const int64_t cohort = ++last_cohort_;
      for (const nlohmann::json& id : half) {
        if (!id.is_number_integer()) continue;
        if (auto t = trials_.find(id.get<int64_t>()); t != trials_.end()) t->second.cohort = cohort;
      }
    }
  }
  if (skipped > 0) {
    log("warning: " + std::to_string(skipped) + " trials_split events of the database name no halves of trial ids: "
        "ignored (their trials may share a process again)");
  }
  return {};
}

Status Scheduler::lose_worker(const protocol::PeerId& peer, const std::string& why, Clock::time_point now) {
  auto it = workers_.find(peer);
  if (it == workers_.end()) return {};
  Worker w = it->second;
  workers_.erase(it);
  idle_.erase({w.group, peer});
  said_silent_.erase(peer);
  if (w.group >= 0) lost_groups_.push_back(w.group);
  lost_peers_[peer] = true;
  if (auto g = group_peer_.find(w.group); g != group_peer_.end() && g->second == peer) group_peer_.erase(g);
  const double tw = wall(now);
  log("group " + std::to_string(w.group) + " lost: " + why);
  HPCTUNE_TRY(store_.add_event(opt_.campaign_id, "group_lost", w.trial_id, 0, w.group, {{"reason", why}}, tw));
  HPCTUNE_TRY(store_.upsert_group(opt_.campaign_id, w.group, opt_.backend, 0, 0, "lost", w.incarnation, 0, tw));
  return lose_attempt(w, why, now);
}

Status Scheduler::lose_attempt(Worker& w, const std::string& why, Clock::time_point now) {
  const double tw = wall(now);
  const int64_t trial_id = w.trial_id;
  w.trial_id = 0;
  if (trial_id == 0) return {};
  auto t = trials_.find(trial_id);
  if (t == trials_.end()) return {};
  ++counters_.lost_attempts;
  // What the lost attempt left running on this machine (its worker and supervisor may have died
  // together) is killed now; not waited for here: the next attempt's fence waits (attempt_fence.h).
  if (const std::string dir = trial_dir(trial_id); !dir.empty()) {
    (void)launch::fence_attempt(dir + "/" + launch::kAttemptFenceFile, std::chrono::milliseconds(0));
  }
  // Lost with other trials of its process (note_process_loss): not its fault alone, not charged.
  const bool charged = uncharged_losses_.erase(trial_id) == 0;
  HPCTUNE_ASSIGN(TrialState state, store_.requeue_trial(t->second.id, t->second.attempt, "lost", why,
                                                        opt_.max_attempts, tw, charged));
  source_of(t->second).on_attempt_end(t->second.seq);
  t->second.pause.reset();
  if (state == TrialState::kFailed) {
    ++failed_;
    tell_searcher(t->second, search::Outcome::kFailed, {}, t->second.last_step);
    log("trial " + std::to_string(t->second.id) + " failed: " + std::to_string(opt_.max_attempts) +
        " attempts lost");
    note_failure(t->second.id, std::to_string(opt_.max_attempts) + " attempts lost (" + why + ")");
    trials_.erase(t);
    return after_finish(now);
  }
  t->second.attempt += 1;
  t->second.rerun = true;
  t->second.state = TrialState::kQueued;
  t->second.peer.clear();
  queue_.push_front(t->second.id);
  log("trial " + std::to_string(t->second.id) + " queued again as attempt " + std::to_string(t->second.attempt));
  return {};
}

Status Scheduler::on_group_exit(int64_t group, const std::string& why, Clock::time_point now) {
  last_now_ = std::max(last_now_, now);
  HPCTUNE_TRY(lose_process(group, why, now));
  return dispatch(now);
}

Status Scheduler::tick(Clock::time_point now) {
  last_now_ = std::max(last_now_, now);
  flush_noise(now, false);
  std::vector<protocol::PeerId> silent;
  if (opt_.vouched_liveness) {
    // Only the groups the driver said silent, by their last frame or the silence's start.
    for (const auto& [peer, since] : said_silent_) {
      auto w = workers_.find(peer);
      if (w != workers_.end() && now - std::max(w->second.last_seen, since) > opt_.heartbeat_timeout) silent.push_back(peer);
    }
  } else {
    for (auto& [peer, w] : workers_) {
      if (now - w.last_seen > opt_.heartbeat_timeout) {
        silent.push_back(peer);
        continue;
      }
      if (now - w.last_heartbeat_sent >= opt_.heartbeat_interval) {
        w.last_heartbeat_sent = now;
        send(w, protocol::Heartbeat{});
      }
    }
  }
  // Trials paused at an earlier turn (committed since) are queued again, ahead of new ones, or held
  // for their source to resume (resume_next).
  for (auto it = paused_.rbegin(); it != paused_.rend(); ++it) {
    auto t = trials_.find(*it);
    if (t == trials_.end() || t->second.state != TrialState::kPaused) continue;
    if (source_of(t->second).holds_paused()) continue;
    queue_.push_front(*it);
  }
  for (int64_t id : paused_) {
    auto t = trials_.find(id);
    if (t != trials_.end() && t->second.state == TrialState::kPaused && source_of(t->second).holds_paused())
      held_.push_back(id);
  }
  paused_.clear();
  for (const auto& peer : silent) {
    auto w = workers_.find(peer);
    if (w == workers_.end()) continue;  // lost with its process already (lose_process)
    const auto silent_ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - w->second.last_seen);
    const std::string why = "silent for " + std::to_string(silent_ms.count()) + " ms";
    const int64_t group = w->second.group;
    if (group >= 0) silent_groups_.push_back(group);
    // The launcher kills a silent group's whole process (Master::follow_groups).
    HPCTUNE_TRY(group >= 0 ? lose_process(group, why, now) : lose_worker(peer, why, now));
  }
  return dispatch(now);
}

std::optional<Clock::time_point> Scheduler::next_deadline() const {
  std::optional<Clock::time_point> next;
  auto take = [&](Clock::time_point t) { next = next ? std::min(*next, t) : t; };
  if (opt_.max_time_s > 0 && !out_of_time(last_now_))
    take(start_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opt_.max_time_s)));
  for (const auto& [peer, since] : said_silent_) {  // lost once silent for longer than the timeout
    auto w = workers_.find(peer);
    if (w != workers_.end()) take(std::max(w->second.last_seen, since) + opt_.heartbeat_timeout + std::chrono::milliseconds(1));
  }
  return next;
}

void Scheduler::note_silent(int64_t group, Clock::time_point since) {
  auto g = group_peer_.find(group);
  if (g != group_peer_.end()) said_silent_[g->second] = since;
}

Status Scheduler::interrupt(Clock::time_point now) {
  last_now_ = std::max(last_now_, now);
  if (interrupted_) return {};
  interrupted_ = true;
  const double tw = wall(now);
  for (auto& [peer, w] : workers_) {
    if (w.trial_id == 0) continue;
    auto t = trials_.find(w.trial_id);
    if (t == trials_.end()) continue;
    send(w, protocol::Stop{t->second.id, t->second.attempt, protocol::StopReason::kInterrupted});
    HPCTUNE_TRY(store_.mark_interrupted(t->second.id, t->second.attempt, tw));
    ++interrupted_count_;
    trials_.erase(t);
    w.trial_id = 0;
  }
  return store_.add_event(opt_.campaign_id, "interrupted", 0, 0, -1, nlohmann::json::object(), tw);
}

void Scheduler::shutdown_workers(const std::string& reason) {
  flush_noise(last_now_, true);  // the last summaries
  for (auto& [peer, w] : workers_) send(w, protocol::Shutdown{reason});
}

void Scheduler::send(Worker& w, const protocol::Message& m) {
  auto sent = transport_.send(w.peer, protocol::encode(m));
  if (!sent.ok()) {
    ++counters_.send_failures;
    // The heartbeat timeout or the launcher will declare the group lost.
  }
}

bool Scheduler::finished() const {
  if (interrupted_) return true;
  const bool in_flight = trials_.size() > queue_.size() + paused_.size() + held_.size();
  // Queued trials are left for a resume.
  if (out_of_time(last_now_) || !gave_up_.empty()) return !in_flight;
  if (!trials_.empty()) return false;
  for (const Stage& st : stages_) {
    if (st.closed) continue;
    if (!st.active || (!st.exhausted && st.created < st.max_trials)) return false;
  }
  return true;
}

Progress Scheduler::progress() const {
  Progress p;
  p.done = done_;
  p.pruned = pruned_;
  p.failed = failed_;
  p.interrupted = interrupted_count_;
  p.queued = static_cast<int64_t>(queue_.size());
  p.paused = static_cast<int64_t>(paused_.size() + held_.size());
  p.running = static_cast<int64_t>(trials_.size()) - p.queued - p.paused;
  p.created = created_;
  p.max_trials = 0;
  for (const Stage& st : stages_) p.max_trials += st.max_trials;
  p.workers = static_cast<int64_t>(workers_.size());
  p.best = best_;
  p.best_trial = best_trial_;
  return p;
}

// --- search state, Pareto front ------------------------------------------------------------

void Scheduler::note_done_values(int64_t trial_id, const nlohmann::json& metrics) {
  if (opt_.objectives.size() < 2 || !metrics.is_object()) return;
  std::vector<double> losses;
  for (const auto& o : opt_.objectives) {
    auto it = metrics.find(o.metric);
    if (it == metrics.end() || !it->is_number() || !std::isfinite(it->get<double>())) return;
    losses.push_back(o.maximize ? -it->get<double>() : it->get<double>());
  }
  front_candidates_.emplace_back(trial_id, std::move(losses));
}

std::vector<int64_t> Scheduler::pareto_front_trials() const {
  std::vector<std::vector<double>> losses;
  losses.reserve(front_candidates_.size());
  for (const auto& [id, l] : front_candidates_) losses.push_back(l);
  std::vector<int64_t> ids;
  for (std::size_t i : search::pareto_front(losses)) ids.push_back(front_candidates_[i].first);
  std::sort(ids.begin(), ids.end());
  return ids;
}

Status Scheduler::save_search_state(Clock::time_point) {
  // One stage: its source's state, as before stages; several: {"stages": {"<id>": state}}.
  nlohmann::json state;
  if (stages_.size() == 1) {
    state = stages_[0].source ? stages_[0].source->state() : nlohmann::json::object();
  } else {
    state = {{"stages", nlohmann::json::object()}};
    for (const Stage& st : stages_) {
      if (st.source) state["stages"][std::to_string(st.id)] = st.source->state();
    }
  }
  if (!state.is_object()) state = nlohmann::json{{"searcher", state}};
  if (opt_.objectives.size() > 1) state["pareto_front_trials"] = pareto_front_trials();
  state["finished_trials"] = done_ + pruned_ + failed_;
  since_state_save_ = 0;
  return store_.set_search_state(opt_.campaign_id, state);
}

Status Scheduler::after_finish(Clock::time_point now) {
  if (opt_.search_state_every <= 0) return {};
  ++since_state_save_;
  // Every N finished trials, N growing with the campaign (a tenth of it), so that saving a state
  // whose size grows with the trials costs O(n) over the whole campaign, not O(n^2).
  const int64_t every = std::max(opt_.search_state_every, (done_ + pruned_ + failed_) / 10);
  if (since_state_save_ < every) return {};
  return save_search_state(now);
}

// --- early stopping after a restart ---------------------------------------------------------

// Replays the recorded reports of the finished trials into the fresh stopper, in the order they
// were recorded, with on_finish() at each trial's finish time, so that its rungs (and the median
// rule's finished curves) are as the interrupted master left them. Reports of trials that are
// queued again are not replayed: their new attempt reports from step 1 again, as a first attempt
// would. As on the live path, a trial's reports after a stop decision are not shown to the stopper.
// Not replayed exactly: the on_finish() that an earlier lost attempt of a finished trial caused
// (it matters to the median rule only, and only between the loss and the trial's end).
Status Scheduler::replay_reports(const std::map<int64_t, FinalTrial>& final_trials,
                                 const std::map<int64_t, FinalTrial>& unfinished) {
  auto replays = [this](std::size_t k) { return stages_[k].source && stages_[k].source->replays_reports(); };
  // Without early stopping there is nothing to rebuild (and nothing to tell the user).
  bool any = false;
  for (const Stage& st : stages_) any = any || (st.source && st.source->replays_reports());
  if (opt_.objectives.empty() || (final_trials.empty() && unfinished.empty()) || !any) return {};
  HPCTUNE_ASSIGN(auto reports, store_.campaign_metrics(opt_.campaign_id, opt_.objectives[0].metric));
  struct Event {
    double t;
    int kind;  // 0 report, 1 finish: a report and the finish at the same time come in that order
    int64_t trial_id, seq, attempt, step;
    double value;
    std::size_t stage;
  };
  std::vector<Event> events;
  events.reserve(reports.size() + final_trials.size());
  for (const auto& r : reports) {
    const FinalTrial* info = nullptr;
    if (auto it = final_trials.find(r.trial_id); it != final_trials.end()) info = &it->second;
    else if (auto u = unfinished.find(r.trial_id); u != unfinished.end()) info = &u->second;
    if (info == nullptr || !std::isfinite(r.value)) continue;
    if (!replays(info->stage)) continue;
    events.push_back({r.t, 0, r.trial_id, info->seq, r.attempt, r.step, r.value, info->stage});
  }
  for (const auto& [id, info] : final_trials) {
    if (replays(info.stage)) {
      events.push_back({info.finished_at, 1, id, info.seq, 0, 0, 0, info.stage});
    }
  }
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    if (a.t != b.t) return a.t < b.t;
    if (a.trial_id != b.trial_id) return a.trial_id < b.trial_id;
    return a.kind < b.kind;
  });
  std::set<std::pair<int64_t, int64_t>> stopped;  // (trial, attempt) told to stop
  int64_t replayed = 0, stops = 0;
  for (const auto& e : events) {
    if (e.kind == 1) {
      stages_[e.stage].source->on_attempt_end(e.seq);
      continue;
    }
    if (stopped.count({e.trial_id, e.attempt})) continue;
    ++replayed;
    if (stages_[e.stage].source->replay_report(e.seq, e.step, e.value)) {
      stopped.insert({e.trial_id, e.attempt});
      ++stops;
    }
  }
  if (replayed == 0) return {};
  log("early stopping: replayed " + std::to_string(replayed) + " recorded reports of " +
      std::to_string(final_trials.size()) + " finished trials" +
      (unfinished.empty() ? std::string() : " and " + std::to_string(unfinished.size()) + " waiting ones"));
  return store_.add_event(opt_.campaign_id, "stopper_replayed", 0, 0, -1,
                          {{"reports", replayed}, {"trials", final_trials.size()}, {"stop_decisions", stops}},
                          wall(start_));
}

// --- warm start -------------------------------------------------------------------------------

int64_t WarmStart::skipped_total() const {
  int64_t n = 0;
  for (const auto& [why, k] : skipped) n += k;
  return n;
}

nlohmann::json WarmStart::summary() const {
  nlohmann::json by_reason = nlohmann::json::object();
  for (const auto& [why, k] : skipped) by_reason[why] = k;
  return {{"path", path},
          {"read", read},
          {"loaded", observations.size()},
          {"skipped", skipped_total()},
          {"skipped_by_reason", by_reason}};
}

std::optional<search::Params> project_params(const search::Space& space, const search::Params& params,
                                             std::string* why) {
  auto refuse = [&](std::string reason) -> std::optional<search::Params> {
    if (why) *why = std::move(reason);
    return std::nullopt;
  };
  if (!params.is_object()) return refuse("no_overlap");
  search::Params out = nlohmann::json::object();
  int64_t searched = 0;
  for (const auto& spec : space.params()) {  // parents first: a condition sees its parent's projected value
    if (!search::Space::active(spec, out)) continue;
    auto it = params.find(spec.name);
    if (it == params.end()) continue;
    if (!search::Space::check_value(spec, *it).ok()) return refuse("out_of_space");
    out[spec.name] = *it;
    if (spec.type != search::ParamType::kFixed) ++searched;
  }
  if (searched == 0) return refuse("no_overlap");
  return out;
}

Result<WarmStart> load_warm_start(const std::string& path, const search::Space& space,
                                  const std::vector<search::Objective>& objectives, const std::string& own_db) {
  auto config_error = [&](const std::string& what) { return err(Errc::kConfig, "search.warm_start: " + path + ": " + what); };
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) return config_error("no such file");
  if (!own_db.empty() && fs::exists(own_db, ec) && fs::equivalent(path, own_db, ec)) {
    return config_error("is this campaign's own database; name an earlier campaign's store");
  }
  auto opened = store::Store::open_readonly(path);
  if (!opened.ok()) return config_error("cannot be read as an hpctune store: " + opened.error().message());
  std::unique_ptr<store::Store> other = std::move(opened).value();
  auto campaign = other->load_campaign();
  if (!campaign.ok()) return config_error("cannot read its campaign: " + campaign.error().message());
  if (!*campaign) return config_error("holds no campaign");
  auto rows = other->trials((*campaign)->id);
  if (!rows.ok()) return config_error("cannot read its trials: " + rows.error().message());

  WarmStart ws;
  ws.path = path;
  ws.read = static_cast<int64_t>(rows->size());
  for (const auto& row : *rows) {
    if (row.state != TrialState::kDone) {
      ++ws.skipped[row.state == TrialState::kPruned ? "pruned" : row.state == TrialState::kFailed ? "failed" : "unfinished"];
      continue;
    }
    search::Observation obs;
    obs.seq = row.seq;
    obs.step = row.step;
    obs.outcome = search::Outcome::kCompleted;
    for (const auto& o : objectives) {
      auto it = row.metrics.is_object() ? row.metrics.find(o.metric) : row.metrics.end();
      if (it == row.metrics.end() || !it->is_number() || !std::isfinite(it->get<double>())) break;
      obs.values.push_back(it->get<double>());
    }
    if (obs.values.size() != objectives.size() || objectives.empty()) {
      ++ws.skipped["missing_objective"];
      continue;
    }
    std::string why;
    auto projected = project_params(space, row.params, &why);
    if (!projected) {
      ++ws.skipped[why];
      continue;
    }
    obs.params = std::move(*projected);
    ws.observations.push_back(std::move(obs));
  }
  if (auto s = other->close(); !s.ok()) return std::move(s).error().with_context("search.warm_start: " + path);
  return ws;
}

}  // namespace hpctune::scheduler
