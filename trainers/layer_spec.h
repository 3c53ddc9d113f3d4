// A network's layer as a config describes it (the cnn's trainer.layers and its blocks), and the one
// parser of that form. It lives in the trainer catalog (common/ only) so that `hpctune validate`
// (config/, through the cnn kind's TrainerCapabilities::value_problem) and the network that is built
// from it (nn/network.h: Network::create; the trainers) read a layer the same way.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace hpctune::trainers {

// One layer of a network as the config describes it. Kinds and their fields:
//   dense    units (>= 1), activation (none|relu|tanh|sigmoid, default relu)
//   conv     filters (>= 1), kernel (odd, >= 1), stride (default 1), padding (same|valid, default
//            same), activation (default relu)                        -- oneDNN convolution
//   maxpool  size (>= 2), stride (default = size)                    -- oneDNN pooling
//   dropout  rate in [0, 1)                                          -- inverted dropout
// The output layer (dense, `classes` units, no activation) is appended by Network::create().
struct LayerSpec {
  std::string kind;
  int64_t units = 0;
  std::string activation = "relu";
  int64_t filters = 0;
  int64_t kernel = 0;
  int64_t stride = 0;  // 0: the kind's default
  std::string padding = "same";
  int64_t size = 0;
  double rate = 0.0;
};

// What a layer map looks like, every kind (for messages).
inline constexpr const char* kLayerSpecForms =
    "{kind: conv, filters, kernel, stride, padding, activation} | {kind: maxpool, size, stride} | "
    "{kind: dense, units, activation} | {kind: dropout, rate}";

// What is wrong with one layer map: the field ("" for the entry as a whole: not a map) and what it
// must be ("missing (required for kind conv)"), with the form of its kind or of every kind in `form`.
struct LayerSpecProblem {
  std::string field;
  std::string what;
  std::string form;
};

// Reads one layer map into `out`; the first problem, or nullopt when it is a layer.
std::optional<LayerSpecProblem> read_layer_spec(const nlohmann::json& item, LayerSpec& out);

// Parses a config list of layers ([{kind: conv, filters: 32, kernel: 5}, {kind: maxpool, size: 2},
// ...]); kInvalidArgument naming the item index and field ("layers[2].kernel: ...").
Result<std::vector<LayerSpec>> parse_layer_specs(const nlohmann::json& list);

}  // namespace hpctune::trainers
