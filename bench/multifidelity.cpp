// bench_multifidelity: multi-fidelity search replayed on a learning-curve table
// (bench/data/curves_<name>.csv, made by bench/make-curve-tables from real trainings).
//
// The master side is the real one: a scheduler::Scheduler over the in-process transport, with an
// in-memory store, on a manual clock, and the real sources: scheduler::SearchSource (no early
// stopping, or `mode: stop`) or workflow::PromotionSource (`mode: pause`), wired as
// workflow/search_stage.cpp wires them, with search::make_searcher and search::make_stopper. Only
// the trainer groups are fake: G groups (default 4) that say hello with their launch credentials,
// answer every assign from the table and train one epoch per `epoch_seconds` of the configuration
// (the table's measured mean) on the manual clock, reporting val_accuracy after every epoch. A
// fake group writes `checkpoint-stage0.bin` (holding the step) into the trial directory at every
// step, and on an assign reads the step to start after from `resume_from`'s checkpoint (PromotionSource
// hands the rung snapshot it made of that file); it trains to params["epochs"] (the trainer's 27
// when the params have none) or until the master's stop.
//
// Budget and regret: epochs consumed = the sum of the epochs every fake group trained. After every
// epoch the incumbent is the configuration with the best val_accuracy reported so far (at any
// epoch); regret = (the table's best val_accuracy at max_t) - (the incumbent's val_accuracy at
// max_t). The run ends once the largest budget is consumed (or the campaign is finished); regret
// is recorded at every multiple of max_t up to it. regret_last_at_x is the same with each
// configuration counted at the highest epoch reported for it (its latest value), not its best one.
//
//   bench_multifidelity --table bench/data/curves_mlp.csv --method asha --mode pause --searcher random
//                       --seeds 1-10 --budget 50 [--groups 4] [--out runs.jsonl] [--report-from-zero]
// One JSON line per (method, seed) on stdout (or appended to --out).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "protocol/messages.h"
#include "protocol/transport.h"
#include "scheduler/scheduler.h"
#include "scheduler/trial_source.h"
#include "search/early_stopping.h"
#include "search/searcher.h"
#include "search/space.h"
#include "store/store.h"
#include "workflow/checkpoint_snapshot.h"
#include "workflow/promotion_source.h"

using namespace hpctune;
using json = nlohmann::json;
using scheduler::Clock;

namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "bench_multifidelity: %s\n", what.c_str());
  std::exit(1);
}

template <class T>
T need(Result<T> r, const std::string& what) {
  if (!r.ok()) die(what + ": " + r.error().to_string());
  return std::move(r).value();
}
void need(const Status& s, const std::string& what) {
  if (!s.ok()) die(what + ": " + s.error().to_string());
}

// ---- the table -------------------------------------------------------------------------------

struct Row {
  std::vector<json> params;  // in the table's column order
  std::vector<double> val;   // val_accuracy at epoch 1..max_t
  double epoch_seconds = 1;
};

struct Table {
  std::string name;
  std::vector<std::string> param_names;
  std::vector<Row> rows;
  std::map<std::string, std::size_t> index;  // key(params) -> row
  int64_t max_t = 0;
  double best_final = 0;

  static std::string key(const std::vector<json>& values) {
    std::string k;
    for (const json& v : values) k += v.dump() + "|";
    return k;
  }
  const Row& lookup(const json& params) const {
    std::vector<json> values;
    for (const std::string& n : param_names) {
      if (!params.contains(n)) die("a suggestion without '" + n + "': " + params.dump());
      values.push_back(params.at(n));
    }
    auto it = index.find(key(values));
    if (it == index.end()) die("a suggestion outside the table: " + params.dump());
    return rows[it->second];
  }
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) out.push_back(cur), cur.clear();
    else cur += c;
  }
  out.push_back(cur);
  return out;
}

// A cell as the grid's YAML would give it: an integer, a float, or a string.
json cell(const std::string& s) {
  if (s.empty()) return s;
  char* end = nullptr;
  const long long i = std::strtoll(s.c_str(), &end, 10);
  if (*end == '\0') return static_cast<int64_t>(i);
  const double d = std::strtod(s.c_str(), &end);
  if (*end == '\0') return d;
  return s;
}

