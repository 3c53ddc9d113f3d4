// How a pipeline of `stages` model ranks splits a Network's layers (gradient_engine.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "common/result.h"
#include "nn/network.h"

namespace hpctune::trainers {

// The estimated cost of a layer for balancing stages: multiply-adds of a layer with parameters
// (num_params x output positions: dense = its weights, conv = weights x output pixels) plus one per
// output element (activations, pooling, dropout, copies).
double layer_cost(const nn::Layer& layer);

// Stage boundaries b[0] = 0 < b[1] < ... < b[stages] = num_layers: stage s runs layers
// [b[s], b[s+1]), contiguous and non-empty, chosen to minimise the largest stage cost (exact, by
// dynamic programming). kInvalidArgument when stages < 1 or stages > num_layers.
Result<std::vector<size_t>> pipeline_stage_bounds(const nn::Network& network, int stages);

// Rows [begin, end) of part `index` of `count` rows cut into `parts` balanced parts: a data
// replica's shard of a global batch, a pipeline's micro-batch of a shard.
std::pair<int64_t, int64_t> part_rows(int64_t count, int64_t parts, int64_t index);

}  // namespace hpctune::trainers
