// Network: a feed-forward classifier as a sequence of layers, shared by the `mlp` and `cnn`
// trainers, by data parallelism (every replica holds the whole network) and by the model-parallel
// pipeline (a stage runs a contiguous range of layers).
//
// Data layout: a batch is contiguous, sample-major: [batch, C, H, W] in row-major order (NCHW), a
// dense layer's input/output is [batch, features]. A layer's per-sample shape is a Shape; dense
// activations have h = w = 1, so flattening is free (the memory does not move).
//
// Parameters: every parameter of every layer lives in one contiguous vector, layer after layer, in
// layer order; so do the gradients, in the same layout. An optimizer step is one loop, an allreduce
// of the gradients is one call, and a pipeline stage's parameters are one sub-range
// (param_range(first, last)).
//
// Passes: forward() keeps what backward() needs (each layer's output and its per-call state, such
// as dropout masks and pooling indices) in a Pass that the caller owns. A pipeline keeps one Pass
// per micro-batch in flight; nothing about a pass is stored in the Network or its layers, except
// kernels cached per batch size (oneDNN primitives), which passes share.
//
// Gradients: backward() ADDS into grads(); zero_grads() clears them. That is what micro-batches
// need (the sum over micro-batches), and single passes call zero_grads() first.
//
// Loss: softmax cross-entropy on the last layer's output (the logits). The gradient written is
// grad_scale * d(sum of per-sample losses)/d(logits); grad_scale = 1/global_batch makes the sum of
// every shard's and micro-batch's gradients the gradient of the global mean loss.
//
// Surgery (transfer learning, PBT): load layers from a checkpoint (checkpoint.h: load_layers,
// load_model), freeze the first n layers (freeze(): the optimizer skips their blocks) and put a new
// output layer of another size on the rest (replace_output_layer()).
//
// Determinism: results depend only on the parameters, the inputs, the dropout Rng and the thread
// count. Kernels never use atomics or thread-count-dependent reduction orders for a fixed thread
// count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "common/rng.h"
#include "trainers/layer_spec.h"

namespace hpctune::nn {

// Per-sample shape of an activation: channels x height x width.
struct Shape {
  int64_t c = 0, h = 1, w = 1;
  int64_t size() const noexcept { return c * h * w; }
  bool operator==(const Shape&) const = default;
};

// A contiguous range of the parameter vector. Weights decay; biases do not. The optimizer leaves
// a frozen block alone: no update and no change to its momentum or moment buffers
// (Network::freeze()), and updates the others at lr * lr_scale (a training loop's per-layer rates:
// a smaller one for transferred layers than for a new head; the Network's own blocks keep 1).
struct ParamBlock {
  size_t offset = 0;
  size_t size = 0;
  bool decay = false;
  bool frozen = false;
  float lr_scale = 1.0f;
};

// Sums over a batch: summed (not mean) loss, so that shards and micro-batches combine exactly.
struct BatchStats {
  double loss_sum = 0.0;
  int64_t correct = 0;
  int64_t count = 0;

  BatchStats& operator+=(const BatchStats& o) noexcept {
    loss_sum += o.loss_sum, correct += o.correct, count += o.count;
    return *this;
  }
  double mean_loss() const noexcept { return count > 0 ? loss_sum / static_cast<double>(count) : 0.0; }
  double accuracy() const noexcept { return count > 0 ? static_cast<double>(correct) / static_cast<double>(count) : 0.0; }
};

// One layer of a network as the config describes it, and the parser of a config's list of them
// ("layers[2].kernel: ..."): the trainer catalog's (trainers/layer_spec.h), which `hpctune validate`
// asks too.
using trainers::LayerSpec;
using trainers::parse_layer_specs;

// Per-call scratch of one layer (dropout mask, pooling workspace); created by the layer.
struct LayerState {
  virtual ~LayerState() = default;
};

class Layer {
 public:
  virtual ~Layer() = default;
  virtual std::string describe() const = 0;  // "conv 5x5 32 same relu", for logs and benches
  // The first word of describe(): "dense", "conv", "maxpool" or "dropout".
  std::string kind() const;
  virtual Shape input_shape() const = 0;
  virtual Shape output_shape() const = 0;
  virtual size_t num_params() const { return 0; }
  // Parameter blocks relative to this layer's first parameter.
  virtual std::vector<ParamBlock> param_blocks() const { return {}; }
  // The logical shape of each parameter block, in the same order (dense: W {in, units}, b {units};
  // conv: W {filters, C, k, k}, b {filters}); the product of each is its block's size. Checkpoint
  // manifests (checkpoint.h) compare layers by them.
  virtual std::vector<std::vector<int64_t>> param_shapes() const { return {}; }
  // Initial parameters (He or Glorot, biases 0), drawing only from `rng`.
  virtual void init(std::span<float> params, Rng& rng) const { (void)params, (void)rng; }
  virtual std::unique_ptr<LayerState> make_state() const { return nullptr; }
  // y[batch, output] = layer(x[batch, input]). `rng` is used only in training (dropout); may be
  // null when train is false.
  virtual void forward(std::span<const float> params, const float* x, float* y, int64_t batch, bool train, Rng* rng,
                       LayerState* state) = 0;
  // Given x and y of the matching forward() and dy = dL/dy: grads += dL/dparams, and dx = dL/dx
  // unless dx is null (the first layer of a network needs no input gradient).
  virtual void backward(std::span<const float> params, std::span<float> grads, const float* x, const float* y,
                        const float* dy, float* dx, int64_t batch, LayerState* state) = 0;
};

// Softmax cross-entropy over logits [batch, classes]. Returns the summed loss and the correct
// count. When dlogits is not null writes grad_scale * (softmax - onehot); when probs is not null
// writes the softmax probabilities. Labels in [0, classes).
BatchStats softmax_cross_entropy(const float* logits, const int32_t* labels, int64_t batch, int64_t classes,
                                 float grad_scale, float* dlogits, float* probs);

class Network {
 public:
  // Activations and states of one forward pass over layers [first, last), kept for backward().
  struct Pass {
    size_t first = 0, last = 0;
    int64_t batch = 0;
    const float* input = nullptr;             // not owned: must outlive backward()
    std::vector<std::vector<float>> outputs;  // per layer in the range; reused across calls
    std::vector<std::unique_ptr<LayerState>> states;
    const float* output() const noexcept { return outputs.empty() ? input : outputs.back().data(); }
  };

