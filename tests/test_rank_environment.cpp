// The rendezvous environment of a command trainer's ranks (trainers/rank_environment.h): the rank
// script derives RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE from each launcher's own
// variables (Open MPI first, then PMIx, Hydra, SLURM) and refuses what it cannot trust; one rank
// gets fixed values; a real 2-rank run under mpirun gives ranks 0 and 1 of 2 the same MASTER_ADDR
// and MASTER_PORT.
#include <doctest/doctest.h>

#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "common/shell_template.h"
#include "common/system.h"
#include "tests/temp_dir.h"
#include "trainers/command_trainer.h"
#include "trainers/rank_environment.h"

using namespace hpctune;
using hpctune::testing::TempDir;
using json = nlohmann::json;

namespace {

const std::string kSource = HPCTUNE_SOURCE_DIR;
const std::string kPython = "/usr/bin/python3";

struct Outcome {
  int code = -1;
  std::string out;  // stdout and stderr together
};

// Runs the rank script in an environment of only `env` (and PATH), the program printing the four
// per-rank names and its arguments.
Outcome run_rank_script(const std::vector<std::string>& env, const std::vector<std::string>& args = {}) {
  std::vector<std::string> argv = {"/usr/bin/env", "-i", "PATH=/usr/bin:/bin"};
  argv.insert(argv.end(), env.begin(), env.end());
  argv.insert(argv.end(), {"/bin/sh", "-c", std::string(trainers::rank_script()), "hpctune-rank", "/bin/sh", "-c",
                           "echo \"$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE\"; for a; do echo \"[$a]\"; done",
                           "prog"});
  argv.insert(argv.end(), args.begin(), args.end());
  std::string line;
  for (const auto& a : argv) line += hpctune::shell_quote(a) + " ";
  line += "2>&1";
  FILE* p = popen(line.c_str(), "r");
  REQUIRE(p != nullptr);
  Outcome o;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) o.out.append(buf, n);
  const int status = pclose(p);
  o.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return o;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

struct Recorded {
  std::mutex mu;
  std::vector<std::pair<int64_t, protocol::Metrics>> reports;
};

trainers::TrialContext context(const json& trainer, const std::string& trial_dir, Recorded& rec) {
  trainers::TrialContext ctx;
  ctx.trial_id = 5;
  ctx.attempt = 1;
  ctx.seed = 3;
  ctx.trainer = trainer;
  ctx.trainer["kind"] = "command";
  ctx.params = json::object();
  ctx.trial_dir = trial_dir;
  ctx.report = [&rec](int64_t step, const protocol::Metrics& m) {
    std::lock_guard lock(rec.mu);
    rec.reports.emplace_back(step, m);
  };
  return ctx;
}

}  // namespace

TEST_CASE("rank script: each launcher's variables give RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE") {
  // Open MPI.
  CHECK(run_rank_script({"OMPI_COMM_WORLD_RANK=3", "OMPI_COMM_WORLD_SIZE=4", "OMPI_COMM_WORLD_LOCAL_RANK=1",
                         "OMPI_COMM_WORLD_LOCAL_SIZE=2", "WORLD_SIZE=4"})
            .out == "3 4 1 2\n");
  // Open MPI wins over the SLURM_* its ranks inherit from the step that started the worker.
  CHECK(run_rank_script({"SLURM_PROCID=0", "SLURM_NTASKS=1", "SLURM_LOCALID=0", "SLURM_STEP_TASKS_PER_NODE=1",
                         "OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_RANK=1",
                         "OMPI_COMM_WORLD_LOCAL_SIZE=2"})
            .out == "1 2 1 2\n");
  // PMIx names no size or local rank: the group's WORLD_SIZE, and one host assumed.
  CHECK(run_rank_script({"PMIX_RANK=2", "WORLD_SIZE=3"}).out == "2 3 2 3\n");
  // MPICH's Hydra.
  CHECK(run_rank_script({"PMI_RANK=2", "PMI_SIZE=3", "MPI_LOCALRANKID=0", "MPI_LOCALNRANKS=1"}).out == "2 3 0 1\n");
  // srun: 5 tasks as 2 + 2 + 1; task 4 is alone on the third node, task 1 the second of the first.
  CHECK(run_rank_script({"SLURM_PROCID=4", "SLURM_NTASKS=5", "SLURM_LOCALID=0", "SLURM_NODEID=2",
                         "SLURM_STEP_TASKS_PER_NODE=2(x2),1", "SLURM_NTASKS_PER_NODE=2"})
            .out == "4 5 0 1\n");
  CHECK(run_rank_script({"SLURM_PROCID=1", "SLURM_NTASKS=5", "SLURM_LOCALID=1", "SLURM_NODEID=0",
                         "SLURM_STEP_TASKS_PER_NODE=2(x2),1"})
            .out == "1 5 1 2\n");
  CHECK(run_rank_script({"SLURM_PROCID=3", "SLURM_NTASKS=4", "SLURM_LOCALID=0", "SLURM_NODEID=1",
                         "SLURM_STEP_TASKS_PER_NODE=3,1"})
            .out == "3 4 0 1\n");
  // No per-node count from the step: SLURM_NTASKS_PER_NODE.
  CHECK(run_rank_script({"SLURM_PROCID=2", "SLURM_NTASKS=4", "SLURM_LOCALID=0", "SLURM_NTASKS_PER_NODE=2"}).out ==
        "2 4 0 2\n");
}

