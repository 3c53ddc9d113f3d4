// The ask/tell loop of the tests that run a searcher without a campaign (test_search_algorithms,
// test_search_repeat_free): ask `batch` at a time until `budget` suggestions or the searcher is
// exhausted; a batch is told (completed, with `objective`'s value) only after the next one was
// asked, so that up to 2 x batch trials are pending at once, as in a campaign with free groups.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "search/searcher.h"

namespace hpctune::testing {

inline std::vector<search::Suggestion> ask_tell_budget(search::Searcher& s, std::size_t batch, int64_t budget,
                                                       const std::function<double(const search::Params&)>& objective) {
  std::vector<search::Suggestion> all, running;
  auto tell_all = [&] {
    for (const auto& x : running) s.tell({x.seq, x.params, search::Outcome::kCompleted, {objective(x.params)}, 1});
    running.clear();
  };
  for (int64_t round = 0; round < 4 * budget && static_cast<int64_t>(all.size()) < budget; ++round) {
    const auto want = std::min<std::size_t>(batch, static_cast<std::size_t>(budget) - all.size());
    auto sug = s.ask(want);
    REQUIRE_MESSAGE(sug.ok(), sug.error().to_string());
    if (sug->empty() && running.empty() && s.exhausted()) break;
    tell_all();
    running = *sug;
    all.insert(all.end(), sug->begin(), sug->end());
  }
  tell_all();
  return all;
}

}  // namespace hpctune::testing
