#include "simulate/simulator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "common/clock.h"
#include "config/machine_file.h"
#include "protocol/transport.h"
#include "store/store.h"

namespace hpctune::simulate {
namespace {

using scheduler::CampaignInStore;
using scheduler::Clock;
using scheduler::WallClock;
using scheduler::Master;
using scheduler::MasterParts;
using scheduler::PreparedCampaign;
using scheduler::prepare_campaign;

using Seconds = std::chrono::duration<double>;

// Simulated seconds on the clock, saturated at +-kClockLimitSeconds (about 31.7 years, past the
// simulation's bound of max_simulated_seconds; the clock's nanoseconds end at 292 years): a cost
// beyond (a slowed step of years) ends the simulation at its bound instead of wrapping the clock
// round to the past, which made a campaign end "done" at second 1 with negative costs, or spin.
constexpr double kClockLimitSeconds = 1e9;
Clock::duration seconds(double s) {
  if (!(s < kClockLimitSeconds)) s = kClockLimitSeconds;  // NaN too
  if (s < -kClockLimitSeconds) s = -kClockLimitSeconds;
  return std::chrono::duration_cast<Clock::duration>(Seconds(s));
}

// Why a trial planned to run past the simulation's bound cannot run (its steps, setup and the
// machine's sharing at the least, 1): "" when it fits.
std::string beyond_bound(const SimulatedTrial& plan, const SimulateOptions& o) {
  const double step = o.step_seconds > 0 ? o.step_seconds : plan.seconds_per_step;
  const double steps = static_cast<double>(plan.reports.size());
  const double total = steps * step + (o.step_seconds > 0 ? 0 : plan.setup_seconds);
  if (total <= o.max_simulated_seconds) return "";
  char what[320];
  std::snprintf(what, sizeof what,
                "simulate: this trial would run for %.6g simulated seconds (%.0f steps of %.6g s, setup %.6g s), more than "
                "the simulation's bound of %.6g s (%.3g years); check the machine file's rates and the trainer's size",
                total, steps, step, o.step_seconds > 0 ? 0.0 : plan.setup_seconds, o.max_simulated_seconds,
                o.max_simulated_seconds / (365.0 * 86400));
  return what;
}

// One simulated trainer group: a worker's side of the protocol over the in-process hub.
class SimGroup {
 public:
  SimGroup(protocol::InProcHub& hub, int64_t group, const std::string& credential, uint64_t incarnation,
           const SimulateOptions& o, const double* slowdown, int64_t* in_flight, SimulationOutcome* out, Clock::time_point t0)
      : client_(hub.connect()),
        group_(group),
        o_(o),
        global_slowdown_(slowdown),
        slowdown_(*slowdown),
        in_flight_(in_flight),
        out_(out),
        t0_(t0) {
    protocol::Hello h;
    h.secret = credential;
    h.incarnation = incarnation;
    h.group = group;
    h.pid = 0;
    h.host = "simulated";
    sent_ = true;
    ++*in_flight_;
    error_ = client_->send(protocol::encode(h));
  }

  // Reads what the master sent and answers at `now`. True when it sent anything.
  Result<bool> receive(Clock::time_point now) {
    sent_ = false;
    while (!silent_) {
      HPCTUNE_ASSIGN(auto frame, client_->recv(std::chrono::milliseconds(0)));
      if (!frame) break;
      HPCTUNE_ASSIGN(protocol::Message msg, protocol::decode(*frame));
      if (std::holds_alternative<protocol::Welcome>(msg)) {
        send(protocol::Ready{});
      } else if (auto* a = std::get_if<protocol::Assign>(&msg)) {
        SimulatedTrial plan = o_.model(*a);
        if (plan.error.empty()) plan.error = beyond_bound(plan, o_);
        if (!plan.error.empty()) {
          send(protocol::Failed{a->trial_id, a->attempt, plan.error, ""});
          continue;
        }
        assign_ = *a;
        plan_ = std::move(plan);
        step_ = 0;
        // The pace of the present sharing (an idle group is not rebased when it changes).
        slowdown_ = *global_slowdown_;
        // Its setup first (none with a fixed step_seconds), then its steps; at the sharing of now
        // until the simulator rebases it (`share`) when the busy ranks change, this one included.
        const double setup = plan_.setup_seconds + (loaded_ ? 0 : o_.load_seconds);
        loaded_ = true;
        in_setup_ = o_.step_seconds <= 0 && setup > 0;
        begin_phase(now, in_setup_ ? setup : step_seconds());
        send(protocol::Report{a->trial_id, a->attempt, 0, {}});
        if (plan_.reports.empty()) finish(false);
      } else if (auto* st = std::get_if<protocol::Stop>(&msg)) {
        if (assign_ && st->trial_id == assign_->trial_id) finish(true);
      } else if (std::holds_alternative<protocol::Shutdown>(msg)) {
        closed_ = true;
        break;
      }
    }
    HPCTUNE_TRY(error_);
    return sent_;
  }

