// The ranks of an MPI test program (run under mpirun by ctest, tests/mpirun-test) and its main:
// MPI initialised once, doctest's summary on rank 0 only, and one exit code for every rank.
//
//   int main(int argc, char** argv) { return hpctune::testing::mpi_test_main(argc, argv, "test_x"); }
//
// A test that kills one of its own ranks ends with mpi_kill_test_main instead (below).
#pragma once

#include <doctest/doctest.h>
#include <mpi.h>

#include <stdlib.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "collectives/collectives.h"
#include "collectives/trainer_group.h"
#include "tests/temp_dir.h"

namespace hpctune::testing {

inline int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

inline int world_size() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// A directory made by the group's leader, named `prefix`-XXXXXX, the same path on every rank (the
// ranks of these tests share one machine). Those a killed run left a day ago or more go first
// (remove_stale_temp_dirs). SharedTempDir removes it when its scope ends.
inline std::string shared_temp_dir(collectives::TrainerGroup& g, const std::string& prefix) {
  std::vector<uint8_t> bytes;
  if (g.leader()) {
    remove_stale_temp_dirs(prefix);
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    REQUIRE(mkdtemp(tmpl.data()) != nullptr);
    bytes.assign(tmpl.begin(), tmpl.end());
  }
  REQUIRE(g.broadcast_bytes(bytes).ok());
  return std::string(bytes.begin(), bytes.end());
}

// A shared_temp_dir that the group's leader removes, with everything in it, on every way out of
// its scope that runs destructors: when the scope ends, after a barrier of every rank of the world
// (every rank is done with it: the groups of these tests span the world); while a failed REQUIRE
// (an exception) unwinds it, at once, without a barrier, which could wait for ranks that are in a
// collective of their own. A run that is killed leaves it; remove_stale_temp_dirs sweeps it later.
class SharedTempDir {
 public:
  SharedTempDir(collectives::TrainerGroup& g, const std::string& prefix)
      : path(shared_temp_dir(g, prefix)), leader_(g.leader()) {}
  SharedTempDir(const SharedTempDir&) = delete;
  SharedTempDir& operator=(const SharedTempDir&) = delete;
  ~SharedTempDir() {
    if (std::uncaught_exceptions() == exceptions_) MPI_Barrier(MPI_COMM_WORLD);
    if (!leader_) return;
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  const std::string path;

 private:
  bool leader_;
  int exceptions_ = std::uncaught_exceptions();
};

// Leaves this rank's failure count where tests/mpirun-test reads it (HPCTUNE_TEST_RESULT_DIR,
// rank-<world rank>): under --enable-recovery mpirun's exit status says nothing of how the ranks
// ended (a rank that failed its checks, or was killed, still leaves it 0).
inline void leave_rank_result(int failed) {
  const char* dir = std::getenv("HPCTUNE_TEST_RESULT_DIR");
  if (dir == nullptr || *dir == '\0') return;
  const std::string path = std::string(dir) + "/rank-" + std::to_string(world_rank());
  if (std::FILE* f = std::fopen(path.c_str(), "w")) {
    std::fprintf(f, "%d\n", failed);
    std::fclose(f);
  }
}

inline int mpi_test_main(int argc, char** argv, const char* name) {
  auto environment = collectives::MpiEnvironment::init(&argc, &argv);
  if (!environment.ok()) {
    std::fprintf(stderr, "%s: %s\n", name, environment.error().to_string().c_str());
    return 1;
  }
  doctest::Context context(argc, argv);
  // One summary is enough; the other ranks print their failures only. mpirun forwards the output
  // through a terminal, so doctest would colour it even inside ctest logs.
  context.setOption("no-colors", true);
  if (world_rank() != 0) context.setOption("minimal", true);
  int failed = context.run();
  if (context.shouldExit()) return failed;
  // Every rank exits with the same code, so mpirun reports the failure whichever rank saw it.
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  leave_rank_result(failed);
  return failed;
}

// The main of a test in which a rank is SIGKILLed on purpose: every surviving rank reports its own
// failures and exits at once, without MPI_Finalize or a closing allreduce (with a dead rank in the
// job either can wait for it forever; seen in 1 run of 3). mpirun reports the failure of any rank.
[[noreturn]] inline void mpi_kill_test_main(int argc, char** argv, const char* name) {
  auto environment = collectives::MpiEnvironment::init(&argc, &argv);
  if (!environment.ok()) {
    std::fprintf(stderr, "%s: %s\n", name, environment.error().to_string().c_str());
    std::_Exit(1);
  }
  doctest::Context context(argc, argv);
  context.setOption("no-colors", true);
  const int failed = context.run();
  leave_rank_result(failed);
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(failed);
}

}  // namespace hpctune::testing
