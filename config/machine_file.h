// The machine file of `hpctune simulate` (configs/machines/*.yaml): the parameters of the cost
// model of a trial (simulate/cost_model.h) for one kind of machine. YAML, read through
// the config's own tree (config/yaml_tree.h), so that a bad key or value is reported as
//     <file>:<line>:<column>: <key.path>: <what is wrong>
// with a "did you mean" for a misspelt key. Every key is required except `name` (default: the
// file's stem), `notes`, `nodes`, `compute.update_ns_per_param` and `startup.parallel_seconds`,
// `load_seconds` and `trial_seconds` (0); every number must be finite and in its range
// (declared with the keys in machine_file.cpp, and stated in the message that refuses a value).
//
//   name: this-machine
//   calibrated_nodes: 1          # nodes the figures were measured on; beyond: extrapolated
//   ranks_per_node: 2            # ranks that share a node (and its intra-node network)
//   nodes: 1                     # optional: the machine's nodes; when more ranks are busy at once
//                                #   than nodes x ranks_per_node, they share the cores (each step
//                                #   slows by the ratio); absent or 0: as many nodes as asked
//   compute:
//     mlp_gflops: 9.5            # a rank's training rate (forward + backward) on dense networks
//     cnn_gflops: 4.1            # ... on networks with convolutions
//     image_overhead_us: 3       # a rank's cost per trained image beyond its FLOPs (data, eval, small GEMMs)
//     update_ns_per_param: 1.5   # optional: the optimizer's update of one parameter, once per
//                                #   optimizer step (memory-bound; what small batches pay most)
//   network:
//     intra_node: {bandwidth_gb_s: 3.0, latency_us: 20}
//     inter_node: {bandwidth_gb_s: 1.0, latency_us: 5}
//     stage_handoff_us: 200      # a pipeline stage hands a micro-batch to the next
//   startup: {seconds: 1.0, per_rank_seconds: 0.2,   # a group's launch to its hello (one rank; each
//                                                    #   rank beyond the first)
//             parallel_seconds: 0.3,                 # optional: once for a group of more than one rank
//                                                    #   (mpirun's or srun's own start)
//             load_seconds: 0.3,                     # optional: each rank's one-time work before its
//                                                    #   first trial (reading the data), on its core
//             trial_seconds: 0.01}                   # optional: a trial's setup beyond its steps
//   disk: {bandwidth_mb_s: 400}  # checkpoint writes
#pragma once

#include <cstdint>
#include <string>

#include "common/result.h"

namespace hpctune::config {

struct MachineModel {
  std::string name;
  int64_t calibrated_nodes = 1;
  int64_t ranks_per_node = 1;
  int64_t nodes = 0;  // 0: unbounded (every simulated node its own)
  double mlp_flops_per_s = 1e10;
  double cnn_flops_per_s = 1e10;
  double image_overhead_s = 0;
  double update_s_per_param = 0;  // per optimizer step, on each rank's share of the parameters
  double intra_bandwidth_bytes_per_s = 1e9, intra_latency_s = 1e-5;
  double inter_bandwidth_bytes_per_s = 1e9, inter_latency_s = 1e-5;
  double stage_handoff_s = 0;
  double startup_s = 1, startup_per_rank_s = 0;
  double startup_parallel_s = 0;  // once for a group of more than one rank
  double load_s = 0;              // each rank's work before its first trial (on its core: shared)
  double trial_setup_s = 0;       // a trial's own setup (network, last evaluation), before its first step
  double disk_bytes_per_s = 1e8;
};

// The largest machine file read (a machine file is a few hundred bytes).
inline constexpr std::size_t kMaxMachineFileBytes = 1u << 20;

// Parses a machine file's text; `source` names it in messages. kConfig with file:line:column.
Result<MachineModel> parse_machine_file(const std::string& text, const std::string& source);
// Reads and parses a file (kNotFound when missing; kConfig when not a readable regular file).
Result<MachineModel> load_machine_file(const std::string& path);
// The machine file's text for `m` (what --calibrate writes), with `comments` (lines without '#')
// before it.
std::string machine_file_text(const MachineModel& m, const std::string& comments);
// The ranks that run at full speed at once: nodes x ranks_per_node; 0 when `nodes` is unset (unbounded).
int64_t rank_slots(const MachineModel& m);
// How much slower a rank runs when `ranks` run at once on the machine: ranks / rank_slots when
// that exceeds 1 (a machine of `nodes` nodes shares their cores), else 1.
double sharing_slowdown(const MachineModel& m, int64_t ranks);
// The same for `slots` ranks at full speed (0: unbounded): what the simulator applies to the ranks
// busy at each moment (simulate/simulator.h).
double sharing_slowdown(int64_t slots, int64_t ranks);

}  // namespace hpctune::config
