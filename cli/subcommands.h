// The subcommands of `hpctune`, one unit each: its constructor declares the subcommand and its
// options on the CLI::App (help texts, type names, CLI11's own checks), and run(), called by main
// after parsing when the command line chose it, makes the checks CLI11 cannot (numbers read as
// text, database paths, addresses: cli/subcommand_support.h), calls its cmd_* function
// (cli/commands.h, cli/simulate_command.h) and returns the exit code.
//
//   campaign (cli/subcommands_campaign.cpp): run, resume, simulate
//   reading  (cli/subcommands_reading.cpp):  status, schedule, trials, trial, export, validate
//   serving  (cli/subcommands_serving.cpp):  slurm submit, dashboard, worker
//
// A new subcommand: a class deriving from Subcommand in the file of its group, an add_* here, and
// one line in main (cli/main.cpp) where `hpctune --help` should list it.
#pragma once

#include <memory>
#include <string>

#include "common/result.h"
#include "protocol/transport.h"

namespace CLI {
class App;
}

namespace hpctune::cli {

class Subcommand {
 public:
  virtual ~Subcommand() = default;
  Subcommand(const Subcommand&) = delete;  // CLI11 holds pointers to the options' variables
  Subcommand& operator=(const Subcommand&) = delete;

  // After parsing: whether the command line chose this subcommand.
  bool chosen() const;
  // Whether run() only reads what databases hold (every subcommand but run, resume and simulate):
  // main runs it within a JSON read budget (common/bounded_json.h), so that a crafted store is
  // refused with its place, never an abort.
  bool bounded_reads() const { return bounded_reads_; }
  // The checks after parsing, then the command; the exit code (cli/commands.h: kExit*).
  virtual int run() = 0;

 protected:
  Subcommand(CLI::App* command, bool bounded_reads) : command_(command), bounded_reads_(bounded_reads) {}
  CLI::App& command() const { return *command_; }

 private:
  CLI::App* command_;
  bool bounded_reads_;
};

// campaign: cli/subcommands_campaign.cpp
std::unique_ptr<Subcommand> add_run(CLI::App& app);
std::unique_ptr<Subcommand> add_resume(CLI::App& app);
std::unique_ptr<Subcommand> add_simulate(CLI::App& app);

// reading: cli/subcommands_reading.cpp
std::unique_ptr<Subcommand> add_status(CLI::App& app);
std::unique_ptr<Subcommand> add_schedule(CLI::App& app);
std::unique_ptr<Subcommand> add_trials(CLI::App& app);
std::unique_ptr<Subcommand> add_trial(CLI::App& app);
std::unique_ptr<Subcommand> add_export(CLI::App& app);
std::unique_ptr<Subcommand> add_validate(CLI::App& app);

// serving: cli/subcommands_serving.cpp
// `slurm` and its one subcommand `submit`.
std::unique_ptr<Subcommand> add_slurm_submit(CLI::App& app);
std::unique_ptr<Subcommand> add_dashboard(CLI::App& app);

// What `worker` needs from main: the credential and the transport main took out of the
// environment before anything else (worker::take_worker_secret, take_worker_transport; an error
// of the latter only matters to `worker`), and main's argc and argv (MPI_Init's).
struct WorkerLaunch {
  std::string secret;
  Result<protocol::TransportOptions> transport;
  int* argc = nullptr;
  char*** argv = nullptr;
};
std::unique_ptr<Subcommand> add_worker(CLI::App& app, WorkerLaunch launch);

}  // namespace hpctune::cli
