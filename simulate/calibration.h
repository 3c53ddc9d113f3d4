// The library side of `hpctune simulate --calibrate` (the CLI's cli/simulate_calibrate.cpp runs the
// campaigns and writes the file): which small real campaigns measure this machine, what their
// stores say, and the machine file fitted from them with the cost model's own formulas
// (simulate/cost_model.h).
//
// The campaigns: each `hpctune run` of the built-in mlp (or a small cnn) on Fashion-MNIST on 1 rank,
// and, when mpirun is there, on 2 data-parallel and 2 model-parallel ranks. From their stores: each
// epoch's epoch_seconds and the time from the campaign's start to the first epoch's start (start-up).
// The fit:
//   mlp_gflops, image_overhead_us, update_ns_per_param  least squares of epoch seconds = images x
//                           overhead + FLOPs / rate + optimizer steps x parameters x update, over
//                           four dense runs on 1 rank (widths 256 and 64 at batch 64, width 256 at
//                           batch 16: the batch separates the per-step update from the per-image
//                           work; width 512 at batch 32, as wide as the networks searched); an
//                           epoch's images and FLOPs count its evaluation (forward only);
//                           cnn_gflops from the conv run, the other two kept
//   intra bandwidth         what the 2-rank DP epochs leave after half the compute, per allreduce,
//                           = 2 (p-1)/p x bytes / bandwidth + 2 (p-1) x latency (latency fixed at
//                           kAssumedLatencyUs: one gradient size cannot separate the two)
//   stage_handoff_us        what the 2-stage MP epochs leave after compute and bubble, per hand-off
//   startup.trial_seconds   a trial's seconds beyond its epochs (the median over the 3 later trials
//                           of the width-64 run: the first also loads the data)
//   startup                 seconds: the 1-rank runs' hello (the group's registration);
//                           parallel_seconds: the 2-rank (mpirun) runs' hello less that;
//                           load_seconds: hello to the first epoch, less a trial's setup
//   disk                    the trainers' checkpoints: a width-512 run's second trial, its seconds
//                           beyond its epochs less a trial's setup, over its 4 checkpoints
// Inter-node figures are copied from intra-node ones (one node: nothing between nodes to measure).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "config/machine_file.h"
#include "config/trial_work.h"

namespace hpctune::simulate {

// One calibration campaign to run.
struct CalibrationCampaign {
  std::string tag;
  int64_t data = 1, model = 1;
  bool cnn = false;
  int64_t width = 256, batch = 64, trials = 1;
  bool checkpoint = false;
  bool needs_mpirun() const { return data * model > 1; }
};

// The campaigns, in order (the 2-rank ones last, left out without mpirun).
std::vector<CalibrationCampaign> calibration_campaigns(bool with_mpirun);

// The config (YAML) of one campaign.
std::string calibration_config(const CalibrationCampaign& c);

// What one campaign measured.
struct CalibrationRun {
  CalibrationCampaign campaign;
  std::vector<double> epoch_s;
  double startup_s = 0;          // the campaign's start to the first epoch's
  double hello_s = -1;           // the campaign's start to the group's hello (-1: not recorded)
  std::vector<double> setup_s;   // trials after the first: their seconds beyond their epochs
  config::TrialWork work;
};

// Reads a finished campaign's store (`db`); errors name it.
Result<CalibrationRun> read_calibration_run(const CalibrationCampaign& c, const std::string& db);

// The machine file fitted from `runs` (every campaign of calibration_campaigns, the 2-rank ones
// optional), starting from `before` (the file written before, or the defaults): the model, its
// notes for the file, and the lines that say what was fitted and its residuals. `scratch`: a
// directory where a raw disk write may be timed when the checkpoints leave nothing to measure.
struct CalibrationFit {
  config::MachineModel machine;
  std::string notes;
  std::vector<std::string> lines;
};
Result<CalibrationFit> fit_machine(const std::vector<CalibrationRun>& runs, config::MachineModel before, int64_t cores,
                                   const std::string& scratch);

}  // namespace hpctune::simulate
