// GradientAverager: fused gradient averaging for data-parallel training (see collectives.h).
#include <algorithm>
#include <utility>

#include "collectives/collectives.h"

namespace hpctune::collectives {

GradientAverager::GradientAverager(Allreducer allreducer, size_t max_fused_bytes)
    : allreducer_(std::move(allreducer)), max_fused_floats_(max_fused_bytes / sizeof(float)) {}

Status GradientAverager::average(std::span<const std::span<float>> gradients) {
  // Buckets are runs of consecutive buffers; [first, i) is the open one, holding `floats` floats.
  size_t first = 0, floats = 0;
  for (size_t i = 0; i < gradients.size(); ++i) {
    const size_t n = gradients[i].size();
    if (n == 0) continue;
    if (n > max_fused_floats_) {  // too big to fuse: close the bucket, reduce this one in place
      HPCTUNE_TRY(reduce_bucket(gradients.subspan(first, i - first), floats));
      HPCTUNE_TRY(reduce_bucket(gradients.subspan(i, 1), n));
      first = i + 1;
      floats = 0;
      continue;
    }
    if (floats + n > max_fused_floats_) {
      HPCTUNE_TRY(reduce_bucket(gradients.subspan(first, i - first), floats));
      first = i;
      floats = 0;
    }
    floats += n;
  }
  return reduce_bucket(gradients.subspan(first), floats);
}

Status GradientAverager::reduce_bucket(std::span<const std::span<float>> bucket, size_t floats) {
  if (floats == 0) return Status::Ok();
  const auto non_empty = std::count_if(bucket.begin(), bucket.end(),
                                       [](std::span<float> buffer) { return !buffer.empty(); });
  ++allreduce_calls_;
  if (non_empty == 1) {
    for (std::span<float> buffer : bucket) {
      if (!buffer.empty()) return allreducer_.average(buffer);
    }
  }
  if (fused_.size() < floats) fused_.resize(floats);
  float* out = fused_.data();
  for (std::span<float> buffer : bucket) out = std::copy(buffer.begin(), buffer.end(), out);
  HPCTUNE_TRY(allreducer_.sum(std::span<float>(fused_.data(), floats)));
  const float ranks = static_cast<float>(allreducer_.size());
  const float* in = fused_.data();
  for (std::span<float> buffer : bucket) {
    for (float& value : buffer) value = *in++ / ranks;
  }
  return Status::Ok();
}

}  // namespace hpctune::collectives
