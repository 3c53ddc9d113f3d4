// bench_dashboard_fixture DB [--trials N] [--reports R] [--seed S] [--stages]: writes a synthetic
// campaign of N trials with R reports each (tests/synthetic_campaign.h: through store::Store as a
// master writes it) for bench/run-dashboard. Exit 2 on bad arguments, 1 when a write fails.
#include <cstdio>
#include <cstdlib>
#include <string>

#include <CLI/CLI.hpp>

#include "tests/synthetic_campaign.h"

int main(int argc, char** argv) {
  CLI::App app{"bench_dashboard_fixture: a synthetic campaign database for bench/run-dashboard"};
  std::string db;
  int64_t trials = 10000, reports = 20;
  uint64_t seed = 1;
  bool stages = false;
  app.add_option("db", db, "the database to write (must not exist)")->required();
  app.add_option("--trials", trials, "trials")->check(CLI::Range(int64_t{1}, int64_t{10'000'000}));
  app.add_option("--reports", reports, "reports per trial")->check(CLI::Range(int64_t{0}, int64_t{10'000}));
  app.add_option("--seed", seed, "the random seed");
  app.add_flag("--stages", stages, "also an ensemble, a transfer and a pbt stage");
  CLI11_PARSE(app, argc, argv);
  hpctune::testing::SyntheticOptions o;
  o.with_stages = stages;
  auto st = hpctune::testing::make_synthetic_campaign(db, trials, reports, seed, o);
  if (!st.ok()) {
    std::fprintf(stderr, "bench_dashboard_fixture: %s\n", st.error().to_string().c_str());
    return 1;
  }
  return 0;
}
