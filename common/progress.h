// A campaign's progress: its trials by state, the budget and the best trial so far. The master
// reports it live (scheduler::Scheduler::progress, run_master's progress callback); report/ reads
// the same from a store (report::progress_of) and draws the line `hpctune run` shows
// (report::progress_line). Here, header-only, so that report/ and the dashboard read it without
// linking the scheduler.
#pragma once

#include <cstdint>
#include <optional>

namespace hpctune {

struct Progress {
  int64_t done = 0, pruned = 0, failed = 0, running = 0, queued = 0, interrupted = 0, paused = 0;
  int64_t created = 0, max_trials = 0, workers = 0;
  std::optional<double> best;
  int64_t best_trial = 0;
};

}  // namespace hpctune
