// bench/search_problems.cpp's real tables (issue 38): a table's `# space:` line types its parameters
// (ordered, unordered, conditional), the lookup is one seed's value drawn per evaluation, the truth
// and the optimum are the means, a table that is not the full grid is refused with its place; and
// every table in bench/data/real-tables/ loads.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "bench/search_problems.h"

using namespace hpctune;
using nlohmann::json;

namespace {

namespace fs = std::filesystem;

// A table of a conditional SVM-like grid: kernel {linear, rbf} x C {0.1, 1} x gamma {0.01, 0.1} if rbf
// = 2 + 4 = 6 configurations, 3 seeds each; `rows` replaces the rows when not empty.
std::string write_table(const fs::path& dir, const std::string& id, const std::string& rows = "") {
  fs::create_directories(dir / "real-tables");
  std::ofstream f(dir / "real-tables" / (id + ".csv"));
  f << "# made by bench/make-search-tables --tables " << id << " --seeds 1,2,3 at commit 0: SVC on nothing, score "
    << "accuracy; grid kernel x C x gamma: 6 configurations x 3 seeds, 1 CPU s, 1 s wall\n"
    << R"(# space: [{"name":"kernel","values":["linear","rbf"],"ordered":false},{"name":"C","values":[0.1,1.0],"ordered":true},)"
    << R"({"name":"gamma","values":[0.01,0.1],"ordered":true,"when":{"parent":"kernel","values":["rbf"]}}])" << "\n"
    << "kernel,C,gamma,val_score_mean,val_score_seed1,val_score_seed2,val_score_seed3,test_score_seed1,"
       "test_score_seed2,test_score_seed3,failed_seeds,fit_cpu_seconds_mean\n";
  f << (rows.empty() ? "linear,0.1,,0.800000,0.700000,0.800000,0.900000,0.8,0.8,0.8,0,0.01\n"
                       "linear,1.0,,0.850000,0.850000,0.850000,0.850000,0.8,0.8,0.8,0,0.01\n"
                       "rbf,0.1,0.01,0.600000,0.600000,0.600000,0.600000,0.6,0.6,0.6,0,0.01\n"
                       "rbf,0.1,0.1,0.700000,0.700000,0.700000,0.700000,0.7,0.7,0.7,0,0.01\n"
                       "rbf,1.0,0.01,0.900000,0.880000,0.900000,0.920000,0.9,0.9,0.9,0,0.01\n"
                       "rbf,1.0,0.1,0.500000,0.500000,0.500000,0.500000,0.5,0.5,0.5,1,0.01\n"
                     : rows);
  return (dir / "fashion_mlp_table.csv").string();  // make_problem finds real-tables/ beside it
}

fs::path temp_dir(const char* name) {
  const fs::path dir = fs::temp_directory_path() / (std::string("hpctune-test-real-tables-") + name);
  fs::remove_all(dir);
  return dir;
}

}  // namespace

TEST_CASE("a real table: typed by its space line, one seed's value per evaluation, the mean as truth") {
  const fs::path dir = temp_dir("typed");
  const std::string id = "real-svm-digits";  // an id of the suite, read from the test's folder
  auto made = bench::make_problem(id, write_table(dir, id));
  REQUIRE_MESSAGE(made.ok(), made.error().message());
  const bench::Problem& p = *made;
  CHECK(p.kind == "real-table");
  CHECK(p.dim == 3);
  CHECK(p.part == bench::problem_part(id));
  CHECK(p.definition["points_in_space"] == 6);
  const auto& specs = p.space.params();
  REQUIRE(specs.size() == 3);
  CHECK(specs[0].name == "kernel");
  CHECK_FALSE(specs[0].ordered);
  CHECK(specs[1].ordered);
  CHECK(specs[1].choices == std::vector<json>{0.1, 1.0});
  REQUIRE(specs[2].when.has_value());
  CHECK(specs[2].when->parent == "kernel");
  CHECK(specs[2].when->values == std::vector<json>{"rbf"});
  // The optimum: the best mean (rbf, C 1, gamma 0.01: 1 - 0.9), not the best single seed (0.92).
  CHECK(p.optimum == doctest::Approx(0.1));
  CHECK(p.definition["argmin"] == json{{"kernel", "rbf"}, {"C", 1.0}, {"gamma", 0.01}});
  const search::Params linear = {{"kernel", "linear"}, {"C", 0.1}};
  CHECK(p.eval(linear) == doctest::Approx(0.2));
  CHECK(p.truth(linear) == doctest::Approx(0.2));
  // draw: one of the three seeds' errors (0.3, 0.2, 0.1), each about a third of the time.
  Rng rng(7);
  std::map<long, int> seen;
  for (int k = 0; k < 3000; ++k) ++seen[std::lround(p.draw(linear, rng) * 100)];
  REQUIRE(seen.size() == 3);
  for (long v : {10L, 20L, 30L}) {
    CHECK(seen[v] > 850);
    CHECK(seen[v] < 1150);
  }
  // The same generator state gives the same draws (a run is reproducible from its seed).
  Rng a(11), b(11);
  for (int k = 0; k < 20; ++k) CHECK(p.draw(linear, a) == p.draw(linear, b));
  fs::remove_all(dir);
}

TEST_CASE("a real table that is not the full grid is refused with its place") {
  const fs::path dir = temp_dir("refused");
  const std::string id = "real-svm-digits";
  SUBCASE("a configuration missing") {
    auto made = bench::make_problem(id, write_table(dir, id,
                                                    "linear,0.1,,0.8,0.8,0.8,0.8,0.8,0.8,0.8,0,0\n"
                                                    "linear,1.0,,0.8,0.8,0.8,0.8,0.8,0.8,0.8,0,0\n"));
    REQUIRE_FALSE(made.ok());
    CHECK(made.error().message().find("no row of the configuration") != std::string::npos);
  }
  SUBCASE("an inactive parameter set") {
    auto made = bench::make_problem(id, write_table(dir, id, "linear,0.1,0.01,0.8,0.8,0.8,0.8,0.8,0.8,0.8,0,0\n"));
    REQUIRE_FALSE(made.ok());
    CHECK(made.error().message().find("real-svm-digits.csv") != std::string::npos);
  }
  SUBCASE("a level outside the space") {
    auto made = bench::make_problem(id, write_table(dir, id, "linear,0.5,,0.8,0.8,0.8,0.8,0.8,0.8,0.8,0,0\n"));
    REQUIRE_FALSE(made.ok());
    CHECK(made.error().message().find(":4: C = 0.5 is not one of its levels") != std::string::npos);
  }
  fs::remove_all(dir);
}

TEST_CASE("every real table of bench/data/real-tables loads, a third of them held out") {
  const auto ids = bench::real_table_ids();
  CHECK(ids.size() >= 20);
  int held_out = 0;
  for (const auto& id : ids) {
    CAPTURE(id);
    auto made = bench::make_problem(id, HPCTUNE_SOURCE_DIR "/bench/data/fashion_mlp_table.csv");
    REQUIRE_MESSAGE(made.ok(), made.error().message());
    CHECK(made->kind == "real-table");
    CHECK(made->definition["points_in_space"].get<int>() >= 81);
    CHECK(made->definition["seeds"] == 3);
    CHECK(made->optimum >= 0);
    CHECK(made->optimum < 1);
    held_out += made->part == "held-out";
  }
  CHECK(held_out == static_cast<int>((ids.size() + 2) / 3));  // every third by FNV-1a-64, from the first
  const auto all = bench::problem_ids();
  for (const auto& id : ids) CHECK(std::find(all.begin(), all.end(), id) != all.end());
}
