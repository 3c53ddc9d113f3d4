// portfolio: several searchers on one campaign that share every suggestion and every observation;
// each new suggestion comes from one member, chosen by how well that member's own suggestions did.
// `auto` runs one (bayesian with a random-forest surrogate, and tpe) on spaces mostly of unordered
// choices (auto_search.h says why).
//
// Schedule (a function of the history only, so it is the same after a restart):
//   1. the first member's start-up design (`design` suggestions, bayesian's n_initial);
//   2. the members take turns until each has made `warmup` suggestions of its own;
//   3. then the leader (the member whose own suggestions of steps 2-3 reached the lowest loss;
//      ties to the earlier member) makes 2 of every 3 suggestions, the others the third in turn.
// Every member is told every observation and adopts every other member's suggestion
// (Searcher::adopt): no member repeats another's point, and a batch spreads over the running
// trials of all members (the GP's fantasies, TPE's constant liar). Each suggestion's meta says
// which member made it ({"member": "tpe", "turn": "design" | "warmup" | "lead" | "other"});
// restore() reads it back. One objective only (the leader is chosen by its loss).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "search/searcher.h"

namespace hpctune::search {

struct PortfolioMember {
  std::string name;       // how suggestions' meta, the state and the notes call it
  std::string algorithm;  // a registered algorithm
  nlohmann::json settings = nlohmann::json::object();  // its settings; empty: its defaults
};

struct PortfolioOptions {
  std::vector<PortfolioMember> members;
  int64_t design = 0;                // suggestions of the first member before the turns start
  int64_t warmup = 4;                // suggestions of each member before a leader is chosen
};

Result<std::unique_ptr<Searcher>> make_portfolio(const SearchSpec& spec, const PortfolioOptions& options);

}  // namespace hpctune::search