  // Sends what is due at `now`: the steps reached. True when it sent anything.
  Result<bool> emit(Clock::time_point now) {
    sent_ = false;
    if (silent_ || closed_) return false;
    while (assign_ && next_step_at() <= now) {
      const Clock::time_point at = next_step_at();
      if (in_setup_) {
        out_->setup_s += Seconds(at - phase_began_).count();
        in_setup_ = false;
        begin_phase(at, step_seconds());
        continue;
      }
      const protocol::Metrics& m = plan_.reports[static_cast<std::size_t>(step_)];
      ++step_;
      account(m, at);
      send(protocol::Report{assign_->trial_id, assign_->attempt, step_, m});
      if (step_ == static_cast<int64_t>(plan_.reports.size())) {
        finish(false);
      } else {
        begin_phase(at, step_seconds());
      }
    }
    HPCTUNE_TRY(error_);
    return sent_;
  }

  // When it next has a step to report (time_point::max() when never).
  Clock::time_point next_event() const {
    if (silent_ || closed_) return Clock::time_point::max();
    Clock::time_point t = Clock::time_point::max();
    if (assign_) t = next_step_at();
    return t;  // no heartbeats: the simulator vouches for its groups (see simulate_campaign)
  }

  void go_silent() { silent_ = true; }

  // The ranks it keeps busy: all of them while it runs a trial (a silent one too: it hangs), none
  // while it waits for one.
  int64_t busy_ranks() const { return assign_ ? o_.ranks_per_group : 0; }

  // From `now` on its ranks run `slowdown` times slower (processor sharing: what is left of the
  // running setup or step is what it had left at its pace so far).
  void share(Clock::time_point now, double slowdown) {
    if (assign_ && o_.step_seconds <= 0) {
      left_ = std::max(0.0, left_ - Seconds(now - phase_at_).count() / slowdown_);
      phase_at_ = now;
    }
    slowdown_ = slowdown;
  }

