#include "simulate/calibration.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <filesystem>

#include <Eigen/Dense>

#include "simulate/cost_model.h"
#include "store/store.h"

namespace hpctune::simulate {
namespace {

constexpr double kAssumedLatencyUs = 30;

using Measured = CalibrationRun;

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


// A line of the fit's report (printf's format, without the newline).
struct Lines {
  std::vector<std::string>* out;
  [[gnu::format(printf, 2, 3)]] void operator()(const char* fmt, ...) const {
    char b[1024];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(b, sizeof b, fmt, ap);
    va_end(ap);
    std::string s = b;
    if (!s.empty() && s.back() == '\n') s.pop_back();
    out->push_back(std::move(s));
  }
};

}  // namespace

std::vector<CalibrationCampaign> calibration_campaigns(bool with_mpirun) {
  std::vector<CalibrationCampaign> c = {
      {"dense", 1, 1, false},
      {"conv", 1, 1, true},
      {"dense-64", 1, 1, false, 64, 64, 4},  // 3 trials after the first: a trial's setup
      {"dense-b16", 1, 1, false, 256, 16},
      {"dense-512", 1, 1, false, 512, 32},
      {"checkpoint", 1, 1, false, 512, 64, 2, true},  // its second trial: 4 checkpoints beyond the setup
  };
  if (with_mpirun) {
    c.push_back({"dense-dp2", 2, 1, false});
    c.push_back({"dense-mp2", 1, 2, false});
  }
  return c;
}

std::string calibration_config(const CalibrationCampaign& c) {
  std::string t = "name: calibrate-" + c.tag + "\nseed: 7\nobjective: {metric: val_accuracy, mode: max}\n"
                  "search: {algorithm: random, max_trials: " + std::to_string(c.trials) + "}\nspace:\n  lr: {type: float, low: 0.05, high: 0.1}\n"
                  "trainer:\n";
  if (c.cnn) {
    t += "  kind: cnn\n  layers: [{kind: conv, filters: 8, kernel: 3}, {kind: maxpool, size: 2}, {kind: dense, units: 32}]\n"
         "  epochs: 3\n  max_train_samples: 3000\n";
  } else {
    t += "  kind: mlp\n  hidden: " + std::to_string(c.width) + "\n  layers: 2\n  epochs: 4\n  max_train_samples: 12000\n";
  }
  t += "  batch_size: " + std::to_string(c.batch) + "\n  max_test_samples: 200\n  checkpoint: " + (c.checkpoint ? "true" : "false") + "\n"
       "resources:\n  groups: 1\n  ranks: {data: " + std::to_string(c.data) + ", model: " + std::to_string(c.model) +
       "}\n  threads: 1\n  heartbeat_interval: 0.5\n  heartbeat_timeout: 60\n";
  return t;
}

Result<CalibrationRun> read_calibration_run(const CalibrationCampaign& c, const std::string& db) {
  CalibrationRun m;
  m.campaign = c;
  const int64_t trial_count = c.trials;
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

Result<CalibrationFit> fit_machine(const std::vector<CalibrationRun>& runs, config::MachineModel before, int64_t cores,
                                   const std::string& scratch) {
  CalibrationFit fitted;
  const Lines say{&fitted.lines};
  config::MachineModel m = std::move(before);
  m.name = "this-machine";
  m.calibrated_nodes = 1;
  m.ranks_per_node = std::max<int64_t>(1, cores);
  std::string notes = "Fitted by `hpctune simulate --calibrate` on this machine (" + std::to_string(m.ranks_per_node) +
                      " cores), from one-trial `hpctune run`s of Fashion-MNIST:\n";
  say("fitted (residual: measured - model, per epoch or launch):\n");
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
      if (r.campaign.tag == tag) return &r;
    return nullptr;
  };
  for (const auto& c : calibration_campaigns(false)) {
    if (by_tag(c.tag) == nullptr) return err(Errc::kInvalidArgument, "--calibrate: no measurement of the " + c.tag + " campaign");
  }
  auto residuals = [&](const Measured& r) {
    auto c = step_cost(m, r.work, r.campaign.data, r.campaign.model);
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
    say("  compute.mlp_gflops                %8s GFLOP/s   image_overhead_us %s, update_ns_per_param %s; residuals %s s\n",
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
    say("  compute.cnn_gflops                %8s GFLOP/s   residuals %s s\n", num(m.cnn_flops_per_s / 1e9).c_str(), res.c_str());
    notes += "  compute.cnn_gflops = " + num(m.cnn_flops_per_s / 1e9) + ": the 1-rank conv run (" + num(mean(r.epoch_s)) +
             " s an epoch) less the images' overhead and the updates; residuals " + res + " s\n";
  }
  if (by_tag("dense-dp2") != nullptr && by_tag("dense-mp2") != nullptr) {
    const Measured& dp = *by_tag("dense-dp2");
    auto dp_cost = step_cost(m, dp.work, 2, 1);
    const double compute = dp_cost.ok() ? dp_cost->compute_s : 0;
    const double per_allreduce = (mean(dp.epoch_s) - compute) / dp.work.steps_per_report;
    m.intra_latency_s = kAssumedLatencyUs * 1e-6;
    const double transfer = per_allreduce - 2 * m.intra_latency_s;
    if (transfer > 0) m.intra_bandwidth_bytes_per_s = dp.work.parameter_bytes / transfer;  // 2 (p-1)/p = 1 for p = 2
    std::string res;
    for (double t : dp.epoch_s) {
      auto c = step_cost(m, dp.work, 2, 1);
      res += (res.empty() ? "" : ", ") + num(t - (c.ok() ? c->total() : 0), 3);
    }
    say("  network.intra_node.bandwidth_gb_s %8s GB/s      residuals %s s%s\n", num(m.intra_bandwidth_bytes_per_s / 1e9).c_str(),
                res.c_str(), transfer > 0 ? "" : " (DP left nothing for its allreduce: kept)");
    notes += "  network.intra_node: 2-rank DP epochs of " + num(mean(dp.epoch_s)) + " s less half the 1-rank compute (" +
             num(compute) + " s) over " + num(dp.work.steps_per_report) + " allreduces of " + num(dp.work.parameter_bytes / 1e6) +
             " MB; latency_us " + num(kAssumedLatencyUs) + " assumed (one gradient size cannot separate it); residuals " + res + " s\n";
    const Measured& mp = *by_tag("dense-mp2");
    m.stage_handoff_s = 0;  // compute and bubble alone, then what is left per hand-off
    auto mp_cost = step_cost(m, mp.work, 1, 2);
    const double micro = static_cast<double>(mp.work.micro_batches > 0 ? mp.work.micro_batches : 4);
    const double left = mean(mp.epoch_s) - (mp_cost.ok() ? mp_cost->compute_s + mp_cost->bubble_s : 0);
    m.stage_handoff_s = std::max(0.0, left / (mp.work.steps_per_report * (micro + 1)));
    res.clear();
    for (double t : mp.epoch_s) {
      auto c = step_cost(m, mp.work, 1, 2);
      res += (res.empty() ? "" : ", ") + num(t - (c.ok() ? c->total() : 0), 3);
    }
    say("  network.stage_handoff_us          %8s us        residuals %s s\n", num(m.stage_handoff_s * 1e6).c_str(), res.c_str());
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
    say("  startup.trial_seconds             %8s s         the median of %s s\n", num(m.trial_setup_s).c_str(), all.c_str());
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
      (r.campaign.data * r.campaign.model == 1 ? one : many).push_back(r.hello_s);
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
      const double model = startup_seconds(m, r.campaign.data * r.campaign.model) + m.load_s + m.trial_setup_s;
      res += (res.empty() ? "" : ", ") + num(r.startup_s - model, 3);
    }
    say("  startup.seconds                   %8s s         parallel_seconds %s s, load_seconds %s s; residuals %s s\n",
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
      say("  disk.bandwidth_mb_s               %8s MB/s     a checkpoint of %s MB in %s s\n", num(m.disk_bytes_per_s / 1e6).c_str(),
                  num(c.work.checkpoint_bytes / 1e6).c_str(), num(each, 3).c_str());
      notes += "  disk: the trainers' checkpoints, " + num(c.work.checkpoint_bytes / 1e6) + " MB each in " + num(each, 3) +
               " s (a width-512 run's second trial, " + num(beyond, 3) + " s beyond its epochs, less a trial's setup, over " +
               std::to_string(c.epoch_s.size()) + " checkpoints)\n";
    } else if (const double d = disk_bytes_per_s(scratch); d > 0) {
      m.disk_bytes_per_s = d;
      say("  disk.bandwidth_mb_s               %8s MB/s     (a raw write: the checkpoints left nothing to measure)\n",
                  num(d / 1e6).c_str());
      notes += "  disk: 32 MB written and fsync'd in " + scratch.substr(0, scratch.rfind('/')) + " (the checkpoints left nothing to measure)\n";
    }
  }
  fitted.machine = std::move(m);
  fitted.notes = std::move(notes);
  return fitted;
}

}  // namespace hpctune::simulate
