// The wall clock as the store records it: seconds since the Unix epoch, as a double.
#pragma once

#include <chrono>

namespace hpctune {

// Wall time for timestamps that are written down (the store, events). Durations and deadlines use
// std::chrono::steady_clock instead, which does not jump when the system clock is set.
inline double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace hpctune
