// The master's clock: monotonic time points for every deadline and duration, and the unix seconds
// the store records, derived from those same time points.
//
// Nothing on the master side reads the real clock itself: the driver (run_master) passes the wall
// clock's `now` into every call, and a test or a simulator passes a manual one. Timestamps written
// to the store are WallClock::unix_at(now), so on a manual clock they are simulated too.
#pragma once

#include <chrono>

#include "common/clock.h"

namespace hpctune::scheduler {

using Clock = std::chrono::steady_clock;

// Anchors the monotonic clock to unix seconds: `at` stands for `unix_s`.
struct WallClock {
  Clock::time_point at{};
  double unix_s = 0;

  // The real clocks, read once.
  static WallClock real() { return {Clock::now(), unix_now()}; }
  double unix_at(Clock::time_point t) const { return unix_s + std::chrono::duration<double>(t - at).count(); }
};

}  // namespace hpctune::scheduler
