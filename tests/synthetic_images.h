// Synthetic image classification data for the trainer tests: each class a random prototype image,
// each sample its class's prototype plus Gaussian noise, clamped to [0, 1]. Easy to learn, small,
// and the same for the same arguments.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/rng.h"
#include "trainers/idx_dataset.h"

namespace hpctune::testing {

// Class prototypes plus noise, side x side pixels in [0, 1].
inline trainers::ImageClassificationData synthetic(int64_t train, int64_t test, int64_t side = 8, int classes = 4, uint64_t seed = 7) {
  Rng rng(seed);
  std::vector<std::vector<float>> proto(static_cast<size_t>(classes), std::vector<float>(static_cast<size_t>(side * side)));
  for (auto& p : proto)
    for (auto& v : p) v = static_cast<float>(rng.uniform());
  auto make = [&](int64_t count) {
    trainers::Dataset d;
    d.count = count, d.rows = side, d.cols = side;
    for (int64_t i = 0; i < count; ++i) {
      const int c = static_cast<int>(rng.below(static_cast<uint64_t>(classes)));
      d.labels.push_back(c);
      for (float v : proto[static_cast<size_t>(c)]) d.images.push_back(std::clamp(v + static_cast<float>(rng.normal(0.0, 0.35)), 0.0f, 1.0f));
    }
    return d;
  };
  trainers::ImageClassificationData data;
  data.train = make(train);
  data.test = make(test);
  data.num_classes = classes;
  return data;
}

}  // namespace hpctune::testing
