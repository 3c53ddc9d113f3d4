// HogwildWorkers (hogwild.h).
#include "trainers/hogwild.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <thread>

#include "nn/blas.h"
#include "nn/denormals.h"
#include "nn/layers.h"  // dnnl_set_threads

namespace hpctune::trainers {

Result<std::unique_ptr<HogwildWorkers>> HogwildWorkers::create(int threads, size_t params,
                                                               const nn::OptimizerOptions& options,
                                                               const std::function<Result<nn::Network>()>& make_network) {
  if (threads < 1 || threads > 256) return err(Errc::kInvalidArgument, "hogwild: 1..256 threads");
  std::unique_ptr<HogwildWorkers> w(new HogwildWorkers());
  for (int t = 1; t < threads; ++t) {
    HPCTUNE_ASSIGN(nn::Network net, make_network());
    if (net.num_params() != params) return err(Errc::kInternal, "hogwild: a thread's network differs");
    w->networks_.push_back(std::move(net));
    w->optimizers_.emplace_back(params, options);
  }
  return w;
}

HogwildEpochResult HogwildWorkers::run(
    nn::Network& net, nn::Optimizer& optimizer, const std::vector<nn::ParamBlock>& blocks, int64_t batches,
    int64_t first_step, const std::function<float(int64_t)>& lr, uint64_t epoch_seed, Rng& thread0_rng,
    const std::function<nn::BatchStats(int, int64_t, nn::Network&, Rng&)>& train,
    const std::function<bool()>& stop_requested, int64_t stop_poll) {
  std::atomic<int64_t> next{0};
  std::atomic<bool> stop{false}, diverged{false};
  const int T = threads();
  std::vector<nn::BatchStats> stats(static_cast<size_t>(T));
  std::vector<int64_t> done(static_cast<size_t>(T), 0);
  const std::span<float> shared = net.params();

  auto worker = [&](int t) {
    const nn::FlushDenormals flush_denormals;
    if (t > 0) nn::dnnl_set_threads(1);
    Rng own(derive_seed(epoch_seed, static_cast<uint64_t>(t)));
    Rng& rng = t == 0 ? thread0_rng : own;
    nn::Network& mine = t == 0 ? net : networks_[static_cast<size_t>(t - 1)];
    nn::Optimizer& opt = t == 0 ? optimizer : optimizers_[static_cast<size_t>(t - 1)];
    int64_t taken = 0;
    while (!stop.load(std::memory_order_relaxed) && !diverged.load(std::memory_order_relaxed)) {
      if (t == 0 && taken > 0 && taken % stop_poll == 0 && stop_requested()) {
        stop.store(true);
        break;
      }
      const int64_t i = next.fetch_add(1);
      if (i >= batches) break;
      // The shared weights as they are now (other threads may be writing them: Hogwild).
      if (t > 0) std::memcpy(mine.params().data(), shared.data(), shared.size() * sizeof(float));
      const nn::BatchStats b = train(t, i, mine, rng);
      if (!std::isfinite(b.loss_sum)) {
        diverged.store(true);
        break;
      }
      opt.step(shared, mine.grads(), blocks, lr(first_step + i));
      stats[static_cast<size_t>(t)] += b;
      ++taken;
    }
    done[static_cast<size_t>(t)] = taken;
  };
  if (T > 1) nn::blas_set_threads(1);
  std::vector<std::thread> others;
  for (int t = 1; t < T; ++t) others.emplace_back(worker, t);
  worker(0);
  for (auto& th : others) th.join();

  HogwildEpochResult out;
  for (int t = 0; t < T; ++t) {
    out.stats += stats[static_cast<size_t>(t)];
    out.batches_done += done[static_cast<size_t>(t)];
  }
  out.stopped = stop.load();
  out.diverged = diverged.load();
  return out;
}

}  // namespace hpctune::trainers
