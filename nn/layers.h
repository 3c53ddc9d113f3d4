// The layer kinds behind Network (network.h), private to the trainers library: Network::create()
// builds them from LayerSpecs, tests build them directly for gradient checks.
//
// Kernels: dense layers are one OpenBLAS SGEMM per batch with bias and activation fused into one
// pass over the result; conv and maxpool are oneDNN primitives (convolution with bias and a fused
// ReLU post-op, pooling with a workspace), created once per batch size and cached in the layer.
//
// Concurrency: a layer may be called from one thread at a time (its cached kernels and scratch
// buffers are shared by every pass); per-pass state lives in the LayerState the caller holds.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/network.h"

namespace hpctune::nn {

enum class LayerActivation { kNone, kRelu, kTanh, kSigmoid };

// "none" | "relu" | "tanh" | "sigmoid"; false otherwise.
bool parse_layer_activation(const std::string& name, LayerActivation& out) noexcept;
const char* layer_activation_name(LayerActivation a) noexcept;
// dz = dy * act'(z) over `count` values, with act' written in terms of the output y = act(z) (the
// backward pass keeps y, not z). kNone copies dy. dz may not alias dy.
void activation_backward(LayerActivation a, const float* y, const float* dy, float* dz, size_t count) noexcept;

// Dense: [batch, in.size()] -> [batch, units]. Parameters: W [in.size(), units] row-major, then b.
std::unique_ptr<Layer> make_dense_layer(Shape in, int64_t units, LayerActivation activation);

// The memory layout of an activation tensor between two layers. Network::create() keeps the
// tensors between two oneDNN layers (conv, maxpool) in oneDNN's channel-blocked layout
// (nChw16c on AVX-512, nChw8c otherwise; [batch][C / block][H][W][block]) when C is a multiple of the
// block, so that no layer converts layouts on every batch; every other tensor is plain NCHW. Both
// are sample-major and of the same size, so batches still split by sample ranges.
enum class Layout { kPlain, kBlocked };
// The block used for Layout::kBlocked on this CPU (16 or 8).
int64_t blocked_layout_block() noexcept;

// Convolution, square `kernel` (odd), `stride`, padding "same" (output ceil(H / stride), the
// padding split evenly, any odd extra low-right) or "valid" (none). Parameters: W [filters, C, k, k]
// (OIHW), then b [filters]. The activation is fused into the convolution as a oneDNN post-op.
// The caller has checked that the output is non-empty (conv_output_size() >= 1).
std::unique_ptr<Layer> make_conv_layer(Shape in, int64_t filters, int64_t kernel, int64_t stride, bool same_padding,
                                       LayerActivation activation, Layout in_layout = Layout::kPlain,
                                       Layout out_layout = Layout::kPlain);
int64_t conv_output_size(int64_t in, int64_t kernel, int64_t stride, bool same_padding) noexcept;

// Max pooling, `size` x `size` windows every `stride`, no padding: output (H - size) / stride + 1.
std::unique_ptr<Layer> make_maxpool_layer(Shape in, int64_t size, int64_t stride, Layout in_layout = Layout::kPlain,
                                          Layout out_layout = Layout::kPlain);

// Inverted dropout: in training, each value is zeroed with probability `rate`, the rest scaled by
// 1 / (1 - rate); identity in inference. The mask is drawn from the forward() Rng, 32 bits a value.
std::unique_ptr<Layer> make_dropout_layer(Shape in, double rate);

// The default CNN of the `cnn` trainer, the Fashion-MNIST benchmark table's "2 conv + pool + FC
// 1024": conv 5x5 32 same relu, maxpool 2, conv 5x5 64 same relu, maxpool 2, dense 1024 relu,
// dropout `dropout` (omitted when 0); Network::create() appends the output layer.
std::vector<LayerSpec> default_cnn_layer_specs(double dropout = 0.0);

// Sets the thread count of oneDNN's OpenMP runtime for primitives run from the calling thread, and
// makes that pool's threads flush denormals to zero (denormals.h).
void dnnl_set_threads(int threads) noexcept;
// The instruction set oneDNN dispatches to ("avx512_core", ...).
std::string dnnl_isa_name();

}  // namespace hpctune::nn
