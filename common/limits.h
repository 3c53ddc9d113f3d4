// Limits shared by libraries that do not depend on each other.
#pragma once

#include <cstdint>

namespace hpctune {

// The largest message the master and the workers exchange (protocol::kMaxMessageBytes, which
// transport sockets enforce); here so that the config can check that a trial's assign fits
// without depending on the protocol library.
inline constexpr int64_t kMaxMessageBytes = 4 << 20;

}  // namespace hpctune
