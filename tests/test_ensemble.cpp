// ensemble/: greedy selection, top k and fitted weights on hand-made prediction matrices whose
// answers are worked out by hand, and the blend as the weighted average of its members.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "ensemble/ensemble.h"

using namespace hpctune;
using namespace hpctune::ensemble;

namespace {

// Two classes, four rows, every label 0: a member is its probability of class 0 on each row.
Probabilities member(std::vector<double> p0) {
  Probabilities p{p0.size(), 2, {}};
  for (double x : p0) {
    p.values.push_back(x);
    p.values.push_back(1 - x);
  }
  return p;
}

const std::vector<int> kLabels = {0, 0, 0, 0};
// A is right and sure on rows 0-1 and wrong on 2-3; B the other way round (and a little better
// overall); C knows nothing. Log losses: A 0.6547, B 0.5776, C 0.6931.
const std::vector<Probabilities> kMembers = {member({0.9, 0.9, 0.3, 0.3}), member({0.35, 0.35, 0.9, 0.9}),
                                             member({0.5, 0.5, 0.5, 0.5})};

}  // namespace

TEST_CASE("log loss and accuracy of single members") {
  CHECK(log_loss(kMembers[0], kLabels) == doctest::Approx(-(2 * std::log(0.9) + 2 * std::log(0.3)) / 4));
  CHECK(log_loss(kMembers[1], kLabels) == doctest::Approx(0.5776).epsilon(1e-3));
  CHECK(log_loss(kMembers[2], kLabels) == doctest::Approx(std::log(2.0)));
  CHECK(accuracy(kMembers[0], kLabels) == 0.5);
  CHECK(accuracy(kMembers[1], kLabels) == 0.5);
}

// Issue 36, item 8: the best single member by the loss the blend minimises, not by accuracy.
TEST_CASE("best member: the lowest log loss (MSE for regression), ties by the tie-break, then the lower index") {
  CHECK(best_member(kMembers, kLabels) == 1);  // B: 0.5776, below A's 0.6547 and C's 0.6931
  // D is right on 3 rows of 4 (accuracy 0.75) but sure and wrong on the last; E right on 2 (0.5)
  // and never sure: E has the lower log loss (0.7136 against 1.2303).
  const std::vector<Probabilities> de = {member({0.9, 0.9, 0.9, 0.01}), member({0.6, 0.6, 0.4, 0.4})};
  CHECK(accuracy(de[0], kLabels) > accuracy(de[1], kLabels));
  CHECK(best_member(de, kLabels) == 1);
  // Regression: the lowest mean squared error.
  const Probabilities targets{2, 1, {1.0, 2.0}};
  CHECK(best_member({Probabilities{2, 1, {1.5, 2.5}}, Probabilities{2, 1, {1.1, 2.1}}, Probabilities{2, 1, {0, 0}}},
                    targets) == 1);
  // Ties (within 1e-12) go to the higher tie-break, then the lower index; NaN losses never win.
  CHECK(lowest_loss({0.5, 0.5, 0.7}) == 0);
  CHECK(lowest_loss({0.5, 0.5 + 1e-15, 0.7}, {0.1, 0.9, 1.0}) == 1);
  CHECK(lowest_loss({0.5, 0.5, 0.4}, {0.1, 0.9, 0.0}) == 2);
  CHECK(lowest_loss({std::nan(""), 0.9}) == 1);
  CHECK(lowest_loss({}) == 0);
}

