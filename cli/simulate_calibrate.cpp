// `hpctune simulate --calibrate`: fits this machine's file (configs/machines/this-machine.yaml) from
// small real campaigns, each `hpctune run` of one trial of the built-in mlp on Fashion-MNIST (a
// child process: the real path, master, launcher, ranks), on 1 rank, 2 data-parallel ranks and 2
// model-parallel ranks (the last two under mpirun, skipped when it is absent), and one of a small
// cnn on 1 rank. From their stores: each epoch's epoch_seconds and the time from the campaign's
// start to the first epoch's start (start-up). Then, with the cost model's own formulas
// (scheduler/simulation_cost_model.h):
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
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include <Eigen/Dense>

#include "cli/simulate_command.h"
#include "config/machine_file.h"
#include "config/trial_work.h"
#include "launch/child_process.h"
#include "scheduler/simulation_cost_model.h"
#include "store/store.h"

namespace hpctune::cli {
namespace {

constexpr double kAssumedLatencyUs = 30;

struct Measured {
  std::string tag;
  int64_t data = 1, model = 1;
  bool cnn = false;
  std::vector<double> epoch_s;
  double startup_s = 0;          // the campaign's start to the first epoch's
  double hello_s = -1;           // the campaign's start to the group's hello (-1: not recorded)
  std::vector<double> setup_s;  // trials after the first: their seconds beyond their epochs
  config::TrialWork work;
};

std::string calib_config(const std::string& tag, int64_t data, int64_t model, bool cnn, int64_t width, int64_t batch,
                         int64_t trials, bool checkpoint) {
  std::string t = "name: calibrate-" + tag + "\nseed: 7\nobjective: {metric: val_accuracy, mode: max}\n"
                  "search: {algorithm: random, max_trials: " + std::to_string(trials) + "}\nspace:\n  lr: {type: float, low: 0.05, high: 0.1}\n"
                  "trainer:\n";
  if (cnn) {
    t += "  kind: cnn\n  layers: [{kind: conv, filters: 8, kernel: 3}, {kind: maxpool, size: 2}, {kind: dense, units: 32}]\n"
         "  epochs: 3\n  max_train_samples: 3000\n";
  } else {
    t += "  kind: mlp\n  hidden: " + std::to_string(width) + "\n  layers: 2\n  epochs: 4\n  max_train_samples: 12000\n";
  }
  t += "  batch_size: " + std::to_string(batch) + "\n  max_test_samples: 200\n  checkpoint: " + (checkpoint ? "true" : "false") + "\n"
       "resources:\n  groups: 1\n  ranks: {data: " + std::to_string(data) + ", model: " + std::to_string(model) +
       "}\n  threads: 1\n  heartbeat_interval: 0.5\n  heartbeat_timeout: 60\n";
  return t;
}

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

Result<Measured> run_one(const std::string& dir, const std::string& tag, int64_t data, int64_t model, bool cnn, int64_t width,
                         int64_t batch, int64_t trial_count, bool checkpoint) {
  Measured m{tag, data, model, cnn, {}, 0, -1, {}, {}};
  const std::string cfg = dir + "/" + tag + ".yaml", db = dir + "/" + tag + ".db", log = dir + "/" + tag + ".log";
  const std::string text = calib_config(tag, data, model, cnn, width, batch, trial_count, checkpoint);
  HPCTUNE_TRY(write_file(cfg, text));
  launch::SpawnOptions o;
  o.argv = {self_exe(), "run", cfg, "--db", db};
  o.stdout_path = log;
  o.stderr_path = "=stdout";
  HPCTUNE_ASSIGN(launch::ChildProcess child, launch::ChildProcess::spawn(o));
  auto status = child.wait_for(std::chrono::seconds(180));
  if (!status || !status->success()) {
    return err(Errc::kInternal, "--calibrate: the " + tag + " campaign " + (status ? "failed" : "took over 180 s") + "; its log: " + log);
  }
  HPCTUNE_ASSIGN(auto store, store::Store::open(db));
  HPCTUNE_ASSIGN(auto campaign, store->load_campaign());
  if (!campaign) return err(Errc::kInternal, "--calibrate: " + db + " holds no campaign");
  HPCTUNE_ASSIGN(auto trials, store->trials(campaign->id));
  if (trials.size() != static_cast<std::size_t>(trial_count)) {
    return err(Errc::kInternal, "--calibrate: " + db + " does not hold " + std::to_string(trial_count) + " trial(s)");
  }
  // The trials after the first (whose start also loads the data): what a trial costs beyond its epochs.
  for (std::size_t i = 1; i < trials.size(); ++i) {
    HPCTUNE_ASSIGN(auto later, store->metrics(trials[i].id));
    double epochs = 0;
    for (const auto& r : later)
      if (r.name == "epoch_seconds") epochs += r.value;
    if (trials[i].finished_at > 0 && trials[i].started_at > 0) {
      m.setup_s.push_back(std::max(0.0, trials[i].finished_at - trials[i].started_at - epochs));
    }
  }
  HPCTUNE_ASSIGN(auto metrics, store->metrics(trials[0].id));
  double first_report = 0;
  for (const auto& r : metrics) {
    if (r.name != "epoch_seconds") continue;
    m.epoch_s.push_back(r.value);
    if (r.step == 1) first_report = r.t;
  }
  if (m.epoch_s.empty() || first_report == 0) return err(Errc::kInternal, "--calibrate: " + db + " has no epoch_seconds");
  m.startup_s = std::max(0.0, first_report - m.epoch_s[0] - campaign->created_at);
  HPCTUNE_ASSIGN(auto groups, store->groups(campaign->id));
  if (groups.size() == 1 && groups[0].started_at >= campaign->created_at) m.hello_s = groups[0].started_at - campaign->created_at;
  nlohmann::json trainer = campaign->config_json.value("trainer", nlohmann::json::object());
  for (auto it = trials[0].params.begin(); it != trials[0].params.end(); ++it) trainer[it.key()] = it.value();
  HPCTUNE_ASSIGN(m.work, config::trial_work(trainer));
  return m;
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

std::string num(double v, int digits = 4) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*g", digits, v);
  return b;
}

double disk_bytes_per_s(const std::string& dir) {
  const std::string path = dir + "/disk.bin";
  std::vector<char> block(1 << 20, 'x');
  const auto t0 = std::chrono::steady_clock::now();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return 0;
  bool ok = true;
  for (int i = 0; i < 32 && ok; ++i) ok = ::write(fd, block.data(), block.size()) == static_cast<ssize_t>(block.size());
  ok = ok && ::fsync(fd) == 0;
  ::close(fd);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::filesystem::remove(path);
  return ok && s > 0 ? 32.0 * (1 << 20) / s : 0;
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
  std::vector<Measured> runs;
  auto run = [&](const std::string& tag, int64_t d, int64_t m, bool cnn, int64_t width = 256, int64_t batch = 64,
                 int64_t trials = 1, bool checkpoint = false) -> Status {
    const auto t0 = std::chrono::steady_clock::now();
    HPCTUNE_ASSIGN(Measured r, run_one(dir, tag, d, m, cnn, width, batch, trials, checkpoint));
    std::printf("  %-10s %lld x %lld ranks: %zu epochs of %s s (mean), start-up %s s, %.1f s in all\n", tag.c_str(),
                static_cast<long long>(d), static_cast<long long>(m), r.epoch_s.size(), num(mean(r.epoch_s)).c_str(),
                num(r.startup_s).c_str(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    std::fflush(stdout);
    runs.push_back(std::move(r));
    return Status::Ok();
  };
  HPCTUNE_TRY(run("dense", 1, 1, false));
  HPCTUNE_TRY(run("conv", 1, 1, true));
  HPCTUNE_TRY(run("dense-64", 1, 1, false, 64, 64, 4));  // 3 trials after the first: a trial's setup
  HPCTUNE_TRY(run("dense-b16", 1, 1, false, 256, 16));
  HPCTUNE_TRY(run("dense-512", 1, 1, false, 512, 32));
  HPCTUNE_TRY(run("checkpoint", 1, 1, false, 512, 64, 2, true));  // its second trial: 4 checkpoints beyond the setup
  if (found_mpirun.empty()) {
    std::printf("  mpirun is not on PATH: the 2-rank data- and model-parallel runs are skipped; the network and the\n"
                "  stage hand-off keep the values of the file written before (or the defaults)\n");
  } else {
    HPCTUNE_TRY(run("dense-dp2", 2, 1, false));
    HPCTUNE_TRY(run("dense-mp2", 1, 2, false));
  }
  config::MachineModel m;
  if (auto before = config::load_machine_file(out_path); before.ok()) m = *before;
  m.name = "this-machine";
  m.calibrated_nodes = 1;
  m.ranks_per_node = std::max<int64_t>(1, std::thread::hardware_concurrency());
  std::string notes = "Fitted by `hpctune simulate --calibrate` on this machine (" + std::to_string(m.ranks_per_node) +
                      " cores), from one-trial `hpctune run`s of Fashion-MNIST:\n";
  std::printf("fitted (residual: measured - model, per epoch or launch):\n");
  // Compute: epoch seconds = images x overhead + FLOPs / rate + steps x parameters x update, where
  // an epoch's images and FLOPs count its evaluation (forward only).
  auto epoch_work = [](const Measured& r, double* images, double* flops, double* updates) {
    const double trained = r.work.images_per_step * r.work.steps_per_report;
    *images = trained + r.work.eval_images_per_report;
    *flops = r.work.flops_per_image * trained + r.work.forward_flops_per_image * r.work.eval_images_per_report;
    *updates = r.work.steps_per_report * r.work.parameter_bytes / 4;
  };
  auto by_tag = [&](const std::string& tag) -> const Measured* {
    for (const auto& r : runs)
      if (r.tag == tag) return &r;
    return nullptr;
  };
  auto residuals = [&](const Measured& r) {
    auto c = scheduler::step_cost(m, r.work, r.data, r.model);
    std::string res;
    for (double t : r.epoch_s) res += (res.empty() ? "" : ", ") + num(t - (c.ok() ? c->total() : 0), 3);
    return res;
  };
  {
    const std::vector<const Measured*> dense = {by_tag("dense"), by_tag("dense-64"), by_tag("dense-b16"), by_tag("dense-512")};
    // Least squares over every epoch of the three runs; a coefficient that comes out negative (noise
    // where the effect is small) is dropped and the rest fitted again.
    auto fit = [&](bool with_overhead, bool with_update) -> Eigen::Vector3d {
      Eigen::MatrixXd a(0, 3);
      Eigen::VectorXd y(0);
      for (const Measured* r : dense) {
        double n = 0, f = 0, u = 0;
        epoch_work(*r, &n, &f, &u);
        for (double t : r->epoch_s) {
          a.conservativeResize(a.rows() + 1, 3);
          y.conservativeResize(y.size() + 1);
          a.row(a.rows() - 1) << (with_overhead ? n : 0.0), f, (with_update ? u : 0.0);
          y(y.size() - 1) = t;
        }
      }
      Eigen::Vector3d x = (a.transpose() * a + 1e-30 * Eigen::Matrix3d::Identity()).ldlt().solve(a.transpose() * y);
      if (!with_overhead) x(0) = 0;
      if (!with_update) x(2) = 0;
      return x;
    };
    Eigen::Vector3d x = fit(true, true);
    if (x(0) < 0) x = fit(false, true);
    if (x(2) < 0) x = fit(x(0) > 0, false);
    if (x(0) < 0) x = fit(false, false);
    if (x(1) > 0) m.mlp_flops_per_s = 1 / x(1);
    m.image_overhead_s = std::max(0.0, x(0));
    m.update_s_per_param = std::max(0.0, x(2));
    const std::string res = residuals(*dense[0]) + "; " + residuals(*dense[1]) + "; " + residuals(*dense[2]) + "; " + residuals(*dense[3]);
    std::printf("  compute.mlp_gflops                %8s GFLOP/s   image_overhead_us %s, update_ns_per_param %s; residuals %s s\n",
                num(m.mlp_flops_per_s / 1e9).c_str(), num(m.image_overhead_s * 1e6).c_str(),
                num(m.update_s_per_param * 1e9).c_str(), res.c_str());
    notes += "  compute.mlp_gflops = " + num(m.mlp_flops_per_s / 1e9) + ", image_overhead_us = " + num(m.image_overhead_s * 1e6) +
             ", update_ns_per_param = " + num(m.update_s_per_param * 1e9) +
             ": least squares of epoch seconds = images x overhead + FLOPs / rate + steps x parameters x update over the 1-rank "
             "dense runs of width 256 (" + num(mean(dense[0]->epoch_s)) + " s an epoch), 64 (" + num(mean(dense[1]->epoch_s)) +
             " s), 256 at batch 16 (" + num(mean(dense[2]->epoch_s)) + " s) and 512 at batch 32 (" + num(mean(dense[3]->epoch_s)) +
             " s); residuals " + res + " s\n";
  }
  {
    const Measured& r = *by_tag("conv");
    double n = 0, f = 0, u = 0, sft = 0, sff = 0;
    epoch_work(r, &n, &f, &u);
    for (double t : r.epoch_s) sft += f * (t - n * m.image_overhead_s - u * m.update_s_per_param), sff += f * f;
    if (sft > 0) m.cnn_flops_per_s = sff / sft;
    const std::string res = residuals(r);
    std::printf("  compute.cnn_gflops                %8s GFLOP/s   residuals %s s\n", num(m.cnn_flops_per_s / 1e9).c_str(), res.c_str());
    notes += "  compute.cnn_gflops = " + num(m.cnn_flops_per_s / 1e9) + ": the 1-rank conv run (" + num(mean(r.epoch_s)) +
             " s an epoch) less the images' overhead and the updates; residuals " + res + " s\n";
  }
  if (by_tag("dense-dp2") != nullptr && by_tag("dense-mp2") != nullptr) {
    const Measured& dp = *by_tag("dense-dp2");
    auto dp_cost = scheduler::step_cost(m, dp.work, 2, 1);
    const double compute = dp_cost.ok() ? dp_cost->compute_s : 0;
    const double per_allreduce = (mean(dp.epoch_s) - compute) / dp.work.steps_per_report;
    m.intra_latency_s = kAssumedLatencyUs * 1e-6;
    const double transfer = per_allreduce - 2 * m.intra_latency_s;
    if (transfer > 0) m.intra_bandwidth_bytes_per_s = dp.work.parameter_bytes / transfer;  // 2 (p-1)/p = 1 for p = 2
    std::string res;
    for (double t : dp.epoch_s) {
      auto c = scheduler::step_cost(m, dp.work, 2, 1);
      res += (res.empty() ? "" : ", ") + num(t - (c.ok() ? c->total() : 0), 3);
    }
    std::printf("  network.intra_node.bandwidth_gb_s %8s GB/s      residuals %s s%s\n", num(m.intra_bandwidth_bytes_per_s / 1e9).c_str(),
                res.c_str(), transfer > 0 ? "" : " (DP left nothing for its allreduce: kept)");
    notes += "  network.intra_node: 2-rank DP epochs of " + num(mean(dp.epoch_s)) + " s less half the 1-rank compute (" +
             num(compute) + " s) over " + num(dp.work.steps_per_report) + " allreduces of " + num(dp.work.parameter_bytes / 1e6) +
             " MB; latency_us " + num(kAssumedLatencyUs) + " assumed (one gradient size cannot separate it); residuals " + res + " s\n";
    const Measured& mp = *by_tag("dense-mp2");
    m.stage_handoff_s = 0;  // compute and bubble alone, then what is left per hand-off
    auto mp_cost = scheduler::step_cost(m, mp.work, 1, 2);
    const double micro = static_cast<double>(mp.work.micro_batches > 0 ? mp.work.micro_batches : 4);
    const double left = mean(mp.epoch_s) - (mp_cost.ok() ? mp_cost->compute_s + mp_cost->bubble_s : 0);
    m.stage_handoff_s = std::max(0.0, left / (mp.work.steps_per_report * (micro + 1)));
    res.clear();
    for (double t : mp.epoch_s) {
      auto c = scheduler::step_cost(m, mp.work, 1, 2);
      res += (res.empty() ? "" : ", ") + num(t - (c.ok() ? c->total() : 0), 3);
    }
    std::printf("  network.stage_handoff_us          %8s us        residuals %s s\n", num(m.stage_handoff_s * 1e6).c_str(), res.c_str());
    notes += "  network.stage_handoff_us = " + num(m.stage_handoff_s * 1e6) + ": 2-stage MP epochs of " + num(mean(mp.epoch_s)) +
             " s less compute and bubble (" + num(mean(mp.epoch_s) - left) + " s) over " +
             num(mp.work.steps_per_report * (micro + 1)) + " hand-offs; residuals " + res + " s\n";
    m.inter_bandwidth_bytes_per_s = m.intra_bandwidth_bytes_per_s;
    m.inter_latency_s = m.intra_latency_s;
    notes += "  network.inter_node: copied from intra_node (one node: nothing between nodes to measure)\n";
  } else {
    notes += "  network: not measured (no mpirun); the values before were kept\n";
  }
  // A trial's setup: the median over the later trials of the multi-trial run.
  {
    std::vector<double> setups = by_tag("dense-64")->setup_s;
    std::sort(setups.begin(), setups.end());
    m.trial_setup_s = setups.empty() ? 0 : setups[setups.size() / 2];
    std::string all;
    for (double v : setups) all += (all.empty() ? "" : ", ") + num(v, 3);
    std::printf("  startup.trial_seconds             %8s s         the median of %s s\n", num(m.trial_setup_s).c_str(), all.c_str());
    notes += "  startup.trial_seconds = " + num(m.trial_setup_s) + ": the median of the dense-64 run's trials after the first, their " +
             "seconds beyond their epochs (" + all + " s)\n";
  }
  // Start-up, from each run's hello (the group's registration) and first epoch: a group of one rank
  // (a process of this machine) says hello after `seconds`; one of more ranks (mpirun) after
  // parallel_seconds more (per_rank_seconds: 2 ranks cannot separate it from parallel_seconds, so
  // 0); then each rank reads the data (load_seconds, the time from the hello to the first epoch
  // less a trial's setup; with a core per rank, as in these runs).
  {
    std::vector<double> one, many, load;
    for (const auto& r : runs) {
      if (r.hello_s < 0) continue;
      (r.data * r.model == 1 ? one : many).push_back(r.hello_s);
      load.push_back(std::max(0.0, r.startup_s - r.hello_s - m.trial_setup_s));
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v.empty() ? 0.0 : v[v.size() / 2];
    };
    if (!one.empty()) {
      m.startup_s = median(one);
      m.startup_parallel_s = many.empty() ? m.startup_parallel_s : std::max(0.0, median(many) - m.startup_s);
      m.startup_per_rank_s = 0;
      m.load_s = median(load);
    }
    std::string res;
    for (const auto& r : runs) {
      const double model = scheduler::startup_seconds(m, r.data * r.model) + m.load_s + m.trial_setup_s;
      res += (res.empty() ? "" : ", ") + num(r.startup_s - model, 3);
    }
    std::printf("  startup.seconds                   %8s s         parallel_seconds %s s, load_seconds %s s; residuals %s s\n",
                num(m.startup_s).c_str(), num(m.startup_parallel_s).c_str(), num(m.load_s).c_str(), res.c_str());
    notes += "  startup: seconds = the median hello of the 1-rank runs, parallel_seconds = the 2-rank runs' less that, "
             "per_rank_seconds 0 (2 ranks cannot separate it), load_seconds = the median of hello to first epoch less a "
             "trial's setup; residuals of the first epoch's start " + res + " s\n";
  }
  // Checkpoints: what the trainers' own checkpoint costs (serialising, writing, fsync, rename), from
  // the checkpointing run's second trial: its seconds beyond its epochs, less a trial's setup, over
  // its 4 checkpoints. Else (nothing left, the noise larger than the writes) a raw write of 32 MB.
  {
    const Measured& c = *by_tag("checkpoint");
    const double beyond = c.setup_s.empty() ? 0 : c.setup_s.front();
    const double each = (beyond - m.trial_setup_s) / static_cast<double>(std::max<std::size_t>(1, c.epoch_s.size()));
    if (each > 0 && c.work.checkpoint_bytes > 0) {
      m.disk_bytes_per_s = c.work.checkpoint_bytes / each;
      std::printf("  disk.bandwidth_mb_s               %8s MB/s     a checkpoint of %s MB in %s s\n", num(m.disk_bytes_per_s / 1e6).c_str(),
                  num(c.work.checkpoint_bytes / 1e6).c_str(), num(each, 3).c_str());
      notes += "  disk: the trainers' checkpoints, " + num(c.work.checkpoint_bytes / 1e6) + " MB each in " + num(each, 3) +
               " s (a width-512 run's second trial, " + num(beyond, 3) + " s beyond its epochs, less a trial's setup, over " +
               std::to_string(c.epoch_s.size()) + " checkpoints)\n";
    } else if (const double d = disk_bytes_per_s(dir); d > 0) {
      m.disk_bytes_per_s = d;
      std::printf("  disk.bandwidth_mb_s               %8s MB/s     (a raw write: the checkpoints left nothing to measure)\n",
                  num(d / 1e6).c_str());
      notes += "  disk: 32 MB written and fsync'd in " + dir.substr(0, dir.rfind('/')) + " (the checkpoints left nothing to measure)\n";
    }
  }
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