Table read_table(const std::string& path) {
  std::ifstream in(path);
  if (!in) die("cannot read " + path);
  Table t;
  t.name = std::filesystem::path(path).stem().string();
  if (t.name.rfind("curves_", 0) == 0) t.name = t.name.substr(7);
  std::string line;
  std::vector<std::string> header;
  std::size_t state_col = 0, first_val = 0, secs_col = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto cells = split(line, ',');
    if (header.empty()) {
      header = cells;
      for (std::size_t i = 0; i < header.size(); ++i) {
        if (header[i] == "state") state_col = i;
        if (header[i] == "val_accuracy_1") first_val = i;
        if (header[i] == "epoch_seconds") secs_col = i;
        if (header[i].rfind("val_accuracy_", 0) == 0) ++t.max_t;
      }
      if (state_col == 0 || first_val == 0 || secs_col == 0) die(path + ": not a curve table (bench/make-curve-tables)");
      t.param_names.assign(header.begin(), header.begin() + static_cast<std::ptrdiff_t>(state_col));
      continue;
    }
    if (cells.size() != header.size()) die(path + ": a row of " + std::to_string(cells.size()) + " cells");
    Row r;
    for (std::size_t i = 0; i < state_col; ++i) r.params.push_back(cell(cells[i]));
    for (int64_t e = 0; e < t.max_t; ++e) r.val.push_back(std::stod(cells[first_val + static_cast<std::size_t>(e)]));
    r.epoch_seconds = std::stod(cells[secs_col]);
    if (!(r.epoch_seconds > 0)) r.epoch_seconds = 1;
    t.index[Table::key(r.params)] = t.rows.size();
    t.rows.push_back(std::move(r));
  }
  if (t.rows.empty()) die(path + ": no rows");
  t.best_final = -1;
  for (const Row& r : t.rows) t.best_final = std::max(t.best_final, r.val.back());
  return t;
}

// Every column as an unordered choice of its distinct values, in the order they first appear.
search::Space table_space(const Table& t) {
  std::vector<search::ParamSpec> specs;
  for (std::size_t i = 0; i < t.param_names.size(); ++i) {
    search::ParamSpec p;
    p.name = t.param_names[i];
    p.type = search::ParamType::kChoice;
    for (const Row& r : t.rows)
      if (std::find(p.choices.begin(), p.choices.end(), r.params[i]) == p.choices.end()) p.choices.push_back(r.params[i]);
    specs.push_back(std::move(p));
  }
  return need(search::Space::create(std::move(specs)), "the table's space");
}

// ---- one replay -------------------------------------------------------------------------------
//
// run_one (at the end of this section) reads top to bottom: a Replay builds the master side (the
// store, searcher, stopper and source, the scheduler on the manual clock), connects the fake groups,
// trains epoch by epoch until the budget is consumed, then its result() says what happened.

struct Setup {
  std::string searcher = "random";  // random | auto | tpe | ...
  std::string stopper = "none";     // none | asha | hyperband
  std::string mode = "stop";        // stop | pause
  int64_t groups = 4;
  int64_t budget_x = 50;            // the largest budget, in full trainings (x max_t epochs)
  // --report-from-zero: the groups report the index of the epoch just trained, counted from 0
  // (Optuna's trial.report(value, epoch)), as step; 1, 2, ... otherwise.
  bool from_zero = false;
};

struct FakeGroup {
  std::unique_ptr<protocol::ClientTransport> client;
  int64_t group = 0;
  bool busy = false;
  int64_t trial_id = 0, attempt = 0;
  int64_t step = 0, target = 0;  // the last epoch trained; the epoch this attempt ends at
  const Row* row = nullptr;
  std::string trial_dir;
  double next_at = 0;  // simulated seconds when its next epoch ends
  bool ended = false;
};

void send(FakeGroup& g, const protocol::Message& m) {
  if (!g.client->send(protocol::encode(m)).ok()) die("a fake group could not send");
}

// The step a checkpoint file holds (the fake groups write it: the step as text).
int64_t checkpoint_step(const std::string& dir) {
  if (dir.empty()) return 0;
  std::ifstream in(dir + "/checkpoint-stage0.bin");
  int64_t step = 0;
  if (!(in >> step)) die("no checkpoint in " + dir);
  return step;
}

// The anytime record: epochs consumed, the incumbent, and the regret at every multiple of max_t.
struct AnytimeRecord {
  explicit AnytimeRecord(const Table& t) : table(t), latest(t.rows.size(), {0, -1.0}) {}

