// SearchSource: the search stage's TrialSource, a searcher and its early stopper (trial_source.h).
#include "scheduler/trial_source.h"

namespace hpctune::scheduler {

Result<std::vector<search::Suggestion>> SearchSource::ask(std::size_t n) {
  if (steps_spent()) return std::vector<search::Suggestion>{};
  return searcher_.ask(n);
}

}  // namespace hpctune::scheduler
