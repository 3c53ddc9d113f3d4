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
//                       --seeds 1-10 --budget 50 [--groups 4] [--out runs.jsonl]
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

struct Setup {
  std::string searcher = "random";  // random | auto | tpe | ...
  std::string stopper = "none";     // none | asha | hyperband
  std::string mode = "stop";        // stop | pause
  int64_t groups = 4;
  int64_t budget_x = 50;            // the largest budget, in full trainings (x max_t epochs)
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

json run_one(const Table& table, const Setup& su, uint64_t seed, const std::string& work_root) {
  const auto wall_start = std::chrono::steady_clock::now();
  const int64_t max_t = table.max_t;
  const int64_t budget_epochs = su.budget_x * max_t;
  const bool early = su.stopper != "none";
  // No early stopping: a user who knows the budget asks for budget / max_t trials; with early
  // stopping the number of trials is not known beforehand, so every configuration may be asked.
  const int64_t max_trials = early ? static_cast<int64_t>(table.rows.size()) : su.budget_x;

  const std::string work = work_root + "/run-" + std::to_string(seed);
  (void)workflow::remove_snapshot_tree(work);
  std::filesystem::create_directories(work);

  auto db = need(store::Store::open(":memory:"), "store");
  store::CampaignRow crow;
  crow.name = "multifidelity";
  crow.seed = seed;
  crow.created_at = 1;
  const int64_t campaign_id = need(db->create_campaign(crow), "campaign");

  search::SearchSpec spec;
  spec.algorithm = su.searcher;
  spec.space = table_space(table);
  spec.objectives = {{"val_accuracy", true}};
  spec.seed = seed;
  spec.max_trials = max_trials;
  auto searcher = need(search::make_searcher(spec), "searcher " + su.searcher);
  search::StopperSpec sspec;
  sspec.kind = su.stopper;
  if (early)
    sspec.settings = {{"grace_period", 1}, {"reduction_factor", 3}, {"max_t", max_t}, {"mode", su.mode}};
  sspec.maximize = true;
  sspec.seed = seed;
  auto stopper = need(search::make_stopper(sspec), "stopper " + su.stopper);

  // As workflow/search_stage.cpp builds the stage's source.
  std::unique_ptr<scheduler::TrialSource> source;
  scheduler::SearchSource* search_source = nullptr;
  workflow::PromotionSource* promotion_source = nullptr;
  if (!stopper->pauses()) {
    auto s = std::make_unique<scheduler::SearchSource>(*searcher, *stopper);
    s->set_max_steps(budget_epochs);
    search_source = s.get();
    source = std::move(s);
  } else {
    workflow::PromotionOptions o;
    o.step_key = "epochs";
    o.checkpoint_directory = "";  // the built-ins' checkpoint-stage*.bin
    o.max_t = max_t;
    o.max_trials = max_trials;
    o.max_steps = budget_epochs;
    o.maximize = true;
    auto s = std::make_unique<workflow::PromotionSource>(*searcher, *stopper, o);
    promotion_source = s.get();
    source = std::move(s);
  }
  (void)search_source;

  protocol::InProcHub hub;
  auto server = hub.server();
  const Clock::time_point t0{};  // the manual clock: t0 + simulated seconds
  double sim = 0;
  auto now = [&] { return t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(sim)); };

  scheduler::SchedulerOptions opt;
  opt.campaign_id = campaign_id;
  opt.seed = seed;
  opt.objectives = {{"val_accuracy", true}};
  opt.max_trials = max_trials;
  opt.max_attempts = 3;
  opt.max_failures = 0;
  opt.trainer = {{"kind", "mlp"}, {"epochs", max_t}};
  opt.trials_dir = work + "/trials";
  opt.heartbeat_interval = std::chrono::hours(24 * 365);
  opt.heartbeat_timeout = std::chrono::hours(24 * 365 * 10);
  opt.search_state_every = 0;
  opt.wall = scheduler::WallClock{t0, 1.7e9};
  scheduler::Scheduler sched(opt, *server, *db, *source);
  sched.set_log([](const std::string&) {});
  need(sched.restore(now()), "restore");

