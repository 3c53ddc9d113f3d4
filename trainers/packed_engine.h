// Packed trials (issue 37, item 2): the built-in `mlp` trials of one worker process that train on
// its GPU are trained together, an epoch at a time, as ONE fused model (gpu/gpu_packed_mlp.h).
//
// A packed group is one worker process with k slots (resources.trials_per_gpu: k), each slot its
// own master connection running one trial on its own thread (worker/packed_worker.h). Each trial
// runs the usual classifier loop (classifier_training.h) with the packed epoch runner
// (epoch_runner_packed.cpp) when its settings fit the packed model (pack_refusal() says why not,
// and the trial then trains on its own usual path): its split, starting state, validation, reports,
// checkpoints, stops and predictions stay its own; only the epoch's minibatches go through here.
//
// The engine is a barrier at each epoch (a round): the members that joined and have not left submit
// their epoch (their parameters, momentum buffers, data order and per-minibatch learning rates),
// and the last to arrive runs the round for all of them on its own thread: one GpuPackedMlp built
// from the members' own parameters, one pass over the epoch's minibatches (each member its own
// order and learning rate; GpuPackedDataset), then each member gets its parameters, momentum and
// training stats back. A member that stops or ends leaves (it is no longer waited for); a trial
// that joins while a round runs trains from the next round. Members of one pack share the shape
// (layer sizes, batch, training rows, the data set and its class map, nesterov, precision); a trial
// of another shape is refused at join (and trains alone on the GPU).
//
// Arithmetic: each member's step is GpuMlp's (and so the GPU runner's, classifier_gpu.h), within
// fp32 rounding of the batched GEMMs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/result.h"
#include "nn/network.h"
#include "trainers/classifier_training.h"
#include "trainers/idx_dataset.h"

namespace hpctune::trainers {

class EpochRunner;

// The packed epoch runner (epoch_runner_packed.cpp; classifier_run.h's choose_epoch_runner() makes
// it in a worker with packing slots); `refusal` non-empty: why the trial cannot be packed (it then
// trains on the GPU runner, saying so).
std::unique_ptr<EpochRunner> make_packed_runner(const std::string& refusal);

// Why settings `s` of trainer kind `kind` on a group of `ranks` ranks cannot train in the packed
// model ("optimizer adam (the packed model trains SGD only)"); "" when they can.
std::string pack_refusal(const std::string& kind, const ClassifierSettings& s, int ranks);

// What members of one pack share.
struct PackShape {
  std::vector<int64_t> sizes;  // inputs, hidden widths, classes
  int64_t batch = 0;
  int64_t n_train = 0;         // training rows per epoch
  bool nesterov = false;
  std::string precision = "fp32";
  const Dataset* train = nullptr;  // the data set (a worker's DatasetCache shares it between trials)
  std::vector<int32_t> label_map;
  bool operator==(const PackShape&) const = default;
  std::string describe() const;
};

// One member's epoch: what it brings and what it gets back.
struct PackedEpoch {
  std::vector<float> params;        // in: its parameters (nn::Network's layout); out: after the epoch
  std::vector<float> velocity;      // in/out: its SGD momentum buffer (empty = zeros)
  std::vector<int32_t> order;       // the epoch's training rows, n_train of them
  std::vector<float> lrs;           // one learning rate per minibatch
  float momentum = 0.0f, weight_decay = 0.0f;
  // Out:
  nn::BatchStats stats;
  int64_t packed_with = 0;  // the other members of its round
};

class PackEngine {
 public:
  // The process's engine (a worker of a packed group configures it with its slots).
  static PackEngine& instance();
  PackEngine();
  ~PackEngine();

  // Slots > 1 turns packing on in this process; 0 or 1 off (the default).
  void set_slots(int64_t slots);
  int64_t slots() const;

  // A member of this shape joins; kInvalidArgument ("not packed: ...") when the pack's members
  // have another shape. Its id for the calls below.
  Result<int64_t> join(const PackShape& shape);
  // Leaves (idempotent): the rounds no longer wait for it.
  void leave(int64_t id);
  // Submits member `id`'s epoch and waits until a round has trained it (true). While it waits for
  // the others, `stop` is polled: once it says so, the member withdraws its epoch unless a round
  // has taken it already (false: not trained). An error of the round (the GPU failed) is every
  // member's.
  Result<bool> train_epoch(int64_t id, PackedEpoch& epoch, const std::function<bool()>& stop = {});
  // "GPU 0 (name)": where rounds run; "" before the first.
  std::string device() const;

 private:
  struct State;
  std::unique_ptr<State> st_;
};

}  // namespace hpctune::trainers