TEST_CASE("greedy selection picks B first (lowest loss), then A (the member that complements it best)") {
  // After B, adding A gives 0.4904, B again 0.5776, C 0.6060: the answer is A and B, half each.
  auto w = greedy_selection(kMembers, kLabels, {.max_size = 2});
  REQUIRE(w.ok());
  CHECK(*w == std::vector<double>{0.5, 0.5, 0.0});
  auto one = greedy_selection(kMembers, kLabels, {.max_size = 1});
  REQUIRE(one.ok());
  CHECK(*one == std::vector<double>{0.0, 1.0, 0.0});
  // The blend of A and B is right on every row where each alone is right on half.
  auto blended = blend(kMembers, *w);
  REQUIRE(blended.ok());
  CHECK(accuracy(*blended, kLabels) == 1.0);
  CHECK(log_loss(*blended, kLabels) < log_loss(kMembers[1], kLabels));
  // With bagging the weights are still a distribution, and the same seed gives the same weights.
  auto b1 = greedy_selection(kMembers, kLabels, {.max_size = 4, .bags = 5, .seed = 3});
  auto b2 = greedy_selection(kMembers, kLabels, {.max_size = 4, .bags = 5, .seed = 3});
  REQUIRE(b1.ok());
  REQUIRE(b2.ok());
  CHECK(*b1 == *b2);
  double total = 0;
  for (double x : *b1) total += x;
  CHECK(total == doctest::Approx(1.0));
}

TEST_CASE("the ensemble's probabilities are the weighted average of its members'") {
  const std::vector<double> weights = {0.2, 0.5, 0.3};
  auto p = blend(kMembers, weights);
  REQUIRE(p.ok());
  for (std::size_t i = 0; i < p->values.size(); ++i) {
    double want = 0;
    for (std::size_t m = 0; m < kMembers.size(); ++m) want += weights[m] * kMembers[m].values[i];
    CHECK(p->values[i] == doctest::Approx(want).epsilon(1e-12));
  }
  CHECK_FALSE(blend(kMembers, {0.5, 0.5}).ok());        // a weight per member
  CHECK_FALSE(blend(kMembers, {0.5, 0.6, -0.1}).ok());  // non-negative
  CHECK_FALSE(blend(kMembers, {0.5, 0.2, 0.2}).ok());   // summing to 1
}

TEST_CASE("top k: equal weights on the k members of lowest log loss") {
  auto one = top_k(kMembers, kLabels, 1);
  REQUIRE(one.ok());
  CHECK(*one == std::vector<double>{0.0, 1.0, 0.0});
  auto two = top_k(kMembers, kLabels, 2);
  REQUIRE(two.ok());
  CHECK(*two == std::vector<double>{0.5, 0.5, 0.0});
  auto all = top_k(kMembers, kLabels, 10);  // more than there are: all of them
  REQUIRE(all.ok());
  CHECK((*all)[2] == doctest::Approx(1.0 / 3));
}

TEST_CASE("fitted weights minimize log loss on the simplex") {
  auto w = fit_weights(kMembers, kLabels);
  REQUIRE(w.ok());
  double total = 0;
  for (double x : *w) {
    CHECK(x >= 0);
    total += x;
  }
  CHECK(total == doctest::Approx(1.0));
  auto p = blend(kMembers, *w);
  REQUIRE(p.ok());
  const double fitted = log_loss(*p, kLabels);
  // Better than any member, than equal weights and than greedy's A+B; by symmetry of the losses
  // the optimum mixes A and B and gives C (dominated by their mix) almost nothing.
  for (const auto& m : kMembers) CHECK(fitted < log_loss(m, kLabels));
  CHECK(fitted <= log_loss(*blend(kMembers, {1.0 / 3, 1.0 / 3, 1.0 / 3}), kLabels) + 1e-12);
  CHECK(fitted <= log_loss(*blend(kMembers, {0.5, 0.5, 0.0}), kLabels) + 1e-9);
  CHECK((*w)[2] < 0.05);
}

TEST_CASE("members that do not line up are refused, naming the member") {
  auto short_member = member({0.5, 0.5, 0.5});
  auto r = greedy_selection({kMembers[0], short_member}, kLabels, {});
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message().find("member 1 is 3 x 2") != std::string::npos);
  CHECK_FALSE(top_k(kMembers, {0, 0, 0, 2}, 1).ok());  // a label that is not a class
  CHECK_FALSE(fit_weights({}, kLabels).ok());
  auto bad = kMembers[0];
  bad.values[0] = NAN;
  CHECK_FALSE(check_members({bad}, kLabels).ok());
}

