// The sbatch script of `hpctune slurm submit`: pure text generation from a BatchScriptSpec (the
// CLI fills it from the config and the command line), and the checks of what goes into it (the
// --time format, the node count the trainer groups need, paths that #SBATCH lines can hold).
// Nothing here runs sbatch or reads files, so the script's text is tested byte for byte.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace hpctune::launch {

// One campaign's batch job. The master runs on the batch host (the job's first node); trainer
// groups are job steps on the allocation's nodes.
struct BatchScriptSpec {
  std::string job_name;          // the campaign's name (characters other than [A-Za-z0-9._-] become _)
  int64_t nodes = 1;             // the whole allocation, the master's node of a heterogeneous job included
  std::string time;              // sbatch --time, as given (check_slurm_time)
  std::string partition, account, qos, constraint, gres;
  // GPUs (resources.gpus_per_rank): what one node of the groups needs, asked for with the groups'
  // nodes as --gres=gpu:N (added to `gres`, unless `gres` names gpu itself: the site's own form,
  // such as gpu:a100:4, wins); and the GPU options of each group's step (slurm_gpu_options), said
  // in a comment of the script. 0 and empty: none.
  int64_t gpus_per_node = 0;
  std::vector<std::string> step_gpu_options;
  // Either set: a heterogeneous job whose first component is the master's one node of this
  // partition / these features, the second the groups' nodes - 1.
  std::string master_partition, master_constraint;
  std::vector<std::string> setup;  // shell lines before the master
  int64_t signal_before_s = 120;   // --signal=B:USR1@<s>
  bool requeue = true;
  std::string program = "hpctune";  // the hpctune the batch host runs
  std::string config_path;          // as given: relative paths are from the submit directory
  std::string db_path;
  std::string log_dir;  // --output and --error go here (slurm_log_dir(db_path))
};

bool is_heterogeneous(const BatchScriptSpec& spec);

// Where a campaign's batch script and the job's output go: "<db>.slurm".
std::string slurm_log_dir(const std::string& db_path);

// sbatch --time: minutes, minutes:seconds, hours:minutes:seconds, days-hours,
// days-hours:minutes or days-hours:minutes:seconds (digits only; minutes and seconds after a colon
// below 60, hours after a day below 24; not zero). kUsage naming the forms otherwise.
Status check_slurm_time(std::string_view text);

// nullopt when `value` can be an sbatch or srun option's value as it is (letters, digits and
// _-.:,&|[]*=+/, the set resources.slurm.* is checked against); else what is wrong with it.
std::optional<std::string> sbatch_value_problem(std::string_view value);

// The --gres of the groups' nodes: `gres` with gpu:`gpus_per_node` added (none when 0; `gres` as
// it is when one of its entries is gpu, gpu:N or gpu:TYPE:N).
std::string gres_with_gpus(const std::string& gres, int64_t gpus_per_node);

// Whole nodes one group of `ranks` ranks takes at `ranks_per_node` ranks a node.
int64_t nodes_per_group(int64_t ranks, int64_t ranks_per_node);

// Nodes a job needs so that all `groups` run at once: groups x nodes_per_group, plus the master's
// own node in a heterogeneous job.
int64_t nodes_needed(int64_t groups, int64_t ranks, int64_t ranks_per_node, bool heterogeneous);

// The script. kUsage when a value cannot go into it safely: an option value with a character
// sbatch_value_problem refuses, a path of an #SBATCH line (the log dir) with characters sbatch
// would split or expand, fewer than 2 nodes in
// a heterogeneous job, a signal time SLURM cannot hold (above 65535 s).
Result<std::string> batch_script(const BatchScriptSpec& spec);

}  // namespace hpctune::launch