  const Table& table;
  int64_t consumed = 0;
  double incumbent_val = -1;
  const Row* incumbent = nullptr;
  std::vector<double> regret_at;  // regret when consumed reached k * max_t, k = 1..budget_x
  // The second definition (regret_last_at_x): each configuration counts with its value at the highest
  // epoch reported for it, so a spike at an early epoch is forgotten once it trains further.
  std::vector<std::pair<int64_t, double>> latest;  // by row: (epoch, value)
  std::vector<double> regret_last_at;

  // One epoch trained by some group: `row` reached `step` with val_accuracy `v`.
  void epoch_trained(const Row& row, int64_t step, double v) {
    ++consumed;
    if (v > incumbent_val) incumbent_val = v, incumbent = &row;
    auto& last = latest[static_cast<std::size_t>(&row - table.rows.data())];
    if (step >= last.first) last = {step, v};
    if (consumed % table.max_t == 0) {
      regret_at.push_back(table.best_final - incumbent->val.back());
      std::size_t arg = 0;
      for (std::size_t i = 1; i < latest.size(); ++i)
        if (latest[i].second > latest[arg].second) arg = i;
      regret_last_at.push_back(table.best_final - table.rows[arg].val.back());
    }
  }

  // A campaign that finished before the budget (a space exhausted): its incumbent stays.
  void pad_to(int64_t budget_x) {
    while (static_cast<int64_t>(regret_at.size()) < budget_x) {
      regret_at.push_back(incumbent ? table.best_final - incumbent->val.back() : table.best_final);
      regret_last_at.push_back(regret_last_at.empty() ? regret_at.back() : regret_last_at.back());
    }
  }
};

// The searcher and the stopper of the stage, as the setup names them.
std::unique_ptr<search::Searcher> make_table_searcher(const Table& table, const Setup& su, uint64_t seed,
                                                      int64_t max_trials) {
  search::SearchSpec spec;
  spec.algorithm = su.searcher;
  spec.space = table_space(table);
  spec.objectives = {{"val_accuracy", true}};
  spec.seed = seed;
  spec.max_trials = max_trials;
  return need(search::make_searcher(spec), "searcher " + su.searcher);
}

std::unique_ptr<search::EarlyStopper> make_table_stopper(const Setup& su, uint64_t seed, int64_t max_t) {
  search::StopperSpec sspec;
  sspec.kind = su.stopper;
  if (su.stopper != "none")
    sspec.settings = {{"grace_period", 1}, {"reduction_factor", 3}, {"max_t", max_t}, {"mode", su.mode}};
  sspec.maximize = true;
  sspec.seed = seed;
  return need(search::make_stopper(sspec), "stopper " + su.stopper);
}

// The one replay of (table, setup, seed): the real master over the in-process hub on a manual clock
// (sim: simulated seconds since t0), and the fake groups answering it from the table.
class Replay {
 public:
  Replay(const Table& table, const Setup& su, uint64_t seed, const std::string& work);
  void connect_groups();  // every group says hello with its launch credential
  void run();             // trains until the largest budget is consumed (or the campaign finished)
  json result(std::chrono::steady_clock::time_point wall_start) const;

 private:
  static constexpr Clock::time_point kT0{};  // the manual clock: t0 + simulated seconds
  Clock::time_point now() const {
    return kT0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(sim_));
  }
  void make_source();
  scheduler::SchedulerOptions scheduler_options(const std::string& work) const;
  void pump();
  bool serve(FakeGroup& g);
  void start_attempt(FakeGroup& g, const protocol::Assign& a);
  void end_attempt(FakeGroup& g, bool stopped);
  // The step the group reports after its epoch g.step (Setup::from_zero).
  int64_t reported_step(const FakeGroup& g) const { return su_.from_zero ? g.step - 1 : g.step; }
  void settle();
  FakeGroup* next_epoch_end();
  void train_epoch(FakeGroup& g);

  const Table& table_;
  const Setup& su_;
  const uint64_t seed_;
  const int64_t max_t_;
  const int64_t budget_epochs_;
  const bool early_;
  const int64_t max_trials_;

  std::unique_ptr<store::Store> db_;
  int64_t campaign_id_ = 0;
  std::unique_ptr<search::Searcher> searcher_;
  std::unique_ptr<search::EarlyStopper> stopper_;
  std::unique_ptr<scheduler::TrialSource> source_;
  workflow::PromotionSource* promotion_source_ = nullptr;
  protocol::InProcHub hub_;
  std::unique_ptr<protocol::ServerTransport> server_;
  double sim_ = 0;
  std::unique_ptr<scheduler::Scheduler> sched_;
  std::vector<FakeGroup> groups_;

  AnytimeRecord record_;
  int64_t trials_started_ = 0, resumes_ = 0, stop_messages_ = 0;
};

