// A workflow campaign written straight into a store (no binary, no master) for the views of stages
// and lineage (issue 36, items 1 and 3): a search stage `tune`, a transfer stage `move` whose
// target carries the command kind's source keys, and a pbt stage `pop` whose member carries
// max_step and was exploited from a search trial. test_report reads it through report/, test_cli
// through `hpctune trials|trial|export`.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "store/store.h"
#include "trainers/internal_params.h"

namespace hpctune::testing {

struct LineageCampaign {
  int64_t tune_a = 0, tune_b = 0;  // the search's trials (val_accuracy 0.8 and 0.9)
  int64_t target = 0;              // the transfer target of tune_b (0.7)
  int64_t member = 0;              // the pbt member, exploited from tune_a (0.85)
  std::string checkpoint;          // the target's source checkpoint (an absolute path)
};

inline LineageCampaign write_lineage_campaign(const std::string& db) {
  using nlohmann::json;
  auto opened = store::Store::open(db);
  REQUIRE(opened.ok());
  auto& s = **opened;
  store::CampaignRow c;
  c.name = "lineage";
  c.seed = 5;
  c.created_at = 1000;
  c.config_json = json{{"objective", {{"metric", "val_accuracy"}, {"mode", "max"}}},
                       {"stages", json::array({{{"name", "tune"}, {"kind", "search"}, {"search", {{"algorithm", "random"}}}},
                                               {{"name", "move"}, {"kind", "transfer"}, {"from", "tune"}},
                                               {{"name", "pop"}, {"kind", "pbt"}}})}};
  auto campaign = s.create_campaign(c);
  REQUIRE(campaign.ok());
  double t = 1000;
  auto stage = [&](const std::string& kind, const std::string& name) {
    auto id = s.create_stage(*campaign, kind, name, json::object(), ++t);
    REQUIRE(id.ok());
    return *id;
  };
  auto trial = [&](int64_t stage_id, int64_t seq, const json& params, double value,
                   std::optional<int64_t> parent = std::nullopt) {
    store::TrialRow row;
    row.campaign_id = *campaign;
    row.stage_id = stage_id;
    row.seq = seq;
    row.params = params;
    row.parent_trial_id = parent;
    row.created_at = ++t;
    auto id = s.insert_trial(row);
    REQUIRE(id.ok());
    REQUIRE(s.mark_assigned(*id, 1, 0, 1, ++t).ok());
    REQUIRE(s.mark_running(*id, 1, ++t).ok());
    REQUIRE(s.finish_trial(*id, 1, store::TrialState::kDone, json{{"val_accuracy", value}}, value, 1, "", ++t).ok());
    return *id;
  };
  LineageCampaign out;
  const int64_t tune = stage("search", "tune");
  out.tune_a = trial(tune, 0, {{"lr", 0.1}}, 0.8);
  out.tune_b = trial(tune, 1, {{"lr", 0.2}}, 0.9);
  out.checkpoint = "/data/runs/lineage.db.trials/" + std::to_string(out.tune_b) + "/checkpoint";
  const int64_t move = stage("transfer", "move");
  out.target = trial(move, 0,
                     {{"lr", 0.2},
                      {trainers::kSourceCheckpointParam, out.checkpoint},
                      {trainers::kSourceTrialParam, out.tune_b}},
                     0.7, out.tune_b);
  REQUIRE(s.add_lineage(out.target, out.tune_b, "transfer_source").ok());
  const int64_t pop = stage("pbt", "pop");
  out.member = trial(pop, 0, {{"lr", 0.05}, {"momentum", 0.9}, {trainers::kMaxStepParam, 4}}, 0.85);
  REQUIRE(s.add_lineage(out.member, out.tune_a, "pbt_exploit").ok());
  return out;
}

}  // namespace hpctune::testing