 private:
  // A step's seconds on ranks of their own.
  double step_seconds() const { return o_.step_seconds > 0 ? o_.step_seconds : plan_.seconds_per_step; }
  void begin_phase(Clock::time_point at, double dedicated_seconds) {
    phase_began_ = phase_at_ = at;
    left_ = dedicated_seconds;
  }
  // When the running phase ends at the present pace.
  Clock::time_point next_step_at() const {
    const double pace = o_.step_seconds > 0 ? 1 : slowdown_;
    return phase_at_ + seconds(left_ * pace);
  }
  // A step run at `at` (its end): its cost by part, the nodes it kept busy, the target.
  void account(const protocol::Metrics& m, Clock::time_point at) {
    const double s = Seconds(at - phase_began_).count();
    if (o_.step_seconds > 0) {
      out_->cost.compute_s += s;
    } else {
      // The parts in the proportions of the cost model, stretched to the step's shared time.
      const double stretch = plan_.seconds_per_step > 0 ? s / plan_.seconds_per_step : 1;
      out_->cost.compute_s += plan_.step_cost.compute_s * stretch;
      out_->cost.bubble_s += plan_.step_cost.bubble_s * stretch;
      out_->cost.allreduce_s += plan_.step_cost.allreduce_s * stretch;
      out_->cost.checkpoint_s += plan_.step_cost.checkpoint_s * stretch;
    }
    out_->busy_node_seconds += s * static_cast<double>(o_.ranks_per_group);
    if (o_.target && !out_->target_reached_s) {
      auto it = m.find(o_.target->metric);
      if (it != m.end() && (o_.target->maximize ? it->second >= o_.target->value : it->second <= o_.target->value)) {
        out_->target_reached_s = Seconds(at - t0_).count();
        out_->runs_to_target = out_->finished_trials + 1;
      }
    }
  }
  void send(const protocol::Message& m) {
    sent_ = true;
    ++*in_flight_;
    if (error_.ok()) error_ = client_->send(protocol::encode(m));
  }
  // The trial's end: a done with its last step's metrics (the plan's final ones when it ran to the end).
  void finish(bool stopped) {
    protocol::Done d;
    d.trial_id = assign_->trial_id;
    d.attempt = assign_->attempt;
    d.step = step_;
    d.stopped = stopped;
    if (!stopped) {
      d.metrics = plan_.final_metrics;
    } else if (step_ > 0) {
      d.metrics = plan_.reports[static_cast<std::size_t>(step_ - 1)];
    }
    ++out_->finished_trials;
    send(d);
    assign_.reset();
  }

  std::unique_ptr<protocol::ClientTransport> client_;
  int64_t group_;
  const SimulateOptions& o_;
  const double* global_slowdown_;  // the simulator's present sharing of the cores
  double slowdown_ = 1;            // the sharing of the machine's cores since phase_at_
  int64_t* in_flight_;  // frames sent to the master, not yet received by it (InFlightServer)
  SimulationOutcome* out_;
  Clock::time_point t0_;
  std::optional<protocol::Assign> assign_;
  SimulatedTrial plan_;
  int64_t step_ = 0;
  bool in_setup_ = false;            // the running phase is the trial's setup, else a step
  bool loaded_ = false;              // its first trial has begun (the data is read)
  Clock::time_point phase_began_{};  // when the running phase began
  Clock::time_point phase_at_{};     // when left_ was last brought up to date
  double left_ = 0;                  // its seconds left on ranks of their own
  bool silent_ = false, closed_ = false, sent_ = false;
  Status error_;
};

// The hub's server end, counting the frames the master takes: the master handles a bounded batch
// per step, so the simulator steps it again soon while frames wait, as a busy master would. It also
// notes which groups the master sent frames to (by the peer each group said hello from), so that
// only those read their connections in the turn.
class InFlightServer final : public protocol::ServerTransport {
 public:
  InFlightServer(std::unique_ptr<protocol::ServerTransport> inner, int64_t* in_flight, std::set<int64_t>* addressed)
      : inner_(std::move(inner)), in_flight_(in_flight), addressed_(addressed) {}
  int64_t sent = 0, received = 0;  // frames to the groups, from them
  std::string endpoint() const override { return inner_->endpoint(); }
  Status send(const protocol::PeerId& peer, std::string_view bytes) override {
    if (auto g = group_of_.find(peer); g != group_of_.end()) addressed_->insert(g->second);
    ++sent;
    return inner_->send(peer, bytes);
  }
  Result<std::optional<protocol::Envelope>> recv(std::chrono::milliseconds timeout) override {
    auto env = inner_->recv(timeout);
    if (env.ok() && env->has_value()) {
      --*in_flight_;
      ++received;
      // A group's first frame is its hello: the peer it speaks from from now on.
      if (!group_of_.contains((*env)->peer)) {
        auto msg = protocol::decode((*env)->bytes);
        if (msg.ok()) {
          if (auto* h = std::get_if<protocol::Hello>(&msg.value())) group_of_[(*env)->peer] = h->group;
        }
      }
    }
    return env;
  }