Replay::Replay(const Table& table, const Setup& su, uint64_t seed, const std::string& work)
    : table_(table),
      su_(su),
      seed_(seed),
      max_t_(table.max_t),
      budget_epochs_(su.budget_x * table.max_t),
      early_(su.stopper != "none"),
      // No early stopping: a user who knows the budget asks for budget / max_t trials; with early
      // stopping the number of trials is not known beforehand, so every configuration may be asked.
      max_trials_(early_ ? static_cast<int64_t>(table.rows.size()) : su.budget_x),
      record_(table) {
  db_ = need(store::Store::open(":memory:"), "store");
  store::CampaignRow crow;
  crow.name = "multifidelity";
  crow.seed = seed;
  crow.created_at = 1;
  campaign_id_ = need(db_->create_campaign(crow), "campaign");
  searcher_ = make_table_searcher(table, su, seed, max_trials_);
  stopper_ = make_table_stopper(su, seed, max_t_);
  make_source();
  server_ = hub_.server();
  sched_ = std::make_unique<scheduler::Scheduler>(scheduler_options(work), *server_, *db_, *source_);
  sched_->set_log([](const std::string&) {});
  need(sched_->restore(now()), "restore");
}

// As workflow/search_stage.cpp builds the stage's source.
void Replay::make_source() {
  if (!stopper_->pauses()) {
    auto s = std::make_unique<scheduler::SearchSource>(*searcher_, *stopper_);
    s->set_max_steps(budget_epochs_);
    source_ = std::move(s);
  } else {
    workflow::PromotionOptions o;
    o.step_key = "epochs";
    o.checkpoint_directory = "";  // the built-ins' checkpoint-stage*.bin
    o.max_t = max_t_;
    o.max_trials = max_trials_;
    o.max_steps = budget_epochs_;
    o.maximize = true;
    auto s = std::make_unique<workflow::PromotionSource>(*searcher_, *stopper_, o);
    promotion_source_ = s.get();
    source_ = std::move(s);
  }
}

scheduler::SchedulerOptions Replay::scheduler_options(const std::string& work) const {
  scheduler::SchedulerOptions opt;
  opt.campaign_id = campaign_id_;
  opt.seed = seed_;
  opt.objectives = {{"val_accuracy", true}};
  opt.max_trials = max_trials_;
  opt.max_attempts = 3;
  opt.max_failures = 0;
  opt.trainer = {{"kind", "mlp"}, {"epochs", max_t_}};
  opt.trials_dir = work + "/trials";
  opt.heartbeat_interval = std::chrono::hours(24 * 365);
  opt.heartbeat_timeout = std::chrono::hours(24 * 365 * 10);
  opt.search_state_every = 0;
  opt.wall = scheduler::WallClock{kT0, 1.7e9};
  return opt;
}

// The master's turn: every frame the groups sent, then a tick.
void Replay::pump() {
  for (int round = 0; round < 1000000; ++round) {
    auto env = need(server_->recv(std::chrono::milliseconds(0)), "recv");
    if (!env) break;
    need(sched_->handle(env->peer, env->bytes, now()), "handle");
  }
  need(sched_->tick(now()), "tick");
}

void Replay::connect_groups() {
  groups_.resize(static_cast<std::size_t>(su_.groups));
  for (std::size_t i = 0; i < groups_.size(); ++i) {
    FakeGroup& g = groups_[i];
    g.group = static_cast<int64_t>(i);
    g.client = hub_.connect();
    protocol::Hello h;
    h.secret = need(sched_->launch_credential(g.group), "credential");
    h.incarnation = 1000 + i;
    h.group = g.group;
    h.trainers = {"mlp"};
    send(g, h);
  }
  pump();
}

