// hpctune: the command line. This is an edge: errors that travelled up as values become an exit
// code and one message here (0 ok, 2 usage/config, 1 run-time failure, 130 after Ctrl-C, 143
// after SIGTERM).
//
// Each subcommand is a unit of cli/subcommands_*.cpp (cli/subcommands.h): its options and the
// checks after parsing; main parses and runs the one chosen.
#include <cstdio>
#include <exception>
#include <iostream>
#include <iterator>
#include <memory>
#include <new>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/subcommand_support.h"
#include "cli/subcommands.h"
#include "common/bounded_json.h"
#include "common/text.h"
#include "launch/backends.h"
#include "report/format.h"
#include "search/early_stopping.h"
#include "search/searcher.h"
#include "worker/worker.h"
#include "workflow/stages.h"

namespace {

// The top of `hpctune --help`, its lists read from the registries (so a new algorithm, early
// stopper, stage kind or backend appears without editing it).
std::string app_description() {
  using hpctune::join;
  std::vector<std::string> stoppers;
  for (const std::string& s : hpctune::search::stopper_names())
    if (s != "none") stoppers.push_back(s);
  const std::vector<std::string> backends(std::begin(hpctune::launch::kBackendNames),
                                          std::end(hpctune::launch::kBackendNames));
  return "hpctune: hyperparameter search (" + join(hpctune::search::searcher_names(), ", ") +
         "; early stopping: " + join(stoppers, ", ") + ") and workflows of stages (" +
         join(hpctune::workflow::stage_kind_names(), ", ") + ") on trainer groups (backends: " +
         join(backends, ", ") + "; MPI ranks within a group), every trial recorded in SQLite";
}

}  // namespace

int main(int argc, char** argv) {
  using namespace hpctune::cli;
  // Before anything else (threads, MPI, child processes): the launch credential leaves the
  // environment, whatever the subcommand.
  const std::string worker_secret = hpctune::worker::take_worker_secret();
  // And the workers' CURVE keys (an error only matters to `worker`).
  auto worker_transport = hpctune::worker::take_worker_transport(worker_secret);
  CLI::App app{app_description()};
  app.set_version_flag("--version", std::string("hpctune ") + HPCTUNE_VERSION);
  app.require_subcommand(1);

  // In the order `hpctune --help` lists them.
  std::vector<std::unique_ptr<Subcommand>> subcommands;
  subcommands.push_back(add_run(app));
  subcommands.push_back(add_resume(app));
  subcommands.push_back(add_simulate(app));
  subcommands.push_back(add_status(app));
  subcommands.push_back(add_schedule(app));
  subcommands.push_back(add_trials(app));
  subcommands.push_back(add_trial(app));
  subcommands.push_back(add_export(app));
  subcommands.push_back(add_validate(app));
  subcommands.push_back(add_slurm_submit(app));
  subcommands.push_back(add_dashboard(app));
  subcommands.push_back(add_worker(app, WorkerLaunch{worker_secret, std::move(worker_transport), &argc, &argv}));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11's messages quote the value given ("--format: <value> not in {table,json}"): shown with
    // its control characters escaped, as every other error is (an ESC would reach the terminal).
    std::ostringstream message;
    const int code = app.exit(e, std::cout, message);
    std::fputs(hpctune::report::terminal_safe(message.str()).c_str(), stderr);
    return code == 0 ? kExitOk : kExitUsage;
  }

  install_signal_handlers();
  try {
    for (const auto& subcommand : subcommands) {
      if (!subcommand->chosen()) continue;
      if (!subcommand->bounded_reads()) return subcommand->run();  // run, resume, simulate
      // The read-only commands read what a database holds within a memory budget
      // (common/bounded_json.h): a crafted store is refused with its place, never an abort.
      hpctune::JsonReadBudget read_budget(hpctune::kJsonReadBudgetBytes);
      return subcommand->run();
    }
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "hpctune: error: out of memory (nothing recorded was changed)\n");
    return kExitFailure;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hpctune: internal error: %s\n", hpctune::report::terminal_safe(e.what()).c_str());
    return kExitFailure;
  }
  return kExitUsage;
}