  // `input`: per-sample input shape (1 x 28 x 28 for Fashion-MNIST). kInvalidArgument for specs
  // that do not fit the shape (a kernel larger than the image, ...), naming the layer index.
  static Result<Network> create(Shape input, const std::vector<LayerSpec>& specs, int64_t classes);

  Network(Network&&) noexcept;
  Network& operator=(Network&&) noexcept;
  ~Network();

  Shape input_shape() const noexcept;
  int64_t classes() const noexcept;
  size_t num_layers() const noexcept;
  const Layer& layer(size_t i) const;
  std::string describe() const;  // one line per layer, with its parameter count

  size_t num_params() const noexcept;
  std::span<float> params() noexcept;
  std::span<const float> params() const noexcept;
  std::span<float> grads() noexcept;
  // Moves the gradients into `storage` (num_params() floats, such as this rank's slot of a node's
  // shared memory, TrainerGroup::gradient_buffer()), which `owner` keeps alive while the network
  // uses it; an empty span moves them back into the network's own memory. The values are copied.
  void use_gradient_storage(std::span<float> storage, std::shared_ptr<void> owner);
  // Blocks of the whole vector, in order.
  const std::vector<ParamBlock>& blocks() const noexcept;
  // {offset, size} of the parameters of layers [first, last).
  std::pair<size_t, size_t> param_range(size_t first, size_t last) const;

  void init(Rng& rng);
  void zero_grads() noexcept;

  // ---- surgery (transfer learning, checkpoint.h: load_layers) ----
  // Freezes layers [0, n) and unfreezes the rest: their blocks are marked frozen, so that an
  // Optimizer leaves their parameters and its state for them unchanged, and backward() computes
  // no gradients for them when no input gradient is asked for (they keep what they held, zero
  // after zero_grads()); a pipeline stage asked for dx still runs through them. Make gradient
  // engines after this call: a pipeline stage copies the blocks when it is made. kInvalidArgument
  // when n > num_layers().
  Status freeze(size_t n);
  size_t frozen_layers() const noexcept;
  // Replaces the output layer (dense, `classes` units, no activation) by one with `classes` units,
  // initialised from `rng` as init() would; every other layer keeps its parameters, the frozen
  // layers stay frozen and gradients are zeroed. kInvalidArgument when classes < 2 or the network's
  // gradients live in storage given by use_gradient_storage() (whose size would no longer fit).
  Status replace_output_layer(int64_t classes, Rng& rng);

  // Runs layers [first, last) on x [batch, layer(first).input_shape()]; the output is pass.output().
  void forward(size_t first, size_t last, const float* x, int64_t batch, bool train, Rng* rng, Pass& pass);
  // Back through the pass's layers: grads += ..., dx = dL/dx of the pass's input unless null
  // (with dx null, frozen layers are skipped: freeze()).
  void backward(const float* dy, float* dx, Pass& pass);

  // The whole network and the loss for one (sub-)batch: zero_grads() unless accumulate, forward,
  // loss with grad_scale, backward. Returns the batch's stats (as seen with dropout).
  BatchStats forward_backward(const float* x, const int32_t* labels, int64_t batch, float grad_scale, Rng& dropout_rng,
                              bool accumulate = false);
  // Inference without dropout; probs [batch, classes] is written when not null.
  BatchStats evaluate(const float* x, const int32_t* labels, int64_t batch, float* probs = nullptr);

 private:
  struct Impl;
  explicit Network(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace hpctune::nn