// Reads every frame a group was sent; answers assigns and stops. True when it sent something.
bool Replay::serve(FakeGroup& g) {
  bool sent = false;
  for (;;) {
    auto frame = need(g.client->recv(std::chrono::milliseconds(0)), "client recv");
    if (!frame) break;
    auto msg = need(protocol::decode(*frame), "decode");
    if (std::holds_alternative<protocol::Welcome>(msg)) {
      send(g, protocol::Ready{});
      sent = true;
    } else if (auto* a = std::get_if<protocol::Assign>(&msg)) {
      start_attempt(g, *a);
      sent = true;
    } else if (auto* s = std::get_if<protocol::Stop>(&msg)) {
      if (g.busy && s->trial_id == g.trial_id && s->attempt == g.attempt) {
        end_attempt(g, true);
        ++stop_messages_;
        sent = true;
      }
    } else if (std::holds_alternative<protocol::Shutdown>(msg)) {
      g.ended = true;
    }
  }
  return sent;
}

// An assign: the group resumes from `resume_from`'s checkpoint (or starts at 0) and reports started.
void Replay::start_attempt(FakeGroup& g, const protocol::Assign& a) {
  if (g.busy) die("an assign to a busy group");
  g.busy = true;
  g.trial_id = a.trial_id;
  g.attempt = a.attempt;
  g.row = &table_.lookup(a.params);
  g.trial_dir = a.trial_dir;
  std::filesystem::create_directories(g.trial_dir);
  g.step = a.resume_from.empty() ? 0 : checkpoint_step(a.resume_from);
  if (!a.resume_from.empty()) ++resumes_;
  else ++trials_started_;
  g.target = a.params.contains("epochs") ? a.params.at("epochs").get<int64_t>() : max_t_;
  if (g.target <= g.step) die("an assign with nothing to train: " + a.params.dump());
  g.next_at = sim_ + g.row->epoch_seconds;
  send(g, protocol::Report{g.trial_id, g.attempt, 0, {}});  // started
}

// The attempt's done, at the last epoch trained: stopped by the master, or its target reached.
void Replay::end_attempt(FakeGroup& g, bool stopped) {
  protocol::Done d;
  d.trial_id = g.trial_id;
  d.attempt = g.attempt;
  d.step = reported_step(g);
  d.stopped = stopped;
  d.metrics = {{"val_accuracy", g.row->val[static_cast<std::size_t>(g.step - 1)]}};
  send(g, d);
  g.busy = false;
}

// The groups and the master answer each other until neither has anything more to say.
void Replay::settle() {
  for (int round = 0; round < 100000; ++round) {
    bool sent = false;
    for (FakeGroup& g : groups_) sent = serve(g) || sent;
    pump();
    if (!sent) {
      // One more look: the pump may have sent frames.
      bool more = false;
      for (FakeGroup& g : groups_) more = serve(g) || more;
      if (!more) return;
      pump();
    }
  }
  die("the master and the groups never settle");
}

// The busy group whose current epoch ends first (null when none is busy).
FakeGroup* Replay::next_epoch_end() {
  FakeGroup* next = nullptr;
  for (FakeGroup& g : groups_)
    if (g.busy && (!next || g.next_at < next->next_at)) next = &g;
  return next;
}

// The group's epoch ends now: its checkpoint, the record, its report, then its done or next epoch.
void Replay::train_epoch(FakeGroup& g) {
  sim_ = g.next_at;
  g.step += 1;
  {
    std::ofstream ck(g.trial_dir + "/checkpoint-stage0.bin", std::ios::trunc);
    ck << g.step << "\n";
  }
  const double v = g.row->val[static_cast<std::size_t>(g.step - 1)];
  record_.epoch_trained(*g.row, g.step, v);
  send(g, protocol::Report{g.trial_id, g.attempt, reported_step(g), {{"val_accuracy", v}}});
  pump();
  serve(g);  // a stop for this report ends the attempt here
  if (g.busy && g.step >= g.target) {
    end_attempt(g, false);
  } else if (g.busy) {
    g.next_at = sim_ + g.row->epoch_seconds;
  }
}

void Replay::run() {
  settle();
  while (record_.consumed < budget_epochs_ && !sched_->finished()) {
    FakeGroup* next = next_epoch_end();
    if (!next) {
      // Nothing running: the master may still start something at a later tick.
      sim_ += 1;
      settle();
      bool any = false;
      for (FakeGroup& g : groups_) any = any || g.busy;
      if (!any) break;
      continue;
    }
    train_epoch(*next);
    settle();
  }
  record_.pad_to(su_.budget_x);
}