 private:
  std::unique_ptr<protocol::ServerTransport> inner_;
  int64_t* in_flight_;
  std::set<int64_t>* addressed_;
  std::map<protocol::PeerId, int64_t> group_of_;
};

// The simulated backend: a launch becomes a group that says hello `startup_seconds` later. It keeps
// the groups' events in time order (`timeline`: each running group's next step) and the groups
// that run a trial (`busy`), so that a turn touches only the groups with something to do.
class SimLauncher final : public launch::Launcher {
 public:
  explicit SimLauncher(const Clock::time_point* now, double startup) : now_(now), startup_(seconds(startup)) {}
  std::string name() const override { return "simulated"; }
  Status start(int64_t group, const std::string& credential) override {
    ++launches;
    pending[group] = {*now_ + startup_, credential};
    forget(group);
    alive[group] = true;
    return {};
  }
  launch::GroupState state(int64_t group) const override {
    auto it = alive.find(group);
    return it != alive.end() && it->second ? launch::GroupState::kStarting : launch::GroupState::kExited;
  }
  std::vector<launch::GroupExit> poll_exits() override { return std::exchange(exits_, {}); }
  void kill(int64_t group) override {
    if (!alive[group]) return;
    alive[group] = false;
    pending.erase(group);
    forget(group);
    exits_.push_back({group, "killed by signal 9 (Killed)", false, "(simulated)"});
  }
  void stop_all(std::chrono::milliseconds) override {
    for (auto& [g, a] : alive) a = false;
    pending.clear();
    running.clear();
    timeline.clear();
    next_at.clear();
    busy.clear();
  }

  // After group g acted or was rebased: its place in the timeline and among the busy.
  void update(int64_t g) {
    auto it = running.find(g);
    if (it == running.end()) return;
    const Clock::time_point t = it->second->next_event();
    auto at = next_at.find(g);
    if (at != next_at.end()) {
      if (at->second == t) {
        // unchanged
      } else {
        timeline.erase({at->second, g});
        if (t == Clock::time_point::max()) {
          next_at.erase(at);
        } else {
          at->second = t;
          timeline.insert({t, g});
        }
      }
    } else if (t != Clock::time_point::max()) {
      next_at[g] = t;
      timeline.insert({t, g});
    }
    if (it->second->busy_ranks() > 0) {
      busy.insert(g);
    } else {
      busy.erase(g);
    }
  }

  std::map<int64_t, std::pair<Clock::time_point, std::string>> pending;  // hello time, credential
  std::map<int64_t, std::unique_ptr<SimGroup>> running;
  std::map<int64_t, bool> alive;
  std::set<std::pair<Clock::time_point, int64_t>> timeline;  // (next step, group) of the running
  std::map<int64_t, Clock::time_point> next_at;              // each group's place in the timeline
  std::set<int64_t> busy;                                    // running a trial (busy_ranks() > 0)
  int64_t launches = 0;