TEST_CASE("rank script: the program's arguments pass through untouched, and the IFS it used does not leak") {
  const Outcome o = run_rank_script({"SLURM_PROCID=0", "SLURM_NTASKS=1", "SLURM_LOCALID=0",
                                     "SLURM_STEP_TASKS_PER_NODE=1"},
                                    {"a b,c", "$(touch /nonexistent/x)", "*", "it's"});
  CHECK(o.code == 0);
  CHECK(o.out == "0 1 0 1\n[a b,c]\n[$(touch /nonexistent/x)]\n[*]\n[it's]\n");
}

TEST_CASE("rank script: no launcher, values that are not numbers, or a rank out of range exit 97 saying why") {
  Outcome none = run_rank_script({"WORLD_SIZE=2"});
  CHECK(none.code == 97);
  CHECK(none.out.find("hpctune: rank environment: no launcher variable names this rank") != std::string::npos);
  Outcome junk = run_rank_script({"OMPI_COMM_WORLD_RANK=1;reboot", "OMPI_COMM_WORLD_SIZE=2"});
  CHECK(junk.code == 97);
  CHECK(junk.out.find("not a number: RANK='1;reboot'") != std::string::npos);
  Outcome past = run_rank_script({"OMPI_COMM_WORLD_RANK=2", "OMPI_COMM_WORLD_SIZE=2"});
  CHECK(past.code == 97);
  CHECK(past.out.find("RANK 2 is not below WORLD_SIZE 2") != std::string::npos);
  Outcome local = run_rank_script({"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_RANK=1",
                                   "OMPI_COMM_WORLD_LOCAL_SIZE=1"});
  CHECK(local.code == 97);
  CHECK(local.out.find("LOCAL_RANK 1 is not below LOCAL_WORLD_SIZE 1") != std::string::npos);
  // Rank 0 elsewhere than the host MASTER_ADDR names: the others would wait for it in vain.
  Outcome away = run_rank_script({"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2", "MASTER_ADDR=node7",
                                  "HPCTUNE_RANK0_HOST=node7-not-" + host_name()});
  CHECK(away.code == 97);
  CHECK(away.out.find("rank 0 runs on " + host_name() + ", but MASTER_ADDR (node7) is on node7-not-") != std::string::npos);
  // On its own host it runs; another rank does not care where it is.
  CHECK(run_rank_script({"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2", "HPCTUNE_RANK0_HOST=" + host_name()}).out ==
        "0 2 0 2\n");
  CHECK(run_rank_script({"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2", "HPCTUNE_RANK0_HOST=elsewhere"}).out ==
        "1 2 1 2\n");
}

