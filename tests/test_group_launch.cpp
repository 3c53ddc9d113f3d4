// The local launcher's command line for trainer groups of several ranks (scheduler/launcher.h).
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "scheduler/launcher.h"

using namespace hpctune;
using namespace hpctune::scheduler;

namespace {

bool has(const std::vector<std::string>& argv, const std::string& a) {
  return std::find(argv.begin(), argv.end(), a) != argv.end();
}
std::string after(const std::vector<std::string>& argv, const std::string& a) {
  auto it = std::find(argv.begin(), argv.end(), a);
  return it != argv.end() && it + 1 != argv.end() ? *(it + 1) : std::string();
}

LocalLauncherOptions options(int64_t data, int64_t model, int cores) {
  LocalLauncherOptions o;
  o.program = "/opt/hpctune";
  o.master_endpoint = "tcp://127.0.0.1:5555";
  o.resources.ranks_data = data;
  o.resources.ranks_model = model;
  o.cores = cores;
  o.mpirun = "/bin/true";  // any executable: the command is only built here
  o.extra_args = {"--campaign", "/tmp/x.db"};
  return o;
}

}  // namespace

TEST_CASE("one rank: the worker alone, threads left to it") {
  auto argv = local_group_command(options(1, 1, 8), 3);
  REQUIRE(argv.ok());
  CHECK(argv->front() == "/opt/hpctune");
  CHECK(after(*argv, "--group") == "3");
  CHECK(!has(*argv, "--threads"));
  CHECK(!has(*argv, "--ranks-data"));
  CHECK(argv->back() == "/tmp/x.db");
}

TEST_CASE("2 x 2 ranks on 8 cores: mpirun -np 4, 2 threads per rank, no oversubscription") {
  auto argv = local_group_command(options(2, 2, 8), 0);
  REQUIRE(argv.ok());
  CHECK(argv->front() == "/bin/true");
  CHECK(after(*argv, "-np") == "4");
  CHECK(after(*argv, "--bind-to") == "none");
  CHECK(after(*argv, "btl") == "self,vader");
  CHECK(!has(*argv, "--oversubscribe"));
  CHECK(has(*argv, "--allow-run-as-root") == (geteuid() == 0));
  CHECK(after(*argv, "--threads") == "2");
  CHECK(after(*argv, "--ranks-data") == "2");
  CHECK(after(*argv, "--ranks-model") == "2");
  CHECK(!has(*argv, "--trainer-starts-ranks"));
  // The program comes after mpirun's own options.
  auto prog = std::find(argv->begin(), argv->end(), std::string("/opt/hpctune"));
  REQUIRE(prog != argv->end());
  CHECK(*(prog + 1) == "worker");
}

TEST_CASE("more ranks than cores: oversubscribed, at least one thread each; explicit threads win") {
  auto argv = local_group_command(options(4, 1, 2), 0);
  REQUIRE(argv.ok());
  CHECK(has(*argv, "--oversubscribe"));
  CHECK(after(*argv, "--threads") == "1");
  auto o = options(2, 1, 16);
  o.resources.threads = 3;
  argv = local_group_command(o, 0);
  REQUIRE(argv.ok());
  CHECK(after(*argv, "--threads") == "3");
}

TEST_CASE("a trainer that starts its own ranks gets one worker process told the layout") {
  auto o = options(2, 3, 8);
  o.resources.trainer_starts_ranks = true;
  auto argv = local_group_command(o, 1);
  REQUIRE(argv.ok());
  CHECK(argv->front() == "/opt/hpctune");
  CHECK(!has(*argv, "-np"));
  CHECK(has(*argv, "--trainer-starts-ranks"));
  CHECK(after(*argv, "--ranks-data") == "2");
  CHECK(after(*argv, "--ranks-model") == "3");
}

TEST_CASE("bad layouts and a missing mpirun are launch errors") {
  CHECK(local_group_command(options(0, 1, 8), 0).error().code() == Errc::kConfig);
  auto o = options(2, 1, 8);
  o.mpirun = "/nonexistent/mpirun";
  CHECK(local_group_command(o, 0).error().code() == Errc::kUnavailable);
  o.resources.ranks_data = 1;  // one rank needs no mpirun
  CHECK(local_group_command(o, 0).ok());
}