  auto pump = [&] {
    for (int round = 0; round < 1000000; ++round) {
      auto env = need(server->recv(std::chrono::milliseconds(0)), "recv");
      if (!env) break;
      need(sched.handle(env->peer, env->bytes, now()), "handle");
    }
    need(sched.tick(now()), "tick");
  };

  std::vector<FakeGroup> groups(static_cast<std::size_t>(su.groups));
  for (std::size_t i = 0; i < groups.size(); ++i) {
    FakeGroup& g = groups[i];
    g.group = static_cast<int64_t>(i);
    g.client = hub.connect();
    protocol::Hello h;
    h.secret = need(sched.launch_credential(g.group), "credential");
    h.incarnation = 1000 + i;
    h.group = g.group;
    h.trainers = {"mlp"};
    send(g, h);
  }
  pump();

  // The anytime record.
  int64_t consumed = 0;
  double incumbent_val = -1;
  const Row* incumbent = nullptr;
  std::vector<double> regret_at;  // regret when consumed reached k * max_t, k = 1..budget_x
  // The second definition (regret_last_at_x): each configuration counts with its value at the highest
  // epoch reported for it, so a spike at an early epoch is forgotten once it trains further.
  std::vector<std::pair<int64_t, double>> latest(table.rows.size(), {0, -1.0});  // by row: (epoch, value)
  std::vector<double> regret_last_at;
  int64_t trials_started = 0, resumes = 0, stop_messages = 0;

  // Reads every frame a group was sent; answers assigns and stops. True when it sent something.
  auto serve = [&](FakeGroup& g) {
    bool sent = false;
    for (;;) {
      auto frame = need(g.client->recv(std::chrono::milliseconds(0)), "client recv");
      if (!frame) break;
      auto msg = need(protocol::decode(*frame), "decode");
      if (std::holds_alternative<protocol::Welcome>(msg)) {
        send(g, protocol::Ready{});
        sent = true;
      } else if (auto* a = std::get_if<protocol::Assign>(&msg)) {
        if (g.busy) die("an assign to a busy group");
        g.busy = true;
        g.trial_id = a->trial_id;
        g.attempt = a->attempt;
        g.row = &table.lookup(a->params);
        g.trial_dir = a->trial_dir;
        std::filesystem::create_directories(g.trial_dir);
        g.step = a->resume_from.empty() ? 0 : checkpoint_step(a->resume_from);
        if (!a->resume_from.empty()) ++resumes;
        else ++trials_started;
        g.target = a->params.contains("epochs") ? a->params.at("epochs").get<int64_t>() : max_t;
        if (g.target <= g.step) die("an assign with nothing to train: " + a->params.dump());
        g.next_at = sim + g.row->epoch_seconds;
        send(g, protocol::Report{g.trial_id, g.attempt, 0, {}});  // started
        sent = true;
      } else if (auto* s = std::get_if<protocol::Stop>(&msg)) {
        if (g.busy && s->trial_id == g.trial_id && s->attempt == g.attempt) {
          protocol::Done d;
          d.trial_id = g.trial_id;
          d.attempt = g.attempt;
          d.step = g.step;
          d.stopped = true;
          d.metrics = {{"val_accuracy", g.row->val[static_cast<std::size_t>(g.step - 1)]}};
          send(g, d);
          g.busy = false;
          ++stop_messages;
          sent = true;
        }
      } else if (std::holds_alternative<protocol::Shutdown>(msg)) {
        g.ended = true;
      }
    }
    return sent;
  };
  auto settle = [&] {
    for (int round = 0; round < 100000; ++round) {
      bool sent = false;
      for (FakeGroup& g : groups) sent = serve(g) || sent;
      pump();
      if (!sent) {
        // One more look: the pump may have sent frames.
        bool more = false;
        for (FakeGroup& g : groups) more = serve(g) || more;
        if (!more) return;
        pump();
      }
    }
    die("the master and the groups never settle");
  };
  settle();