TEST_CASE("add_rank_environment: fixed values for one rank; the wrapper and -x names for several; a free port") {
  launch::SpawnOptions one;
  REQUIRE(trainers::add_rank_environment(1, one).ok());
  CHECK(one.argv.empty());
  CHECK(one.env.at("WORLD_SIZE") == "1");
  CHECK(one.env.at("RANK") == "0");
  CHECK(one.env.at("LOCAL_RANK") == "0");
  CHECK(one.env.at("LOCAL_WORLD_SIZE") == "1");
  CHECK(one.env.at("MASTER_ADDR") == "127.0.0.1");
  const int port = std::stoi(one.env.at("MASTER_PORT"));
  CHECK(port > 0);
  CHECK(port < 65536);
  // The port is free: it can be bound right away (torch's TCPStore does so in rank 0).
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  CHECK(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  ::close(fd);

  launch::SpawnOptions two;
  two.argv = {"mpirun", "-np", "2"};
  REQUIRE(trainers::add_rank_environment(2, two).ok());
  CHECK(two.env.at("WORLD_SIZE") == "2");
  CHECK(two.env.count("RANK") == 0);  // each rank's own, from the script
  CHECK(two.env.at("MASTER_ADDR") == trainers::group_host_address());
  CHECK(two.env.at("HPCTUNE_RANK0_HOST") == host_name());
  const std::vector<std::string> want = {"mpirun", "-np", "2", "-x", "MASTER_ADDR", "-x", "MASTER_PORT", "-x",
                                         "WORLD_SIZE", "-x", "HPCTUNE_RANK0_HOST", "/bin/sh", "-c",
                                         std::string(trainers::rank_script()), "hpctune-rank"};
  CHECK(two.argv == want);
}

TEST_CASE("a one-rank command trial gets WORLD_SIZE 1, RANK 0 and a MASTER_ADDR/PORT; trainer.env wins") {
  TempDir dir;
  Recorded rec;
  const std::string print =
      "echo \"$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR\" > env.txt; echo $MASTER_PORT > port.txt";
  auto ctx = context({{"command", "cd {trial_dir} && " + print}}, dir.path, rec);
  auto r = trainers::CommandTrainer().run(ctx);
  REQUIRE_MESSAGE(r.ok(), r.error().to_string());
  CHECK(read_text(dir.file("env.txt")) == "0 1 0 1 127.0.0.1\n");
  CHECK(std::stoi(read_text(dir.file("port.txt"))) > 0);

  auto pinned = context({{"command", "cd {trial_dir} && " + print}, {"env", {{"MASTER_PORT", "29511"}}}}, dir.path, rec);
  auto r2 = trainers::CommandTrainer().run(pinned);
  REQUIRE_MESSAGE(r2.ok(), r2.error().to_string());
  CHECK(read_text(dir.file("port.txt")) == "29511\n");
}

TEST_CASE("a 2-rank command trial under mpirun: ranks 0 and 1 of WORLD_SIZE 2, one MASTER_ADDR and MASTER_PORT") {
  if (!trainers::mpirun_prefix(2).ok()) {
    // A build without MPI: the error says so (test_command_trainer checks it); nothing else to check.
    CHECK(trainers::mpirun_prefix(2).error().code() == Errc::kUnavailable);
    return;
  }
  TempDir dir;
  Recorded rec;
  auto ctx = context({{"command", kPython + " " + kSource + "/tests/scripts/ranks.py"},
                      {"env", {{"PYTHONPATH", kSource + "/tools/python"}}}},
                     dir.path, rec);
  ctx.ranks = 2;
  ctx.threads = 1;
  auto r = trainers::CommandTrainer().run(ctx);
  REQUIRE_MESSAGE(r.ok(), r.error().to_string() << "\n" << read_text(dir.file("attempt-1/stderr.log")));
  const std::string rank0 = read_text(dir.file("rank-0.env"));
  const std::string rank1 = read_text(dir.file("rank-1.env"));
  CAPTURE(rank0);
  CAPTURE(rank1);
  std::istringstream a(rank0), b(rank1);
  std::string r0, w0, l0, lw0, addr0, port0, r1, w1, l1, lw1, addr1, port1;
  a >> r0 >> w0 >> l0 >> lw0 >> addr0 >> port0;
  b >> r1 >> w1 >> l1 >> lw1 >> addr1 >> port1;
  CHECK((r0 == "0" && w0 == "2" && l0 == "0" && lw0 == "2"));
  CHECK((r1 == "1" && w1 == "2" && l1 == "1" && lw1 == "2"));
  CHECK(addr0 == trainers::group_host_address());
  CHECK(addr1 == addr0);
  CHECK(port1 == port0);
  CHECK(std::stoi(port0) > 0);
  // Only rank 0 reported, and it saw WORLD_SIZE 2.
  REQUIRE(rec.reports.size() == 1);
  CHECK(rec.reports[0].second.at("world_size") == 2.0);
}
