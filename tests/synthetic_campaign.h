// A synthetic campaign database written through store::Store exactly as a master writes one, for
// the dashboard's tests and bench (issue 14): the campaign row with a real parsed config (a space of
// six parameters: floats, log floats, an int and a categorical), 16 trainer groups, trials in
// generations with two parents each (genetic-like), one attempt each on a group with start and end
// times, `reports_per_trial` reports of two metrics per trial, some trials pruned or failed, the last
// few still running. Optionally (`with_stages`) a workflow: the search stage, a completed ensemble
// of its best trials, a transfer stage of targets beside baseline twins, and a pbt stage whose
// members exploit each other (lineage). Header-only; returns the error of the first write that fails.
//
// The objective (val_accuracy, maximized) depends mostly on lr, a little on layers and not at all on
// the other parameters, so parameter importance has a known answer.
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/result.h"
#include "common/rng.h"
#include "config/config.h"
#include "store/store.h"

namespace hpctune::testing {

struct SyntheticOptions {
  std::string name = "synthetic";
  int64_t groups = 16;
  int64_t population = 100;      // trials per generation
  double pruned_fraction = 0.1;
  double failed_fraction = 0.02;
  int64_t running = 8;           // the last trials, left running (with half their reports)
  int64_t batch = 1000;          // trials per transaction
  bool with_stages = false;
  std::string campaign_state = "running";
  double created_at = 0;         // 0: so that the last trial ends about now
};

inline const char* kSyntheticConfig =
    "name: synthetic\nseed: 7\nobjective: {metric: val_accuracy, mode: max}\n"
    "search: {algorithm: genetic, max_trials: 1000000, settings: {population: 100}}\n"
    "space:\n"
    "  lr: {type: float, low: 0.0001, high: 1.0, log: true}\n"
    "  momentum: {type: float, low: 0.5, high: 0.99}\n"
    "  dropout: {type: float, low: 0.0, high: 0.5}\n"
    "  weight_decay: {type: float, low: 0.000001, high: 0.01, log: true}\n"
    "  layers: {type: int, low: 1, high: 6}\n"
    "  optimizer: {type: choice, values: [sgd, adam, rmsprop]}\n"
    "trainer: {kind: command, command: \"sh train.sh\"}\n"
    "resources: {groups: 16}\n";

namespace synthetic_detail {

inline double objective_of(const nlohmann::json& p, Rng& rng) {
  const double lr = std::log10(p["lr"].get<double>());  // -4 .. 0; best near -2
  const double layers = p["layers"].get<double>();      // best 3
  return 0.95 - 0.08 * (lr + 2) * (lr + 2) - 0.01 * std::abs(layers - 3) + 0.005 * (rng.uniform() - 0.5);
}

inline nlohmann::json params_of(Rng& rng) {
  static const char* kOptimizers[] = {"sgd", "adam", "rmsprop"};
  return {{"lr", std::pow(10.0, -4 + 4 * rng.uniform())},
          {"momentum", 0.5 + 0.49 * rng.uniform()},
          {"dropout", 0.5 * rng.uniform()},
          {"weight_decay", std::pow(10.0, -6 + 4 * rng.uniform())},
          {"layers", 1 + static_cast<int64_t>(rng.uniform() * 6) % 6},
          {"optimizer", kOptimizers[static_cast<int>(rng.uniform() * 3) % 3]}};
}

}  // namespace synthetic_detail

// Writes the campaign into a new database at `path` (which must not exist).
inline Status make_synthetic_campaign(const std::string& path, int64_t trials, int64_t reports_per_trial, uint64_t seed,
                                      const SyntheticOptions& o = {}) {
  using store::TrialState;
  Rng rng(seed);
  HPCTUNE_ASSIGN(auto cfg, config::parse_config(kSyntheticConfig, "synthetic.yaml"));
  store::OpenOptions open;
  open.master_lock = true;
  HPCTUNE_ASSIGN(auto db, store::Store::open(path, open));
  const double trial_s = 10;  // mean duration
  const double span = trial_s * static_cast<double>(trials) / static_cast<double>(std::max<int64_t>(1, o.groups));
  const double t0 = o.created_at > 0 ? o.created_at : unix_now() - span - 30;
  store::CampaignRow c;
  c.name = o.name;
  c.config_text = kSyntheticConfig;
  c.config_source = "synthetic.yaml";
  c.config_json = cfg.normalized;
  if (o.with_stages) {
    c.config_json["stages"] = nlohmann::json::array(
        {{{"name", "search"}, {"kind", "search"}, {"search", c.config_json["search"]}},
         {{"name", "blend"}, {"kind", "ensemble"}, {"from", {"search"}}},
         {{"name", "transfer"}, {"kind", "transfer"}, {"from", {"search"}}},
         {{"name", "pbt"}, {"kind", "pbt"}}});
  }
  c.seed = seed;
  c.created_at = t0;
  HPCTUNE_ASSIGN(const int64_t cid, db->create_campaign(c));
  HPCTUNE_TRY(db->set_campaign_master(cid, "synthetic-host", 1));
  int64_t search_stage = 0;
  if (o.with_stages) {
    HPCTUNE_ASSIGN(search_stage, db->create_stage(cid, "search", "search", nlohmann::json::object(), t0));
  }
  std::vector<double> group_free(static_cast<size_t>(std::max<int64_t>(1, o.groups)), t0 + 1);
  HPCTUNE_TRY(db->begin());
  for (int64_t g = 0; g < o.groups; ++g) {
    HPCTUNE_TRY(db->upsert_group(cid, g, "local", 1, 1, "ready", 1, 0, t0, nlohmann::json::array({"localhost"})));
  }
  std::vector<int64_t> ids;
  std::vector<std::pair<double, int64_t>> best;  // (objective, id), for the ensemble
  auto write_trial = [&](int64_t stage, int64_t seq, const nlohmann::json& params, const nlohmann::json& meta,
                         int64_t generation, std::vector<std::pair<int64_t, std::string>> parents, bool running,
                         TrialState outcome) -> Result<int64_t> {
    const size_t g = static_cast<size_t>(std::min_element(group_free.begin(), group_free.end()) - group_free.begin());
    const double start = group_free[g];
    const double dur = trial_s * (0.5 + rng.uniform());
    const double end = start + dur;
    group_free[g] = end + 0.05;
    store::TrialRow t;
    t.campaign_id = cid;
    t.stage_id = stage;
    t.seq = seq;
    t.params = params;
    t.meta = meta;
    t.created_at = start - 0.01;
    t.generation = generation;
    if (!parents.empty()) t.parent_trial_id = parents.front().first;
    HPCTUNE_ASSIGN(const int64_t id, db->insert_trial(t));
    for (const auto& [parent, relation] : parents) HPCTUNE_TRY(db->add_lineage(id, parent, relation));
    HPCTUNE_TRY(db->add_event(cid, "trial_created", id, 1, -1, nlohmann::json::object(), t.created_at));
    HPCTUNE_TRY(db->mark_assigned(id, 1, static_cast<int64_t>(g), 1, start));
    HPCTUNE_TRY(db->mark_running(id, 1, start + 0.01));
    const double objective = synthetic_detail::objective_of(params, rng);
    const int64_t reports = running ? reports_per_trial / 2
                                    : outcome == TrialState::kPruned ? std::max<int64_t>(1, reports_per_trial / 4)
                                                                     : reports_per_trial;
    for (int64_t s = 1; s <= reports; ++s) {
      const double frac = static_cast<double>(s) / static_cast<double>(std::max<int64_t>(1, reports_per_trial));
      const double v = objective * (1 - std::exp(-4 * frac)) / (1 - std::exp(-4.0));
      HPCTUNE_TRY(db->add_metrics(id, 1, s, {{"val_accuracy", v}, {"loss", 1 - v + 0.01 * rng.uniform()}},
                                  start + dur * frac));
    }
    if (!running) {
      nlohmann::json metrics = {{"val_accuracy", objective}, {"loss", 1 - objective}};
      // A transfer stage's trials report their held-out figure too: what the stage compares by.
      if (meta.contains("role")) metrics["test_accuracy"] = objective - 0.02;
      std::optional<double> obj = objective;
      std::string error;
      if (outcome == TrialState::kFailed) {
        metrics = nlohmann::json::object();
        obj.reset();
        error = "trainer exited with status 1: <img src=x onerror=alert(1)> =cmd|' /C calc'!A0";
      }
      HPCTUNE_ASSIGN(bool done, db->finish_trial(id, 1, outcome, metrics, obj, reports, error, end));
      (void)done;
      if (obj) best.emplace_back(*obj, id);
    }
    return id;
  };

  const int64_t population = std::max<int64_t>(1, o.population);
  for (int64_t i = 0; i < trials; ++i) {
    const int64_t generation = i / population;
    std::vector<std::pair<int64_t, std::string>> parents;
    if (generation > 0) {
      const int64_t prev_first = (generation - 1) * population;
      for (int k = 0; k < 2; ++k) {
        const int64_t pi = prev_first + static_cast<int64_t>(rng.uniform() * static_cast<double>(population)) % population;
        if (std::none_of(parents.begin(), parents.end(), [&](const auto& p) { return p.first == ids[static_cast<size_t>(pi)]; })) {
          parents.emplace_back(ids[static_cast<size_t>(pi)], "parent");
        }
      }
    }
    const bool running = i >= trials - o.running;
    const double u = rng.uniform();
    const TrialState outcome = u < o.failed_fraction                      ? TrialState::kFailed
                               : u < o.failed_fraction + o.pruned_fraction ? TrialState::kPruned
                                                                            : TrialState::kDone;
    nlohmann::json meta = {{"generation", generation}};
    auto written = write_trial(search_stage, i, synthetic_detail::params_of(rng), meta, generation, parents, running, outcome);
    HPCTUNE_ASSIGN(const int64_t id, std::move(written));
    ids.push_back(id);
    if ((i + 1) % std::max<int64_t>(1, o.batch) == 0) {
      HPCTUNE_TRY(db->commit());
      HPCTUNE_TRY(db->begin());
    }
  }
  if (o.with_stages) {
    std::sort(best.begin(), best.end(), std::greater<>());
    const double now = std::max(unix_now(), *std::max_element(group_free.begin(), group_free.end()));
    HPCTUNE_TRY(db->complete_stage(search_stage, nlohmann::json::object(), now));
    // The ensemble: a blend of the three best, recorded as workflow/ensemble_stage.h documents it.
    HPCTUNE_ASSIGN(const int64_t blend, db->create_stage(cid, "ensemble", "blend", nlohmann::json::object(), now));
    nlohmann::json members = nlohmann::json::array();
    for (size_t k = 0; k < 3 && k < best.size(); ++k) members.push_back({{"trial", best[k].second}, {"weight", 0.5 - 0.1 * k}});
    nlohmann::json best_single = best.empty() ? nlohmann::json() : nlohmann::json{{"trial", best[0].second}, {"val_accuracy", best[0].first},
                                                                               {"val_log_loss", 0.35}, {"test_accuracy", best[0].first - 0.01},
                                                                               {"test_log_loss", 0.36}};
    HPCTUNE_TRY(db->complete_stage(blend, {{"method", "greedy"}, {"candidates", 5}, {"skipped", 0}, {"retrained", 0},
                                           {"members", members}, {"val_accuracy", 0.97}, {"val_log_loss", 0.30},
                                           {"test_accuracy", 0.96}, {"test_log_loss", 0.31}, {"best_single", best_single},
                                           {"files", nlohmann::json::array()}}, now + 1));
    // Transfer: two targets, each followed by its baseline twin.
    HPCTUNE_ASSIGN(const int64_t transfer, db->create_stage(cid, "transfer", "transfer", nlohmann::json::object(), now));
    int64_t seq = 0;
    for (int k = 0; k < 2 && k < static_cast<int>(best.size()); ++k) {
      const int64_t target_seq = seq;
      nlohmann::json p = synthetic_detail::params_of(rng);
      HPCTUNE_TRY(write_trial(transfer, seq++, p, {{"role", "target"}, {"source", k}},
                              0, {{best[static_cast<size_t>(k)].second, "transfer_source"}}, false, TrialState::kDone)
                      );
      HPCTUNE_TRY(write_trial(transfer, seq++, p, {{"role", "baseline"}, {"baseline_of", target_seq}}, 0, {}, false,
                              TrialState::kDone)
                      );
    }
    HPCTUNE_TRY(db->complete_stage(transfer, {{"targets", 2}, {"baselines", 2}, {"compare_metric", "test_accuracy"}}, now + 2));
    // PBT: four members, then four that exploit them.
    HPCTUNE_ASSIGN(const int64_t pbt, db->create_stage(cid, "pbt", "pbt", nlohmann::json::object(), now));
    std::vector<int64_t> members_ids;
    for (int k = 0; k < 8; ++k) {
      std::vector<std::pair<int64_t, std::string>> parents;
      if (k >= 4) parents.emplace_back(members_ids[static_cast<size_t>(k - 4)], "exploit");
      auto written = write_trial(pbt, k, synthetic_detail::params_of(rng), {{"generation", k / 4}}, k / 4, parents, false,
                                 TrialState::kDone);
      HPCTUNE_ASSIGN(const int64_t id, std::move(written));
      members_ids.push_back(id);
    }
  }
  if (o.campaign_state != "running") HPCTUNE_TRY(db->set_campaign_state(cid, o.campaign_state, unix_now()));
  HPCTUNE_TRY(db->commit());
  return db->close();
}

}  // namespace hpctune::testing
