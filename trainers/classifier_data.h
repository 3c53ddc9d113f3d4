// The images a classifier trial uses (classifier_training.h, step 1): which classes, which rows
// validate, which train and which test. Pure: no network, no files.
//
// With `classes: [c0, c1, ...]` only those classes' images are used, training and test files alike,
// relabelled 0..k-1 in the order listed; a listed class the training file lacks is kInvalidArgument
// naming it. The validation split is a permutation of the kept training images seeded by data_seed
// (the campaign's, the same for every trial, so that trials' predictions line up row by row for
// ensembles), capped at max_train_samples, of which the first val_fraction validate (kept in
// increasing file order). The test rows are the first max_test_samples kept images of the test file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "trainers/idx_dataset.h"

namespace hpctune::trainers {

struct ClassifierSettings;

// The independent random streams of one classifier trial (derive_seed indices): the split from
// data_seed, the others from the trial's seed.
enum ClassifierStream : uint64_t { kSplitStream = 1, kInitStream = 2, kShuffleStream = 3, kDropoutStream = 4 };

struct ClassifierSplit {
  std::vector<int32_t> label_map;  // file label -> trained label 0..classes-1, or -1 for a class left out
  int64_t classes = 0;             // the output layer's units
  std::vector<int64_t> train;      // training rows, in the split's order (each epoch shuffles a copy)
  std::vector<int64_t> val;        // validation rows, increasing
  std::vector<int64_t> test;       // test rows, in file order
  int64_t trained_label(const Dataset& d, int64_t row) const {
    return label_map[static_cast<size_t>(d.labels[static_cast<size_t>(row)])];
  }
};

// The split of `data` under `s`; `who` prefixes the errors (kInvalidArgument: a label out of range,
// a class not in the data, fewer than 2 images, a val_fraction that leaves no training image).
Result<ClassifierSplit> split_classifier_data(const std::string& who, const ClassifierSettings& s,
                                              const ImageClassificationData& data);

// Copies the rows `idx[0..n)` of `d` into a contiguous batch `x`, with labels through the split's map.
// Inline, no prefetch thread: measured 0.11 ms for 128 x 784 floats against 3.3 ms for the 784-256-10
// MLP's step at 128 (2 threads; about 3%) and ~1 s for the default CNN's; a prefetch thread would
// compete with the compute threads for the same cores to hide at most those 3%.
void gather_rows(const Dataset& d, const ClassifierSplit& split, const int64_t* idx, int64_t n, float* x, int32_t* y);

// The trained labels of `rows` of `d` (what val_labels.npy and test_labels.npy hold).
std::vector<int64_t> trained_labels(const Dataset& d, const ClassifierSplit& split, const std::vector<int64_t>& rows);

}  // namespace hpctune::trainers
