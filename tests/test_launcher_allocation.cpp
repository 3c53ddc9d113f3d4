// What a backend says of the allocation its groups run in (launch/launcher.h: allocation_ending,
// requeue_job; check_backend, backend_default_bind), which run_master asks instead of calling SLURM
// itself (issue 24). SLURM's squeue is a fake script here; tests/test_slurm runs the real one.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <cstdlib>
#include <string>

#include "launch/launcher.h"
#include "launch/slurm_launcher.h"
#include "tests/temp_dir.h"

using namespace hpctune;
using hpctune::testing::TempDir;

namespace {

// A fake squeue that prints `left` (its %L) and counts its calls in `count_file`.
std::string fake_squeue(const TempDir& dir, const std::string& name, const std::string& left) {
  const std::string path = dir.write(name, "#!/bin/sh\necho x >> " + dir.file(name + ".calls") + "\necho '" + left + "'\n");
  REQUIRE(::chmod(path.c_str(), 0755) == 0);
  return path;
}

std::unique_ptr<launch::Launcher> slurm_launcher(const std::string& squeue, double signal_before) {
  launch::LocalLauncherOptions o;
  o.program = "/bin/true";
  o.slurm.job_id = "4242";
  o.slurm.squeue = squeue;
  o.slurm.signal_before_s = signal_before;
  auto l = launch::make_launcher("slurm", o);
  REQUIRE(l.ok());
  return std::move(l).value();
}

int64_t lines(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return 0;
  int64_t n = 0;
  for (int c; (c = std::fgetc(f)) != EOF;) n += c == '\n';
  std::fclose(f);
  return n;
}

}  // namespace

TEST_CASE("slurm: the launcher says the allocation ends once its time limit is less than signal_before away") {
  TempDir dir;
  // 55 s left, signal_before 50: 5 s of work left, not yet.
  auto later = slurm_launcher(fake_squeue(dir, "sq55", "0:55"), 50);
  CHECK(later->allocation_ending().empty());
  // 30 s left: past the margin at once.
  auto now = slurm_launcher(fake_squeue(dir, "sq30", "0:30"), 50);
  CHECK(now->allocation_ending() == "the allocation's time limit is less than resources.slurm.signal_before away");
  // squeue is asked once a minute, not every turn of the driver.
  for (int i = 0; i < 20; ++i) CHECK(!now->allocation_ending().empty());
  CHECK(lines(dir.file("sq30.calls")) == 1);
  // No limit (UNLIMITED) or no answer: never.
  CHECK(slurm_launcher(fake_squeue(dir, "sqU", "UNLIMITED"), 50)->allocation_ending().empty());
  CHECK(slurm_launcher(dir.file("no-such-squeue"), 50)->allocation_ending().empty());
  // A field too long to be a time is no answer (std::stod threw on it), and a limit a billion days
  // away is far, not past (its nanoseconds overflowed the steady clock).
  CHECK(slurm_launcher(fake_squeue(dir, "sq400", std::string(400, '9')), 50)->allocation_ending().empty());
  CHECK(slurm_launcher(fake_squeue(dir, "sqFar", "999999999-23:59:59"), 50)->allocation_ending().empty());
  // The local backend has no allocation.
  auto local = launch::make_launcher("local", launch::LocalLauncherOptions{});
  REQUIRE(local.ok());
  CHECK((*local)->allocation_ending().empty());
}

TEST_CASE("requeue_job: with resources.slurm.requeue inside a SLURM job, for every backend; else none") {
  TempDir dir;
  const char* saved = std::getenv("SLURM_JOB_ID");
  const std::string saved_value = saved ? saved : "";
  ::setenv("SLURM_JOB_ID", "777", 1);
  launch::LocalLauncherOptions o;
  o.program = "/bin/true";
  for (const char* backend : {"local", "slurm"}) {
    CAPTURE(backend);
    o.slurm.requeue = true;
    auto yes = launch::make_launcher(backend, o);
    REQUIRE(yes.ok());
    CHECK((*yes)->requeue_job() == "777");
    o.slurm.requeue = false;
    auto no = launch::make_launcher(backend, o);
    REQUIRE(no.ok());
    CHECK((*no)->requeue_job().empty());
  }
  ::unsetenv("SLURM_JOB_ID");
  o.slurm.requeue = true;
  auto outside = launch::make_launcher("local", o);
  REQUIRE(outside.ok());
  CHECK((*outside)->requeue_job().empty());
  // Outside an allocation the slurm backend is refused before anything is created, naming the way in.
  const Status refused = launch::check_backend("slurm");
  REQUIRE(!refused.ok());
  CHECK(refused.error().code() == Errc::kConfig);
  CHECK(refused.error().message().find("hpctune slurm submit") != std::string::npos);
  CHECK(launch::check_backend("local").ok());
  CHECK(launch::backend_default_bind("local", "ipc://*") == "ipc://*");
  CHECK(launch::backend_default_bind("slurm", "ipc://*").rfind("tcp://", 0) == 0);
  if (saved) ::setenv("SLURM_JOB_ID", saved_value.c_str(), 1);
}
