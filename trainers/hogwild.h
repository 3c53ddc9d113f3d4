// HogwildEpoch: one epoch of trainer.sync: hogwild (Recht, Re, Wright and Niu, "Hogwild!", NIPS
// 2011) inside one rank of the classifier loop (classifier_training.h): `threads` threads take the
// epoch's minibatches from a shared counter and update ONE weight vector without locks.
//
// Thread 0 is the calling thread and trains the loop's own network, whose parameters are the
// shared weights, with the loop's optimizer (so checkpoints hold its state). Every other thread has
// a network of the same architecture: before each minibatch it copies the shared weights into it,
// computes the gradient there and applies its own optimizer's step (its own momentum or Adam
// buffers) straight to the shared weights. Reads and writes of the shared weights by different
// threads race by design (Hogwild's premise: sparse-enough updates that collide rarely; a float
// store is never torn on the machines we build for): the result is not deterministic with more
// than one thread. With one thread it is the loop's plain step, bit for bit: the same minibatches
// in the same order, the same dropout stream, the same optimizer calls.
//
// Minibatch i of the epoch uses the learning rate of step first_step + i. Dropout: thread 0 draws
// from the loop's stream; thread t > 0 from a stream seeded by derive_seed(epoch_seed, t).
// Each thread sets its BLAS and oneDNN threads to 1 and flushes denormals as the loop does.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "common/result.h"
#include "common/rng.h"
#include "nn/network.h"
#include "nn/optimizer.h"

namespace hpctune::trainers {

struct HogwildEpochResult {
  nn::BatchStats stats;     // every minibatch's stats (as seen with dropout), thread 0's first
  bool stopped = false;     // stop_requested() answered true
  bool diverged = false;    // a minibatch's loss was not finite
  int64_t batches_done = 0;
};

class HogwildWorkers {
 public:
  // One network and optimizer for each of threads 1..threads-1, made by `make_network` (frozen as
  // the loop's). kInvalidArgument for threads < 1 or above 256.
  static Result<std::unique_ptr<HogwildWorkers>> create(int threads, size_t params,
                                                        const nn::OptimizerOptions& options,
                                                        const std::function<Result<nn::Network>()>& make_network);

  // Trains `batches` minibatches. `train(thread, batch_no, net, rng)` gathers minibatch batch_no
  // into the thread's own buffers and returns net.forward_backward()'s stats (grads in net);
  // `stop_requested` is polled by thread 0 every `stop_poll` of its minibatches.
  HogwildEpochResult run(nn::Network& net, nn::Optimizer& optimizer, const std::vector<nn::ParamBlock>& blocks,
                         int64_t batches, int64_t first_step, const std::function<float(int64_t step)>& lr,
                         uint64_t epoch_seed, Rng& thread0_rng,
                         const std::function<nn::BatchStats(int thread, int64_t batch_no, nn::Network& net, Rng& rng)>& train,
                         const std::function<bool()>& stop_requested, int64_t stop_poll);

  int threads() const noexcept { return static_cast<int>(networks_.size()) + 1; }

 private:
  HogwildWorkers() = default;
  std::vector<nn::Network> networks_;      // threads 1..
  std::vector<nn::Optimizer> optimizers_;  // threads 1..
};

}  // namespace hpctune::trainers