// Regression: three rows, two outputs. A errs by e, B by -2e, C by +3 everywhere. The blend
// (2A + B) / 3 is exactly the targets: MSE 0 with weights 2/3, 1/3, 0.
namespace {
const std::vector<double> kTargets = {1, 2, 3, 4, 5, 6};
const std::vector<double> kErr = {0.1, -0.2, 0.3, 0.1, -0.1, 0.2};
Probabilities outputs(double err_factor, double offset) {
  Probabilities p{3, 2, {}};
  for (std::size_t i = 0; i < kTargets.size(); ++i) p.values.push_back(kTargets[i] + err_factor * kErr[i] + offset);
  return p;
}
const Probabilities kY{3, 2, kTargets};
const std::vector<Probabilities> kRegression = {outputs(1, 0), outputs(-2, 0), outputs(0, 3)};
}  // namespace

TEST_CASE("regression: mean squared error, and greedy, top k and fitted weights by it") {
  const double e2 = (0.01 + 0.04 + 0.09 + 0.01 + 0.01 + 0.04) / 6;  // mean of e^2: 0.0333
  CHECK(mean_squared_error(kRegression[0], kY) == doctest::Approx(e2).epsilon(1e-12));
  CHECK(mean_squared_error(kRegression[1], kY) == doctest::Approx(4 * e2).epsilon(1e-12));
  CHECK(mean_squared_error(kRegression[2], kY) == doctest::Approx(9.0).epsilon(1e-12));
  // Greedy: A (lowest MSE); then B (A+B errs by -e/2: e2/4, A+A e2, A+C ~2.25); then A (2A+B: 0).
  auto g = greedy_selection(kRegression, kY, {.max_size = 3});
  REQUIRE(g.ok());
  CHECK((*g)[0] == doctest::Approx(2.0 / 3).epsilon(1e-12));
  CHECK((*g)[1] == doctest::Approx(1.0 / 3).epsilon(1e-12));
  CHECK((*g)[2] == 0.0);
  CHECK(mean_squared_error(*blend(kRegression, *g), kY) == doctest::Approx(0.0).epsilon(1e-12));
  auto g2 = greedy_selection(kRegression, kY, {.max_size = 2});
  REQUIRE(g2.ok());
  CHECK(*g2 == std::vector<double>{0.5, 0.5, 0.0});
  CHECK(mean_squared_error(*blend(kRegression, *g2), kY) == doctest::Approx(e2 / 4).epsilon(1e-12));
  // Top k by MSE: A; then A and B.
  CHECK(*top_k(kRegression, kY, 1) == std::vector<double>{1.0, 0.0, 0.0});
  CHECK(*top_k(kRegression, kY, 2) == std::vector<double>{0.5, 0.5, 0.0});
  // Fitted on the simplex: 2/3, 1/3 and nothing for C; the blend's MSE ~0.
  auto w = fit_weights(kRegression, kY);
  REQUIRE(w.ok());
  CHECK((*w)[0] == doctest::Approx(2.0 / 3).epsilon(1e-3));
  CHECK((*w)[1] == doctest::Approx(1.0 / 3).epsilon(1e-3));
  CHECK((*w)[2] < 1e-3);
  CHECK(mean_squared_error(*blend(kRegression, *w), kY) < 1e-6);
}

TEST_CASE("regression: members or targets of another shape, or not finite, are refused naming the member") {
  Probabilities short_member{2, 2, {1, 2, 3, 4}};
  auto r = greedy_selection({kRegression[0], short_member}, kY, {});
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message().find("member 1 is 2 x 2, not 3 x 2 like the targets") != std::string::npos);
  auto bad = kRegression[0];
  bad.values[3] = INFINITY;
  CHECK(check_members({kRegression[1], bad}, kY).error().message() == "member 1 holds a value that is not finite");
  CHECK_FALSE(top_k(kRegression, Probabilities{0, 2, {}}, 1).ok());
  CHECK_FALSE(fit_weights({}, kY).ok());
}
