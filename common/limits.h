// Limits shared by libraries that do not depend on each other.
#pragma once

#include <cstdint>

namespace hpctune {

// The largest message the master and the workers exchange (protocol::kMaxMessageBytes, which
// transport sockets enforce); here so that the config can check that a trial's assign fits
// without depending on the protocol library.
inline constexpr int64_t kMaxMessageBytes = 4 << 20;

}  // namespace hpctune

// The deepest nesting of JSON that hpctune reads back (from its database): the same as the
// protocol's decoder (protocol::kMaxDepth) and the config's (config/yaml_tree.cpp kMaxDepth). Deeper values
// are refused before they are parsed; copying or printing them would recurse that deep.
inline constexpr int kMaxJsonDepth = 64;

// The largest JSON value hpctune reads back from its database: four times the largest config
// (config::kMaxConfigBytes, 16 MiB) and sixteen times the largest message (kMaxMessageBytes), which
// is what the store's JSON columns are written from; more is a damaged or crafted database.
inline constexpr int64_t kMaxStoredJsonBytes = int64_t{64} << 20;
