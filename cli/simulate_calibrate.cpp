// `hpctune simulate --calibrate`: fits this machine's file (configs/machines/this-machine.yaml) from
// small real campaigns (simulate/calibration.h says which and how), each `hpctune run` of this
// binary in a child process (the real path: master, launcher, ranks), the 2-rank ones under mpirun
// when it is on PATH.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cli/simulate_command.h"
#include "config/machine_file.h"
#include "launch/child_process.h"
#include "simulate/calibration.h"

namespace hpctune::cli {
namespace {

Status write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return err(Errc::kIo, "cannot write " + path);
  return Status::Ok();
}

std::string self_exe() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string("hpctune");
}

// Runs one campaign (`hpctune run`, 180 s at most) in `dir` and reads what it measured.
Result<simulate::CalibrationRun> run_one(const std::string& dir, const simulate::CalibrationCampaign& c) {
  const std::string cfg = dir + "/" + c.tag + ".yaml", db = dir + "/" + c.tag + ".db", log = dir + "/" + c.tag + ".log";
  HPCTUNE_TRY(write_file(cfg, simulate::calibration_config(c)));
  launch::SpawnOptions o;
  o.argv = {self_exe(), "run", cfg, "--db", db};
  o.stdout_path = log;
  o.stderr_path = "=stdout";
  HPCTUNE_ASSIGN(launch::ChildProcess child, launch::ChildProcess::spawn(o));
  auto status = child.wait_for(std::chrono::seconds(180));
  if (!status || !status->success()) {
    return err(Errc::kInternal, "--calibrate: the " + c.tag + " campaign " + (status ? "failed" : "took over 180 s") + "; its log: " + log);
  }
  return simulate::read_calibration_run(c, db);
}

std::string num(double v, int digits = 4) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*g", digits, v);
  return b;
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

}  // namespace

Status cmd_simulate_calibrate(const SimulateArgs& args) {
  const std::string out_path = args.machine_out.empty() ? "configs/machines/this-machine.yaml" : args.machine_out;
  std::string templ = (std::filesystem::temp_directory_path() / "hpctune-calibrate-XXXXXX").string();
  if (::mkdtemp(templ.data()) == nullptr) return err(Errc::kIo, "--calibrate: cannot create a temporary directory");
  const std::string dir = templ;
  struct Cleanup {
    std::string d;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(d, ec);
    }
  } cleanup{dir};
  std::string found_mpirun;
  if (const char* path = std::getenv("PATH")) {
    std::string p = path;
    for (std::size_t at = 0; at <= p.size();) {
      const auto colon = p.find(':', at);
      const std::string d = p.substr(at, colon == std::string::npos ? std::string::npos : colon - at);
      if (!d.empty() && ::access((d + "/mpirun").c_str(), X_OK) == 0) {
        found_mpirun = d + "/mpirun";
        break;
      }
      if (colon == std::string::npos) break;
      at = colon + 1;
    }
  }
  std::printf("calibrating on this machine (temporary campaigns in %s)\n", dir.c_str());
  std::fflush(stdout);
  std::vector<simulate::CalibrationRun> runs;
  for (const auto& c : simulate::calibration_campaigns(!found_mpirun.empty())) {
    const auto t0 = std::chrono::steady_clock::now();
    HPCTUNE_ASSIGN(simulate::CalibrationRun r, run_one(dir, c));
    std::printf("  %-10s %lld x %lld ranks: %zu epochs of %s s (mean), start-up %s s, %.1f s in all\n", c.tag.c_str(),
                static_cast<long long>(c.data), static_cast<long long>(c.model), r.epoch_s.size(), num(mean(r.epoch_s)).c_str(),
                num(r.startup_s).c_str(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    std::fflush(stdout);
    runs.push_back(std::move(r));
  }
  if (found_mpirun.empty()) {
    std::printf("  mpirun is not on PATH: the 2-rank data- and model-parallel runs are skipped; the network and the\n"
                "  stage hand-off keep the values of the file written before (or the defaults)\n");
  }
  config::MachineModel before;
  if (auto written = config::load_machine_file(out_path); written.ok()) before = *written;
  HPCTUNE_ASSIGN(simulate::CalibrationFit fit,
                 simulate::fit_machine(runs, std::move(before), static_cast<int64_t>(std::thread::hardware_concurrency()), dir));
  for (const auto& line : fit.lines) std::printf("%s\n", line.c_str());
  const config::MachineModel& m = fit.machine;
  const std::string& notes = fit.notes;
  const std::string text = config::machine_file_text(m, notes);
  HPCTUNE_TRY(config::parse_machine_file(text, out_path));  // what simulate will read
  std::error_code ec;
  if (auto parent = std::filesystem::path(out_path).parent_path(); !parent.empty()) std::filesystem::create_directories(parent, ec);
  // A new file renamed into place: a link at out_path is replaced, never followed.
  const std::string fresh = out_path + ".new-" + std::to_string(::getpid());
  const int fd = ::open(fresh.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return err(Errc::kIo, "--calibrate: cannot create " + fresh + ": " + std::strerror(errno));
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const bool closed = ::close(fd) == 0;
  if (!written || !closed || std::rename(fresh.c_str(), out_path.c_str()) != 0) {
    std::filesystem::remove(fresh, ec);
    return err(Errc::kIo, "--calibrate: cannot write " + out_path);
  }
  std::printf("wrote %s\n", out_path.c_str());
  return Status::Ok();
}

}  // namespace hpctune::cli