  while (consumed < budget_epochs && !sched.finished()) {
    FakeGroup* next = nullptr;
    for (FakeGroup& g : groups)
      if (g.busy && (!next || g.next_at < next->next_at)) next = &g;
    if (!next) {
      // Nothing running: the master may still start something at a later tick.
      sim += 1;
      settle();
      bool any = false;
      for (FakeGroup& g : groups) any = any || g.busy;
      if (!any) break;
      continue;
    }
    FakeGroup& g = *next;
    sim = g.next_at;
    g.step += 1;
    ++consumed;
    {
      std::ofstream ck(g.trial_dir + "/checkpoint-stage0.bin", std::ios::trunc);
      ck << g.step << "\n";
    }
    const double v = g.row->val[static_cast<std::size_t>(g.step - 1)];
    if (v > incumbent_val) incumbent_val = v, incumbent = g.row;
    auto& last = latest[static_cast<std::size_t>(g.row - table.rows.data())];
    if (g.step >= last.first) last = {g.step, v};
    if (consumed % max_t == 0) {
      regret_at.push_back(table.best_final - incumbent->val.back());
      std::size_t arg = 0;
      for (std::size_t i = 1; i < latest.size(); ++i)
        if (latest[i].second > latest[arg].second) arg = i;
      regret_last_at.push_back(table.best_final - table.rows[arg].val.back());
    }
    send(g, protocol::Report{g.trial_id, g.attempt, g.step, {{"val_accuracy", v}}});
    pump();
    serve(g);  // a stop for this report ends the attempt here
    if (g.busy && g.step >= g.target) {
      protocol::Done d;
      d.trial_id = g.trial_id;
      d.attempt = g.attempt;
      d.step = g.step;
      d.stopped = false;
      d.metrics = {{"val_accuracy", v}};
      send(g, d);
      g.busy = false;
    } else if (g.busy) {
      g.next_at = sim + g.row->epoch_seconds;
    }
    settle();
  }
  // A campaign that finished before the budget (a space exhausted): its incumbent stays.
  while (static_cast<int64_t>(regret_at.size()) < su.budget_x) {
    regret_at.push_back(incumbent ? table.best_final - incumbent->val.back() : table.best_final);
    regret_last_at.push_back(regret_last_at.empty() ? regret_at.back() : regret_last_at.back());
  }

  const auto p = sched.progress();
  json out = {{"table", table.name},
              {"searcher", su.searcher},
              {"stopper", su.stopper},
              {"mode", early ? su.mode : "none"},
              {"seed", seed},
              {"groups", su.groups},
              {"max_t", max_t},
              {"budget_epochs", budget_epochs},
              {"consumed_epochs", consumed},
              {"finished_early", consumed < budget_epochs},
              {"regret_at_x", regret_at},
              {"regret_last_at_x", regret_last_at},
              {"trials", trials_started},
              {"resumes", resumes},
              {"stop_messages", stop_messages},
              {"done", p.done},
              {"pruned", p.pruned},
              {"sim_seconds", sim},
              {"wall_seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count()}};
  const auto& c = sched.counters();
  out["dropped_frames"] = c.malformed + c.unregistered + c.out_of_order + c.stale_results + c.unauthenticated;
  // The harness's own checks: every frame was one the scheduler expected, and under pause nothing was
  // trained twice (the source counts distinct (trial, step) pairs reported; the groups, epochs trained).
  if (out["dropped_frames"].get<int64_t>() != 0) die("the scheduler dropped frames of the fake groups: " + out.dump());
  if (promotion_source) {
    out["steps_consumed_by_source"] = promotion_source->steps_consumed();
    if (promotion_source->steps_consumed() != consumed)
      die("pause mode trained some steps twice (or skipped some): " + out.dump());
  }
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
