// The classifier's data split (trainers/classifier_data.h): pure, so checked row by row.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "tests/synthetic_images.h"
#include "trainers/classifier_data.h"
#include "trainers/classifier_training.h"

using namespace hpctune;
using namespace hpctune::trainers;

namespace {

ClassifierSettings settings(uint64_t data_seed, double val_fraction = 0.25, int64_t max_train = 0, int64_t max_test = 0) {
  ClassifierSettings s;
  s.data_seed = data_seed;
  s.val_fraction = val_fraction;
  s.max_train_samples = max_train;
  s.max_test_samples = max_test;
  return s;
}

}  // namespace

TEST_CASE("the split: disjoint train and validation rows, increasing validation rows, the sizes the settings ask") {
  const auto data = testing::synthetic(200, 50);
  auto split = split_classifier_data("mlp trainer", settings(3, 0.25, 120, 30), data);
  REQUIRE(split.ok());
  CHECK(split->classes == 4);
  CHECK(split->val.size() == 30);    // 0.25 x 120
  CHECK(split->train.size() == 90);  // the rest of the 120
  CHECK(std::is_sorted(split->val.begin(), split->val.end()));
  std::set<int64_t> seen(split->val.begin(), split->val.end());
  for (int64_t r : split->train) CHECK(seen.insert(r).second);  // no row both trains and validates
  CHECK(split->test.size() == 30);
  for (size_t i = 0; i < split->test.size(); ++i) CHECK(split->test[i] == static_cast<int64_t>(i));  // the first, in file order
}

TEST_CASE("the split depends on data_seed only: the same rows for every trial of a campaign, others for another data_seed") {
  const auto data = testing::synthetic(200, 20);
  auto a = split_classifier_data("mlp trainer", settings(3), data);
  auto b = split_classifier_data("mlp trainer", settings(3), data);
  auto c = split_classifier_data("mlp trainer", settings(4), data);
  REQUIRE((a.ok() && b.ok() && c.ok()));
  CHECK(a->val == b->val);
  CHECK(a->train == b->train);
  CHECK(a->val != c->val);
}

TEST_CASE("classes: only the listed classes, relabelled in the order listed, in training and test rows alike") {
  const auto data = testing::synthetic(300, 80);
  ClassifierSettings s = settings(1, 0.2);
  s.classes = {3, 1};
  auto split = split_classifier_data("cnn trainer", s, data);
  REQUIRE(split.ok());
  CHECK(split->classes == 2);
  CHECK(split->label_map == std::vector<int32_t>{-1, 1, -1, 0});
  for (const auto* rows : {&split->train, &split->val}) {
    for (int64_t r : *rows) {
      const int32_t file_label = data.train.labels[static_cast<size_t>(r)];
      CHECK((file_label == 1 || file_label == 3));
    }
  }
  const std::vector<int64_t> test_labels = trained_labels(data.test, *split, split->test);
  for (size_t i = 0; i < split->test.size(); ++i) {
    const int32_t file_label = data.test.labels[static_cast<size_t>(split->test[i])];
    CHECK(test_labels[i] == (file_label == 3 ? 0 : 1));
  }
  // gather_rows copies the images and the trained labels.
  std::vector<float> x(static_cast<size_t>(2 * data.train.features()));
  std::vector<int32_t> y(2);
  gather_rows(data.train, *split, split->train.data(), 2, x.data(), y.data());
  CHECK(x[0] == *data.train.image(split->train[0]));
  CHECK(y[1] == split->trained_label(data.train, split->train[1]));
}

TEST_CASE("the split's errors name the setting: a class not in the data, a val_fraction that leaves nothing to train") {
  const auto data = testing::synthetic(40, 10);
  ClassifierSettings s = settings(1);
  s.classes = {7};
  auto missing = split_classifier_data("mlp trainer", s, data);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().message().find("setting 'classes': class 7 is not in the data") != std::string::npos);
  auto all_val = split_classifier_data("mlp trainer", settings(1, 0.999), data);
  REQUIRE_FALSE(all_val.ok());
  CHECK(all_val.error().message().find("setting 'val_fraction'") != std::string::npos);
  auto bad = data;
  bad.train.labels[0] = 9;
  auto out_of_range = split_classifier_data("mlp trainer", settings(1), bad);
  REQUIRE_FALSE(out_of_range.ok());
  CHECK(out_of_range.error().message().find("a label is out of range") != std::string::npos);
}
