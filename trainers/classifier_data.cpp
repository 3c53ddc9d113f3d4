#include "trainers/classifier_data.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "common/rng.h"
#include "trainers/classifier_training.h"

namespace hpctune::trainers {

namespace {

void shuffle(std::vector<int64_t>& v, Rng& rng) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng.below(i)]);
}

// label_map and classes from the `classes` setting.
Status map_classes(const std::string& who, const ClassifierSettings& s, const ImageClassificationData& data,
                   ClassifierSplit& out) {
  out.label_map.assign(static_cast<size_t>(std::max(data.num_classes, 0)), -1);
  out.classes = data.num_classes;
  if (s.classes.empty()) {
    std::iota(out.label_map.begin(), out.label_map.end(), 0);
    return Status::Ok();
  }
  std::vector<int64_t> per_class(out.label_map.size(), 0);
  for (int32_t label : data.train.labels) ++per_class[static_cast<size_t>(label)];
  for (size_t i = 0; i < s.classes.size(); ++i) {
    const int64_t c = s.classes[i];
    if (c < 0 || c >= data.num_classes || per_class[static_cast<size_t>(c)] == 0) {
      return err(Errc::kInvalidArgument, who + ": setting 'classes': class " + std::to_string(c) +
                                             " is not in the data (its training file has classes 0.." +
                                             std::to_string(data.num_classes - 1) +
                                             (c >= 0 && c < data.num_classes ? ", but no image of class " + std::to_string(c) : std::string()) + ")");
    }
    out.label_map[static_cast<size_t>(c)] = static_cast<int32_t>(i);
  }
  out.classes = static_cast<int64_t>(s.classes.size());
  return Status::Ok();
}

}  // namespace

Result<ClassifierSplit> split_classifier_data(const std::string& who, const ClassifierSettings& s,
                                              const ImageClassificationData& data) {
  for (const auto* d : {&data.train, &data.test}) {
    for (int32_t label : d->labels) {
      if (label < 0 || label >= data.num_classes) return err(Errc::kInvalidArgument, who + ": a label is out of range");
    }
  }
  ClassifierSplit out;
  HPCTUNE_TRY(map_classes(who, s, data, out));
  auto kept = [&](const Dataset& d, int64_t i) { return out.trained_label(d, i) >= 0; };

  // Validation split, over the training images of the kept classes (in file order).
  std::vector<int64_t> perm;
  perm.reserve(static_cast<size_t>(data.train.count));
  for (int64_t i = 0; i < data.train.count; ++i)
    if (kept(data.train, i)) perm.push_back(i);
  const int64_t available = static_cast<int64_t>(perm.size());
  if (available < 2) return err(Errc::kInvalidArgument, who + ": the training set needs at least 2 images");
  // From the campaign's data seed, not the trial's: every trial holds out the same images.
  Rng split_rng(derive_seed(s.data_seed, kSplitStream));
  shuffle(perm, split_rng);
  const int64_t pool = s.max_train_samples > 0 ? std::min(s.max_train_samples, available) : available;
  const int64_t n_val = std::max<int64_t>(1, std::llround(s.val_fraction * static_cast<double>(pool)));
  if (n_val >= pool) {
    return err(Errc::kInvalidArgument, who + ": setting 'val_fraction' = " + std::to_string(s.val_fraction) +
                                           " leaves no training images out of " + std::to_string(pool));
  }
  out.val.assign(perm.begin(), perm.begin() + n_val);
  out.train.assign(perm.begin() + n_val, perm.begin() + pool);
  std::sort(out.val.begin(), out.val.end());  // for memory locality; evaluation order is fixed either way
  for (int64_t i = 0; i < data.test.count; ++i) {
    if (s.max_test_samples > 0 && static_cast<int64_t>(out.test.size()) >= s.max_test_samples) break;
    if (kept(data.test, i)) out.test.push_back(i);
  }
  return out;
}

void gather_rows(const Dataset& d, const ClassifierSplit& split, const int64_t* idx, int64_t n, float* x, int32_t* y) {
  const size_t f = static_cast<size_t>(d.features());
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(x + static_cast<size_t>(i) * f, d.image(idx[i]), f * sizeof(float));
    y[i] = static_cast<int32_t>(split.trained_label(d, idx[i]));
  }
}

std::vector<int64_t> trained_labels(const Dataset& d, const ClassifierSplit& split, const std::vector<int64_t>& rows) {
  std::vector<int64_t> out(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) out[i] = split.trained_label(d, rows[i]);
  return out;
}

}  // namespace hpctune::trainers