// The run's JSON line, after the harness's own checks (it dies when one fails).
json Replay::result(std::chrono::steady_clock::time_point wall_start) const {
  const auto p = sched_->progress();
  json out = {{"table", table_.name},
              {"searcher", su_.searcher},
              {"stopper", su_.stopper},
              {"mode", early_ ? su_.mode : "none"},
              {"report_from_zero", su_.from_zero},
              {"seed", seed_},
              {"groups", su_.groups},
              {"max_t", max_t_},
              {"budget_epochs", budget_epochs_},
              {"consumed_epochs", record_.consumed},
              {"finished_early", record_.consumed < budget_epochs_},
              {"regret_at_x", record_.regret_at},
              {"regret_last_at_x", record_.regret_last_at},
              {"trials", trials_started_},
              {"resumes", resumes_},
              {"stop_messages", stop_messages_},
              {"done", p.done},
              {"pruned", p.pruned},
              {"sim_seconds", sim_},
              {"wall_seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count()}};
  const auto& c = sched_->counters();
  out["dropped_frames"] = c.malformed + c.unregistered + c.out_of_order + c.stale_results + c.unauthenticated;
  // The harness's own checks: every frame was one the scheduler expected, and under pause nothing was
  // trained twice (the source counts distinct (trial, step) pairs reported; the groups, epochs trained).
  if (out["dropped_frames"].get<int64_t>() != 0) die("the scheduler dropped frames of the fake groups: " + out.dump());
  if (promotion_source_) {
    out["steps_consumed_by_source"] = promotion_source_->steps_consumed();
    // A program counting from 0 reports one step fewer than it trained (the source counts reports).
    if (promotion_source_->steps_consumed() != record_.consumed && !su_.from_zero)
      die("pause mode trained some steps twice (or skipped some): " + out.dump());
  }
  return out;
}

json run_one(const Table& table, const Setup& su, uint64_t seed, const std::string& work_root) {
  const auto wall_start = std::chrono::steady_clock::now();
  const std::string work = work_root + "/run-" + std::to_string(seed);
  (void)workflow::remove_snapshot_tree(work);
  std::filesystem::create_directories(work);
  Replay replay(table, su, seed, work);
  replay.connect_groups();
  replay.run();
  const json out = replay.result(wall_start);
  (void)workflow::remove_snapshot_tree(work);
  return out;
}

std::vector<uint64_t> parse_seeds(const std::string& s) {
  std::vector<uint64_t> out;
  for (const std::string& part : split(s, ',')) {
    if (part.empty()) continue;
    const auto dash = part.find('-');
    if (dash == std::string::npos) {
      out.push_back(std::stoull(part));
    } else {
      for (uint64_t i = std::stoull(part.substr(0, dash)); i <= std::stoull(part.substr(dash + 1)); ++i) out.push_back(i);
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string table_path, seeds = "1-10", out_path, work = "";
  Setup su;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--table") table_path = val();
    else if (a == "--searcher") su.searcher = val();
    else if (a == "--method") su.stopper = val();
    else if (a == "--mode") su.mode = val();
    else if (a == "--groups") su.groups = std::stoll(val());
    else if (a == "--budget") su.budget_x = std::stoll(val());
    else if (a == "--seeds") seeds = val();
    else if (a == "--out") out_path = val();
    else if (a == "--workdir") work = val();
    else if (a == "--report-from-zero") su.from_zero = true;
    else die("unknown argument " + a + " (see the top of bench/multifidelity.cpp)");
  }
  if (table_path.empty()) die("--table is required");
  if (su.mode != "stop" && su.mode != "pause") die("--mode is stop or pause");
  const Table table = read_table(table_path);
  // The fake groups rewrite a checkpoint file every epoch: on tmpfs (/dev/shm) where there is one, since
  // ext4 flushes a truncated file's data on every rewrite (auto_da_alloc), about 2 ms an epoch.
  if (work.empty()) {
    const std::filesystem::path base =
        std::filesystem::is_directory("/dev/shm") ? std::filesystem::path("/dev/shm") : std::filesystem::temp_directory_path();
    work = (base / ("bench-multifidelity-" + std::to_string(::getpid()))).string();
  }
  std::ofstream file;
  if (!out_path.empty()) file.open(out_path, std::ios::app);
  for (uint64_t seed : parse_seeds(seeds)) {
    const json r = run_one(table, su, seed, work);
    (out_path.empty() ? std::cout : file) << r.dump() << "\n";
    (out_path.empty() ? std::cout : file).flush();
  }
  (void)workflow::remove_snapshot_tree(work);
  std::error_code ec;
  std::filesystem::remove_all(work, ec);
  return 0;
}