 private:
  void forget(int64_t group) {
    running.erase(group);
    if (auto at = next_at.find(group); at != next_at.end()) {
      timeline.erase({at->second, group});
      next_at.erase(at);
    }
    busy.erase(group);
  }
  const Clock::time_point* now_;
  Clock::duration startup_;
  std::vector<launch::GroupExit> exits_;
};

}  // namespace

Result<SimulationOutcome> simulate_campaign(const SimulateOptions& options) {
  if (!options.model) return err(Errc::kInvalidArgument, "simulate: no trial model");
  if (!options.master.config) return err(Errc::kUsage, "simulate: a config is required");
  if (!(options.startup_seconds >= 0) || !(options.load_seconds >= 0) || !(options.message_seconds > 0)) {
    return err(Errc::kInvalidArgument, "simulate: startup_seconds and load_seconds must be >= 0 and message_seconds > 0");
  }
  const auto real_start = std::chrono::steady_clock::now();
  if (options.master.db_path.empty()) return err(Errc::kUsage, "simulate: a database path is required");
  const WallClock wall{Clock::time_point{} + std::chrono::hours(1), unix_now()};
  // The same preparation as `run` (campaign_preparation.h), with no transport or backend to check.
  HPCTUNE_ASSIGN(CampaignInStore prepared, prepare_campaign(options.master, wall.unix_s, nullptr));
  std::unique_ptr<store::Store> db = std::move(prepared.store);
  PreparedCampaign campaign = std::move(prepared.campaign);
  if (campaign.resuming) return err(Errc::kUsage, "simulate: resuming a simulated campaign is not supported yet");
  campaign.run_dir.clear();  // simulated trials keep no files
  const int64_t cid = campaign.campaign_id;
  HPCTUNE_TRY(db->add_event(cid, "campaign_simulated", 0, 0, -1,
                            {{"step_seconds", options.step_seconds > 0 ? nlohmann::json(options.step_seconds)
                                                                       : nlohmann::json("trial's own")},
                             {"startup_seconds", options.startup_seconds},
                             {"load_seconds", options.load_seconds},
                             {"message_seconds", options.message_seconds},
                             {"groups", campaign.cfg.resources.groups},
                             {"outcomes", options.outcomes},
                             {"machine", options.machine.empty() ? nlohmann::json() : nlohmann::json(options.machine)}},
                            wall.unix_s));
  const auto wake = std::max(seconds(campaign.cfg.resources.heartbeat_interval_s),
                             seconds(campaign.cfg.resources.heartbeat_timeout_s / 2));

  Clock::time_point now = wall.at;
  protocol::InProcHub hub;
  int64_t in_flight = 0, busy_ranks = 0;
  double slowdown = 1;
  std::set<int64_t> addressed;  // the groups the master sent frames to since they last read
  InFlightServer server(hub.server(), &in_flight, &addressed);
  SimLauncher launcher(&now, options.startup_seconds);
  MasterParts parts;
  parts.transport = &server;
  parts.store = db.get();
  parts.launcher = &launcher;
  parts.wall = wall;
  parts.log = options.master.log;
  parts.make_stage = options.master.make_stage;
  parts.vouched_liveness = true;  // a simulated group is alive until it goes silent (note_silent)
  parts.interrupt = options.interrupt;  // Ctrl-C within one message's work, not a step's
  parts.search_state_every = 0;   // not resumed: the searcher's state is written once, at the end
  Master master(std::move(campaign), std::move(parts));
  HPCTUNE_TRY(master.start(now));

  std::vector<std::pair<int64_t, Clock::time_point>> silence;
  for (const auto& [g, s] : options.silence) silence.emplace_back(g, wall.at + seconds(s));
  const auto message = seconds(options.message_seconds);
  const Clock::time_point end_bound = wall.at + seconds(options.max_simulated_seconds);
  uint64_t incarnation = 1;
  SimulationOutcome out;
  int64_t quiet_turns = 0;  // turns in a row without a frame either way
  // The campaign's progress, at most ten times a second of wall time (a simulation of thousands of
  // groups runs for minutes): MasterOptions::progress, with the wall seconds so far.
  const auto wall_start = std::chrono::steady_clock::now();
  auto last_progress = wall_start - std::chrono::seconds(1);  // the first turn draws it
  auto report_progress = [&](bool force) {
    if (!options.master.progress) return;
    const auto t = std::chrono::steady_clock::now();
    if (!force && t - last_progress < std::chrono::milliseconds(100)) return;
    last_progress = t;
    options.master.progress(master.progress(), Seconds(t - wall_start).count());
  };
  while (true) {
    report_progress(false);
    if (out.turns >= options.max_turns || now > end_bound) {
      return err(Errc::kTimeout, "simulate: the campaign did not finish within " + std::to_string(options.max_turns) +
                                     " turns and " + std::to_string(options.max_simulated_seconds) + " simulated seconds");
    }
    if (options.interrupt != nullptr && options.interrupt->load() > 0) {
      return err(Errc::kCancelled, "simulate: interrupted after " + std::to_string(out.finished_trials) +
                                       " simulated trials; what was simulated is in " + options.master.db_path);
    }
    ++out.turns;
    const int64_t waiting = in_flight;
    const auto decision_start = std::chrono::steady_clock::now();
    auto stepped = master.step(now);
    const double decision = Seconds(std::chrono::steady_clock::now() - decision_start).count();
    out.decision_s += decision;
    if (options.count_decision_time) now += seconds(decision);
    HPCTUNE_ASSIGN(const bool finished, std::move(stepped));
    if (finished) break;
    // A step that took none of the frames counted as waiting found none: they were a killed
    // group's, dropped with its connection.
    if (in_flight == waiting) in_flight = 0;
    // Groups whose start-up is over say hello; injected failures happen.
    for (auto it = launcher.pending.begin(); it != launcher.pending.end();) {
      if (it->second.first > now) {
        ++it;
        continue;
      }
      launcher.running[it->first] = std::make_unique<SimGroup>(hub, it->first, it->second.second, incarnation++, options, &slowdown,
                                                              &in_flight, &out, wall.at);
      launcher.running[it->first]->share(now, slowdown);  // its first phase at the present pace
      launcher.update(it->first);
      it = launcher.pending.erase(it);
    }
    for (auto it = silence.begin(); it != silence.end();) {
      auto g = launcher.running.find(it->first);
      if (it->second > now || g == launcher.running.end()) {
        ++it;
        continue;
      }
      g->second->go_silent();
      master.note_silent(it->first, now);
      launcher.update(it->first);
      it = silence.erase(it);
    }
    // The groups with something to do, in the order of their groups: those the master sent frames
    // to and those with a step due. The others would neither read nor send anything: a turn costs
    // what the active groups cost, not what every group does (issue 36).
    std::set<int64_t> active = std::exchange(addressed, {});
    for (auto e = launcher.timeline.begin(); e != launcher.timeline.end() && e->first <= now; ++e) active.insert(e->second);
    bool sent = false;
    for (int64_t g : active) {
      auto group = launcher.running.find(g);
      if (group == launcher.running.end()) continue;
      HPCTUNE_ASSIGN(const bool a, group->second->receive(now));
      HPCTUNE_ASSIGN(const bool b, group->second->emit(now));
      sent = sent || a || b;
      launcher.update(g);
    }
    // The ranks busy now share the machine's cores (rank_slots): every running phase goes on at
    // the new pace from now (a group waiting for work takes the pace when it is given a trial).
    const int64_t busy = static_cast<int64_t>(launcher.busy.size()) * options.ranks_per_group;
    if (busy != busy_ranks) {
      busy_ranks = busy;
      slowdown = config::sharing_slowdown(options.rank_slots, busy);
      for (int64_t g : launcher.busy) launcher.running.at(g)->share(now, slowdown);
      for (int64_t g : launcher.busy) launcher.update(g);
    }
    // The next event: a message in flight, a group's step, a hello, a silence; else the master's
    // wake, at least every half heartbeat timeout (its deadlines and group states). No heartbeats
    // travel: the master takes a simulated group for alive until the simulator says it went
    // silent (MasterParts::vouched_liveness), and loses it once silent past the heartbeat timeout,
    // seen at a wake: up to half a timeout later than a real master would.
    Clock::time_point next = now + wake;
    if (sent || in_flight > 0) {
      next = now + message;
      quiet_turns = 0;
    } else if (++quiet_turns >= 2) {
      // Two turns without a frame: nothing changes before the next event below or the master's
      // own deadline, so the clock goes there at once, not by wakes (steps of 3e7 s took 6e7 wakes
      // each). With neither, nothing ever will: the bound below ends it.
      next = std::min(master.next_deadline().value_or(end_bound + seconds(1)), end_bound + seconds(1));
    }
    if (!launcher.timeline.empty()) next = std::min(next, launcher.timeline.begin()->first);
    for (const auto& [g, p] : launcher.pending) next = std::min(next, p.first);
    for (const auto& [g, t] : silence) next = std::min(next, t);
    now = std::max(next, now + message);
  }
  report_progress(true);
  HPCTUNE_ASSIGN(out.campaign, master.stop(now));
  out.simulated_s = Seconds(now - wall.at).count();
  out.launches = launcher.launches;
  out.frames_to_master = server.received;
  out.frames_to_groups = server.sent;
  out.startup_s = options.startup_seconds * static_cast<double>(out.launches);
  out.wall_s = Seconds(std::chrono::steady_clock::now() - real_start).count();
  return out;
}

}  // namespace hpctune::simulate
