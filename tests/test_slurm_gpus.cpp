// GPUs on SLURM without a GPU or a cluster (the cluster's own case is in test_slurm):
//   - resources.gpus_per_rank and resources.slurm.gpus_per_task given differently: refused at the
//     second one's place; equal or alone: copied for the SLURM backend; a resources.slurm.gres
//     naming fewer GPUs than a node's ranks ask for: refused at its place;
//   - a group's job step asks for each rank's GPUs: --gpus-per-task=G with --gpu-bind=per_task:G
//     where every task is a rank (launch srun), --gpu-bind=none where one task starts the ranks;
//   - `hpctune slurm submit --dry-run` shows them, and asks for gpu:N on each node of the groups.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "config/config.h"
#include "launch/launcher.h"
#include "launch/slurm_launcher.h"
#include "tests/temp_dir.h"

using namespace hpctune;
using namespace hpctune::launch;
using hpctune::testing::TempDir;

namespace {

bool has(const std::vector<std::string>& argv, const std::string& a) {
  return std::find(argv.begin(), argv.end(), a) != argv.end();
}

bool has_prefix(const std::vector<std::string>& argv, const std::string& prefix) {
  return std::any_of(argv.begin(), argv.end(), [&](const std::string& a) { return a.rfind(prefix, 0) == 0; });
}

bool contains(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

std::string config_text(const std::string& trainer, const std::string& resources) {
  return "name: gpus\nseed: 1\nobjective: {metric: value, mode: max}\nsearch: {algorithm: random, max_trials: 2}\n"
         "space:\n  value: {type: float, low: 0.0, high: 1.0}\n"
         "trainer: " + trainer + "\n"
         "resources:\n  backend: slurm\n" + resources;
}

const std::string kSleep = "{kind: sleep, seconds: 0.1, steps: 1, metric: value}";
const std::string kCommand = "{kind: command, command: \"true\"}";

// Runs the hpctune binary with `args` in `dir`: its exit status and its output (stdout and stderr).
int run_hpctune(const std::string& dir, const std::string& args, std::string& out) {
  out.clear();
  FILE* p = ::popen(("cd " + dir + " && " HPCTUNE_BINARY " " + args + " 2>&1").c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  const int status = ::pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

LocalLauncherOptions step_options(int64_t ranks, int64_t per_node, const std::string& launch, int64_t gpus_per_rank) {
  LocalLauncherOptions o;
  o.program = "/opt/hpctune";
  o.master_endpoint = "tcp://127.0.0.1:5555";
  o.resources.ranks_data = ranks;
  o.slurm.job_id = "77";
  o.slurm.ranks_per_node = per_node;
  o.slurm.launch = launch;
  o.slurm.gpus_per_rank = gpus_per_rank;
  return o;
}

}  // namespace

TEST_CASE("slurm gpus: gpus_per_rank and slurm.gpus_per_task must agree; either is copied for the SLURM backend") {
  auto both = config::parse_config(
      config_text(kSleep, "  gpus_per_rank: 1\n  slurm:\n    ranks_per_node: 2\n    gpus_per_task: 2\n"), "c.yaml");
  REQUIRE_FALSE(both.ok());
  CHECK(both.error().code() == Errc::kConfig);
  // The place of the second key: line 13, column 5.
  CHECK_MESSAGE(contains(both.error().message(), "c.yaml:13:5"), both.error().message());
  CHECK(contains(both.error().message(), "resources.slurm.gpus_per_task"));
  CHECK(contains(both.error().message(), "resources.gpus_per_rank (1)"));

  auto same = config::parse_config(config_text(kSleep, "  gpus_per_rank: 2\n  slurm: {gpus_per_task: 2}\n"), "c.yaml");
  REQUIRE_MESSAGE(same.ok(), same.error().message());
  CHECK(same->resources.slurm.gpus_per_rank == 2);
  CHECK(same->resources.slurm.gpus_per_task == 2);
  auto alone = config::parse_config(config_text(kSleep, "  gpus_per_rank: 3\n"), "c.yaml");
  REQUIRE(alone.ok());
  CHECK(alone->resources.slurm.gpus_per_rank == 3);
  auto none = config::parse_config(config_text(kSleep, ""), "c.yaml");
  REQUIRE(none.ok());
  CHECK(none->resources.slurm.gpus_per_rank == 0);
}

TEST_CASE("slurm gpus: a gres that names the node's GPUs must hold what a group's ranks on a node ask for") {
  // 2 ranks a node x 2 GPUs = 4: gpu:2 and gpu:a100:3 are too few, at the gres's place.
  for (const std::string gres : {"gpu:2", "nvme:1,gpu:a100:3", "gpu"}) {
    auto few = config::parse_config(
        config_text(kSleep, "  ranks: {data: 4}\n  gpus_per_rank: 2\n  slurm:\n    ranks_per_node: 2\n    gres: \"" +
                                gres + "\"\n"), "c.yaml");
    REQUIRE_FALSE(few.ok());
    CHECK_MESSAGE(contains(few.error().message(), "c.yaml:14:5: resources.slurm.gres: '" + gres + "' gives a node"),
                  few.error().message());
    CHECK(contains(few.error().message(), "fewer than the 4"));
  }
  // Enough, a gres without gpu, or a count that is not a number: accepted.
  for (const std::string gres : {"gpu:4", "gpu:h100:8", "nvme:1", "gpu:a100"}) {
    auto ok = config::parse_config(
        config_text(kSleep, "  ranks: {data: 4}\n  gpus_per_rank: 2\n  slurm:\n    ranks_per_node: 2\n    gres: \"" +
                                gres + "\"\n"), "c.yaml");
    CHECK_MESSAGE(ok.ok(), gres << ": " << (ok.ok() ? "" : ok.error().message()));
  }
  // The local backend does not read resources.slurm.
  auto local = config::parse_config(
      "name: gpus\nobjective: {metric: value, mode: max}\nsearch: {algorithm: random, max_trials: 2}\n"
      "space:\n  value: {type: float, low: 0.0, high: 1.0}\ntrainer: " + kSleep + "\n"
      "resources:\n  gpus_per_rank: 2\n  slurm: {gres: \"gpu:1\"}\n", "c.yaml");
  CHECK(local.ok());
}

TEST_CASE("slurm gpus: a step asks for each rank's GPUs, bound per task where every task is a rank") {
  // 4 ranks, 2 a node, launch srun: every task a rank, each its own GPU.
  auto o = step_options(4, 2, "srun", 1);
  auto argv = slurm_step_command(o, 0, {});
  REQUIRE(argv.ok());
  CHECK(has(*argv, "--gpus-per-task=1"));
  CHECK(has(*argv, "--gpu-bind=per_task:1"));
  CHECK(has(*argv, "--ntasks-per-node=2"));
  // 2 GPUs a rank.
  o.slurm.gpus_per_rank = 2;
  argv = slurm_step_command(o, 0, {});
  REQUIRE(argv.ok());
  CHECK(has(*argv, "--gpus-per-task=2"));
  CHECK(has(*argv, "--gpu-bind=per_task:2"));
  // resources.slurm.gpus_per_task alone, as before: the same options.
  o.slurm.gpus_per_rank = 0;
  o.slurm.gpus_per_task = 2;
  CHECK(slurm_gpu_options(o) == std::vector<std::string>{"--gpus-per-task=2", "--gpu-bind=per_task:2"});
  // One task starts the ranks (a trainer that runs its own, or launch mpirun): it sees every GPU
  // of the step on its node.
  o = step_options(4, 2, "srun", 1);
  o.resources.trainer_starts_ranks = true;
  argv = slurm_step_command(o, 0, {});
  REQUIRE(argv.ok());
  CHECK(has(*argv, "--gpus-per-task=1"));
  CHECK(has(*argv, "--gpu-bind=none"));
  o = step_options(2, 1, "mpirun", 1);
  CHECK(slurm_gpu_options(o) == std::vector<std::string>{"--gpus-per-task=1", "--gpu-bind=none"});
  // No GPUs: no GPU option at all.
  o = step_options(4, 2, "srun", 0);
  argv = slurm_step_command(o, 0, {});
  REQUIRE(argv.ok());
  CHECK_FALSE(has_prefix(*argv, "--gpu"));
  CHECK_FALSE(has_prefix(*argv, "--gres"));
}

TEST_CASE("slurm gpus: slurm submit --dry-run shows the steps' GPU options and asks for gpu:N on each node") {
  TempDir dir;
  // 2 groups of 4 ranks, 2 a node, 1 GPU a rank: 2 GPUs on each of the 4 nodes.
  dir.write("srun.yaml", config_text(kSleep, "  groups: 2\n  ranks: {data: 4}\n  gpus_per_rank: 1\n"
                                             "  slurm: {ranks_per_node: 2, launch: srun}\n"));
  std::string out;
  REQUIRE(run_hpctune(dir.path, "slurm submit srun.yaml --nodes 4 --time 10 --db s.db --program hpctune --dry-run",
                      out) == 0);
  CHECK_MESSAGE(contains(out, "#SBATCH --gres=gpu:2\n"), out);
  CHECK_MESSAGE(contains(out, "# Each trainer group's job step asks for its ranks' GPUs: srun --gpus-per-task=1 "
                              "--gpu-bind=per_task:1.\n"), out);
  // A command trainer starts its own ranks: one task per step sees the node's GPUs of the step.
  dir.write("cmd.yaml", config_text(kCommand, "  groups: 1\n  ranks: {data: 2}\n  gpus_per_rank: 2\n"
                                              "  slurm: {ranks_per_node: 2, gres: \"nvme:1\"}\n"));
  REQUIRE(run_hpctune(dir.path, "slurm submit cmd.yaml --nodes 1 --time 10 --db c.db --program hpctune --dry-run",
                      out) == 0);
  CHECK_MESSAGE(contains(out, "#SBATCH --gres=nvme:1,gpu:4\n"), out);
  CHECK_MESSAGE(contains(out, "srun --gpus-per-task=2 --gpu-bind=none.\n"), out);
  // Without GPUs the script is as before: no gres, no GPU line.
  dir.write("plain.yaml", config_text(kSleep, "  groups: 1\n"));
  REQUIRE(run_hpctune(dir.path, "slurm submit plain.yaml --nodes 1 --time 10 --db p.db --program hpctune --dry-run",
                      out) == 0);
  CHECK_FALSE(contains(out, "gres"));
  CHECK_FALSE(contains(out, "GPU"));
  // Both keys, different numbers: validate and submit refuse with the place (exit 2).
  dir.write("both.yaml", config_text(kSleep, "  gpus_per_rank: 1\n  slurm:\n    gpus_per_task: 4\n"));
  CHECK(run_hpctune(dir.path, "validate both.yaml", out) == 2);
  CHECK_MESSAGE(contains(out, "both.yaml:12:5"), out);
  CHECK(contains(out, "resources.slurm.gpus_per_task"));
  CHECK(run_hpctune(dir.path, "slurm submit both.yaml --nodes 1 --time 10 --dry-run", out) == 2);
  CHECK_MESSAGE(contains(out, "both.yaml:12:5"), out);
}
