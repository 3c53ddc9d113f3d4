// What the workflow stages' tests share (test_workflow_stages: ensemble, transfer and pbt, each
// stage driven directly through begin/ask/on_report/finish, no sockets): a check that fails the
// test on an error value, a campaign in a fresh store, a stage row, a numeric space parameter.
#pragma once

#include <doctest/doctest.h>

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "search/space.h"
#include "store/store.h"

namespace hpctune::testing {

template <typename R>
void require_ok(const R& r) {
  if (!r.ok()) FAIL(r.error().to_string());
}

// A store at `path` holding one campaign named `name` with `seed`; `campaign` is its id.
struct StageStore {
  std::unique_ptr<store::Store> db;
  int64_t campaign = 0;

  StageStore(const std::string& path, const std::string& name, uint64_t seed, double created_at = 100) {
    auto opened = store::Store::open(path);
    require_ok(opened);
    db = std::move(opened).value();
    store::CampaignRow c;
    c.name = name;
    c.config_text = "name: " + name + "\n";
    c.seed = seed;
    c.created_at = created_at;
    auto id = db->create_campaign(c);
    require_ok(id);
    campaign = *id;
  }

  int64_t add_stage(const std::string& kind, const std::string& name, double t = 100) {
    auto id = db->create_stage(campaign, kind, name, nlohmann::json::object(), t);
    require_ok(id);
    return *id;
  }
};

inline search::ParamSpec numeric(const std::string& name, search::ParamType type, double low, double high,
                                 bool log = false) {
  search::ParamSpec p;
  p.name = name;
  p.type = type;
  p.low = low;
  p.high = high;
  p.log = log;
  return p;
}

}  // namespace hpctune::testing
