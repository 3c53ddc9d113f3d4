// The sbatch script of `hpctune slurm submit` (launch/slurm_script.h) as text: the directives and
// their order, the heterogeneous job, the master's exec of run or resume, quoting, and the checks
// (--time forms, nodes per group, values and paths an #SBATCH line cannot hold). The CLI around
// it, the 2048-node Cray script and a real submission are in test_cli.
#include <doctest/doctest.h>

#include <string>

#include "launch/slurm_script.h"

using namespace hpctune;
using namespace hpctune::launch;

namespace {

bool contains(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

BatchScriptSpec small_spec() {
  BatchScriptSpec s;
  s.job_name = "tiny";
  s.nodes = 4;
  s.time = "30";
  s.partition = "debug";
  s.setup = {"module load foo", "export A=1"};
  s.signal_before_s = 120;
  s.program = "/opt/hpctune/bin/hpctune";
  s.config_path = "tiny.yaml";
  s.db_path = "runs/tiny.db";
  s.log_dir = slurm_log_dir(s.db_path);
  return s;
}

}  // namespace

TEST_CASE("slurm script: one job's text, directive by directive, then setup and the master's exec") {
  auto script = batch_script(small_spec());
  REQUIRE(script.ok());
  const std::string expected =
      "#!/bin/bash\n"
      "# The batch job of campaign tiny, written by `hpctune slurm submit`.\n"
      "# The master runs on the batch host; its trainer groups are job steps in this allocation. USR1\n"
      "# (120 s before the time limit, or on pre-emption) reaches the master itself (exec below): it\n"
      "# stops dispatching, records everything and requeues the job; the requeued job resumes the campaign.\n"
      "#SBATCH --job-name=tiny\n"
      "#SBATCH --nodes=4\n"
      "#SBATCH --time=30\n"
      "#SBATCH --partition=debug\n"
      "#SBATCH --signal=B:USR1@120\n"
      "#SBATCH --requeue\n"
      "#SBATCH --no-kill\n"
      "#SBATCH --output=runs/tiny.db.slurm/slurm-%j.out\n"
      "#SBATCH --error=runs/tiny.db.slurm/slurm-%j.err\n"
      "#SBATCH --open-mode=append\n"
      "\n"
      "# resources.slurm.setup\n"
      "module load foo\n"
      "export A=1\n"
      "\n"
      "# The first run starts the campaign; a requeued job (the database exists) resumes it.\n"
      "db=runs/tiny.db\n"
      "if [ -e \"$db\" ]; then\n"
      "  exec /opt/hpctune/bin/hpctune resume \"$db\"\n"
      "fi\n"
      "exec /opt/hpctune/bin/hpctune run tiny.yaml --db \"$db\"\n";
  CHECK(*script == expected);
}

TEST_CASE("slurm script: empty options leave no directive; requeue off says --no-requeue; job names are made safe") {
  auto spec = small_spec();
  spec.partition = "";
  spec.setup.clear();
  spec.requeue = false;
  spec.job_name = "my campaign/1";
  auto script = batch_script(spec);
  REQUIRE(script.ok());
  CHECK_FALSE(contains(*script, "--partition"));
  CHECK_FALSE(contains(*script, "--account"));
  CHECK_FALSE(contains(*script, "--gres"));
  CHECK_FALSE(contains(*script, "setup"));
  CHECK(contains(*script, "#SBATCH --no-requeue\n"));
  CHECK_FALSE(contains(*script, "#SBATCH --requeue\n"));
  CHECK(contains(*script, "#SBATCH --job-name=my_campaign_1\n"));
}

TEST_CASE("slurm script: a master node of another type makes a heterogeneous job") {
  auto spec = small_spec();
  spec.nodes = 5;
  spec.constraint = "gpu";
  spec.gres = "gpu:4";
  spec.account = "abc";
  spec.master_partition = "service";
  spec.master_constraint = "bigmem";
  REQUIRE(is_heterogeneous(spec));
  auto script = batch_script(spec);
  REQUIRE(script.ok());
  const auto het = script->find("#SBATCH hetjob\n");
  REQUIRE(het != std::string::npos);
  const std::string master = script->substr(0, het), groups = script->substr(het);
  // The master's component: one node of its own partition and features, no GPUs; the job-wide
  // options (signal, requeue, output) with it.
  CHECK(contains(master, "#SBATCH --nodes=1\n"));
  CHECK(contains(master, "#SBATCH --partition=service\n"));
  CHECK(contains(master, "#SBATCH --constraint=bigmem\n"));
  CHECK_FALSE(contains(master, "--gres"));
  CHECK(contains(master, "#SBATCH --signal=B:USR1@120\n"));
  CHECK(contains(master, "#SBATCH --output="));
  // The groups' component: the other 4 nodes.
  CHECK(contains(groups, "#SBATCH --nodes=4\n"));
  CHECK(contains(groups, "#SBATCH --partition=debug\n"));
  CHECK(contains(groups, "#SBATCH --constraint=gpu\n"));
  CHECK(contains(groups, "#SBATCH --gres=gpu:4\n"));
  CHECK(contains(groups, "#SBATCH --time=30\n"));
  CHECK(contains(groups, "#SBATCH --account=abc\n"));
  CHECK_FALSE(contains(groups, "--signal"));
  // Only a master partition: the master's features are left free, its partition is its own.
  spec.master_constraint = "";
  script = batch_script(spec);
  REQUIRE(script.ok());
  CHECK(contains(script->substr(0, script->find("hetjob")), "#SBATCH --partition=service\n"));
  CHECK_FALSE(contains(script->substr(0, script->find("hetjob")), "--constraint"));
  // A heterogeneous job needs the master's node and one more.
  spec.nodes = 1;
  auto one = batch_script(spec);
  REQUIRE_FALSE(one.ok());
  CHECK(one.error().code() == Errc::kUsage);
  CHECK(contains(one.error().message(), "--nodes"));
}

TEST_CASE("slurm script: paths and the program are shell-quoted; unsafe option values and log paths are refused") {
  auto spec = small_spec();
  spec.program = "/opt/my tools/hpctune";
  spec.config_path = "$(rm -rf x).yaml";
  auto script = batch_script(spec);
  REQUIRE(script.ok());
  CHECK(contains(*script, "exec '/opt/my tools/hpctune' resume \"$db\"\n"));
  CHECK(contains(*script, "exec '/opt/my tools/hpctune' run '$(rm -rf x).yaml' --db \"$db\"\n"));

  spec = small_spec();
  spec.db_path = "my runs/tiny.db";
  spec.log_dir = slurm_log_dir(spec.db_path);
  auto bad_path = batch_script(spec);
  REQUIRE_FALSE(bad_path.ok());
  CHECK(bad_path.error().code() == Errc::kUsage);
  CHECK(contains(bad_path.error().message(), "my runs/tiny.db.slurm"));
  spec.log_dir = "runs/100%.slurm";  // sbatch would expand %.
  CHECK_FALSE(batch_script(spec).ok());

  spec = small_spec();
  spec.qos = "normal --wrap=x";
  auto bad_value = batch_script(spec);
  REQUIRE_FALSE(bad_value.ok());
  CHECK(bad_value.error().code() == Errc::kUsage);
  CHECK(contains(bad_value.error().message(), "qos"));
  CHECK(sbatch_value_problem("gpu:4") == std::nullopt);
  CHECK(sbatch_value_problem("a&b|c") == std::nullopt);
  CHECK(sbatch_value_problem("a\"b").has_value());
  CHECK(sbatch_value_problem("a\nb").has_value());

  spec = small_spec();
  spec.signal_before_s = 70000;  // more than SLURM's 16 bits
  auto bad_signal = batch_script(spec);
  REQUIRE_FALSE(bad_signal.ok());
  CHECK(contains(bad_signal.error().message(), "65535"));
}

TEST_CASE("slurm script: --time takes SLURM's forms and nothing else") {
  for (const char* ok : {"90", "30:00", "2:00:00", "100:00:00", "1-12", "1-12:30", "1-12:30:15", "0:30", "0-0:0:1"}) {
    CHECK_MESSAGE(check_slurm_time(ok).ok(), ok);
  }
  for (const char* bad : {"", "0", "00:00", "0:00:00", "0-0", "1h", "2h30m", "-5", "1:60", "1:00:60", "1:2:3:4",
                          "1-24", "1-1:2:3:4", "1--2", " 90", "90 ", "1.5", "UNLIMITED", "1-", "-1", ":30",
                          "1-:30", "9999999999"}) {
    auto s = check_slurm_time(bad);
    CHECK_MESSAGE(!s.ok(), bad);
    if (!s.ok()) {
      CHECK(s.error().code() == Errc::kUsage);
      CHECK(contains(s.error().message(), "--time"));
      CHECK(contains(s.error().message(), "hours:minutes:seconds"));
    }
  }
  // batch_script checks it too.
  auto spec = small_spec();
  spec.time = "2h";
  CHECK_FALSE(batch_script(spec).ok());
}

TEST_CASE("slurm script: nodes per group and in all") {
  CHECK(nodes_per_group(1, 1) == 1);
  CHECK(nodes_per_group(128, 1) == 128);
  CHECK(nodes_per_group(128, 8) == 16);
  CHECK(nodes_per_group(5, 2) == 3);
  CHECK(nodes_per_group(4, 8) == 1);
  CHECK(nodes_needed(16, 128, 1, false) == 2048);
  CHECK(nodes_needed(16, 128, 1, true) == 2049);
  CHECK(nodes_needed(2, 4, 2, false) == 4);
}

TEST_CASE("slurm script: GPUs per rank ask for gpu:N on the groups' nodes and name the steps' GPU options") {
  auto spec = small_spec();
  spec.gpus_per_node = 4;
  spec.step_gpu_options = {"--gpus-per-task=2", "--gpu-bind=per_task:2"};
  auto script = batch_script(spec);
  REQUIRE(script.ok());
  CHECK(contains(*script, "# Each trainer group's job step asks for its ranks' GPUs: srun --gpus-per-task=2 "
                          "--gpu-bind=per_task:2.\n#SBATCH --job-name=tiny\n"));
  CHECK(contains(*script, "#SBATCH --partition=debug\n#SBATCH --gres=gpu:4\n#SBATCH --signal="));
  // Another gres of the site's: the GPUs are added to it. One that names gpu itself wins.
  spec.gres = "nvme:1";
  CHECK(contains(*batch_script(spec), "#SBATCH --gres=nvme:1,gpu:4\n"));
  spec.gres = "gpu:a100:4";
  CHECK(contains(*batch_script(spec), "#SBATCH --gres=gpu:a100:4\n"));
  CHECK_FALSE(contains(*batch_script(spec), "gpu:4\n"));
  // A heterogeneous job: the GPUs with the groups' nodes only, none on the master's.
  spec.gres = "";
  spec.nodes = 5;
  spec.master_partition = "service";
  script = batch_script(spec);
  REQUIRE(script.ok());
  const auto het = script->find("#SBATCH hetjob\n");
  REQUIRE(het != std::string::npos);
  CHECK_FALSE(contains(script->substr(0, het), "--gres"));
  CHECK(contains(script->substr(het), "#SBATCH --gres=gpu:4\n"));
  // Without GPUs: no comment, no gres (the text of the first case above).
  spec = small_spec();
  CHECK_FALSE(contains(*batch_script(spec), "GPU"));
  CHECK_FALSE(contains(*batch_script(spec), "gres"));
}

TEST_CASE("slurm script: the GPUs added to a gres list") {
  CHECK(gres_with_gpus("", 0) == "");
  CHECK(gres_with_gpus("nvme:1", 0) == "nvme:1");
  CHECK(gres_with_gpus("", 8) == "gpu:8");
  CHECK(gres_with_gpus("nvme:1", 2) == "nvme:1,gpu:2");
  CHECK(gres_with_gpus("gpu", 2) == "gpu");
  CHECK(gres_with_gpus("nvme:1,gpu:h100:4", 2) == "nvme:1,gpu:h100:4");
  CHECK(gres_with_gpus("gpux:1", 2) == "gpux:1,gpu:2");  // not gpu
}
