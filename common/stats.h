// Small summaries of samples.
#pragma once

#include <algorithm>
#include <vector>

namespace hpctune {

// The median of `values` (the mean of the middle two for an even count); 0 for none.
inline double median_of(std::vector<double> values) {
  if (values.empty()) return 0;
  const std::size_t m = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(m), values.end());
  const double upper = values[m];
  if (values.size() % 2) return upper;
  return 0.5 * (*std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(m)) + upper);
}

}  // namespace hpctune
