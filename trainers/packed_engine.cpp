// The pack engine (packed_engine.h): the rounds' barrier and the round itself on the GPU.
#include "trainers/packed_engine.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <optional>

#include "gpu/gpu_backend.h"
#include "gpu/gpu_context.h"
#include "gpu/gpu_packed_mlp.h"

namespace hpctune::trainers {

std::string pack_refusal(const std::string& kind, const ClassifierSettings& s, int ranks) {
  if (kind != "mlp") return "kind " + kind + " (the packed model is the mlp's)";
  if (!s.gpu) return "device cpu (packing is a GPU path)";
  if (ranks > 1) return "a group of " + std::to_string(ranks) + " ranks (packed trials are one rank each)";
  if (s.optimizer.kind != nn::OptimizerKind::kSgd) {
    return std::string("optimizer ") + nn::optimizer_kind_name(s.optimizer.kind) + " (the packed model trains SGD only)";
  }
  if (s.precision != "fp32" && s.precision != "tf32") return "precision " + s.precision + " (the packed model trains fp32 or tf32)";
  for (size_t i = 0; i < s.layers.size(); ++i) {
    const nn::LayerSpec& l = s.layers[i];
    if (l.kind == "dropout" || l.rate > 0.0) return "dropout (the packed model has none)";
    if (l.kind != "dense" || l.activation != "relu") {
      return "layer " + std::to_string(i) + " is " + l.kind + " " + l.activation +
             " (the packed model has dense ReLU layers only)";
    }
  }
  if (s.freeze > 0) return "freeze (every layer of a packed model trains)";
  if (s.head_epochs > 0 || s.body_lr_scale != 1.0) {
    return "head_epochs or body_lr_scale (the packed model trains every layer at one rate)";
  }
  return "";
}

std::string PackShape::describe() const {
  std::string out;
  for (int64_t v : sizes) {
    if (!out.empty()) out += '-';
    out += std::to_string(v);
  }
  return out + ", batch " + std::to_string(batch) + ", " + std::to_string(n_train) + " training rows, " + precision +
         (nesterov ? ", nesterov" : "");
}

namespace {

struct Member {
  PackedEpoch* submitted = nullptr;
  bool done = false;
  Status status;
};

}  // namespace

struct PackEngine::State {
  mutable std::mutex mu;
  std::condition_variable cv;
  int64_t slots = 0, next_id = 0;
  std::map<int64_t, Member> members;
  std::optional<PackShape> shape;
  bool running = false;
  std::vector<Member*> round;  // the members of the round that runs
  // The GPU side: only the thread that runs a round touches it (one round at a time).
  std::optional<gpu::GpuContext> ctx;
  std::string device;
  std::optional<gpu::GpuPackedDataset> data;
  const Dataset* data_of = nullptr;
  std::vector<int32_t> data_map;
  int64_t data_models = 0;
  bool tf32 = false;

  bool all_submitted() const {
    if (members.empty()) return false;
    return std::all_of(members.begin(), members.end(),
                       [](const auto& m) { return m.second.submitted != nullptr && !m.second.done; });
  }
  Status open_gpu();
  Status prepare_data(const PackShape& shape, int64_t models);
  Status run_round(const PackShape& shape, const std::vector<PackedEpoch*>& epochs);
};

Status PackEngine::State::open_gpu() {
  if (ctx) return Status::Ok();
  auto library = gpu::GpuLibrary::open_default();
  if (!library.ok()) return std::move(library).error().with_context("packed trials: device: gpu");
  const gpu::GpuInventory inventory = library->inventory();
  if (inventory.devices.empty()) {
    return err(Errc::kUnavailable, "packed trials: device: gpu, but no GPU is usable here: " + inventory.no_device_reason);
  }
  auto made = gpu::GpuContext::create(*library, 0);
  if (!made.ok()) return std::move(made).error().with_context("packed trials: device: gpu");
  ctx.emplace(std::move(made).value());
  device = "GPU 0 (" + inventory.devices.front().name + ")";
  return Status::Ok();
}

// The training set on the device, uploaded again only for another data set, class map or pack size.
Status PackEngine::State::prepare_data(const PackShape& shape, int64_t models) {
  if (data && data_of == shape.train && data_map == shape.label_map && data_models == models) return Status::Ok();
  data.reset();
  const Dataset& d = *shape.train;
  std::vector<int32_t> labels(d.labels.size());
  for (size_t i = 0; i < labels.size(); ++i) {
    labels[i] = std::max(shape.label_map[static_cast<size_t>(d.labels[i])], 0);  // a class left out is never gathered
  }
  HPCTUNE_ASSIGN(gpu::GpuPackedDataset made,
                 gpu::GpuPackedDataset::create(*ctx, d.images, labels, d.features(), models, shape.batch));
  data.emplace(std::move(made));
  data_of = shape.train;
  data_map = shape.label_map;
  data_models = models;
  return Status::Ok();
}

Status PackEngine::State::run_round(const PackShape& shape, const std::vector<PackedEpoch*>& epochs) {
  HPCTUNE_TRY(open_gpu());
  const bool want_tf32 = shape.precision == "tf32";
  if (want_tf32 != tf32) {
    HPCTUNE_TRY(ctx->check(ctx->api().set_tf32(ctx->raw(), want_tf32 ? 1 : 0), "set cuBLAS math mode"));
    tf32 = want_tf32;
  }
  const int64_t k = static_cast<int64_t>(epochs.size());
  HPCTUNE_TRY(prepare_data(shape, k));
  const size_t per_model = gpu::GpuPackedMlp::num_params(shape.sizes);
  const int64_t batches = (shape.n_train + shape.batch - 1) / shape.batch;
  std::vector<float> params, velocity, lrs(static_cast<size_t>(k));
  std::vector<int32_t> orders;
  std::vector<gpu::GpuPackedTrial> trials;
  bool momentum = false;
  for (const PackedEpoch* e : epochs) {
    if (e->params.size() != per_model || static_cast<int64_t>(e->order.size()) != shape.n_train ||
        static_cast<int64_t>(e->lrs.size()) != batches || (!e->velocity.empty() && e->velocity.size() != per_model)) {
      return err(Errc::kInternal, "packed trials: a member's epoch does not fit the pack (" + shape.describe() + ")");
    }
    params.insert(params.end(), e->params.begin(), e->params.end());
    orders.insert(orders.end(), e->order.begin(), e->order.end());
    trials.push_back({e->lrs.front(), e->momentum, e->weight_decay});
    momentum = momentum || e->momentum != 0.0f;
  }
  HPCTUNE_ASSIGN(gpu::GpuPackedMlp model,
                 gpu::GpuPackedMlp::create(*ctx, shape.sizes, shape.batch, params, trials, shape.nesterov));
  if (momentum) {
    for (const PackedEpoch* e : epochs) {
      if (e->velocity.empty()) velocity.insert(velocity.end(), per_model, 0.0f);
      else velocity.insert(velocity.end(), e->velocity.begin(), e->velocity.end());
    }
    HPCTUNE_TRY(model.set_velocity(velocity));
  }
  HPCTUNE_TRY(data->set_orders(orders, shape.n_train));
  for (int64_t b = 0; b < batches; ++b) {
    const int64_t start = b * shape.batch, n = std::min(shape.batch, shape.n_train - start);
    for (int64_t i = 0; i < k; ++i) lrs[static_cast<size_t>(i)] = epochs[static_cast<size_t>(i)]->lrs[static_cast<size_t>(b)];
    HPCTUNE_TRY(model.set_learning_rates(lrs));
    HPCTUNE_TRY(data->gather(start, n));
    HPCTUNE_TRY(model.train_step(data->batch_x(), data->batch_labels(), n));
  }
  HPCTUNE_ASSIGN(gpu::GpuPackedStats stats, model.take_stats());
  HPCTUNE_ASSIGN(params, model.params());
  if (momentum) {
    HPCTUNE_ASSIGN(velocity, model.velocity());
  }
  for (size_t i = 0; i < epochs.size(); ++i) {
    PackedEpoch& e = *epochs[i];
    const auto from = static_cast<std::ptrdiff_t>(i * per_model), to = from + static_cast<std::ptrdiff_t>(per_model);
    e.params.assign(params.begin() + from, params.begin() + to);
    if (momentum && e.momentum != 0.0f) e.velocity.assign(velocity.begin() + from, velocity.begin() + to);
    e.stats = nn::BatchStats{stats.loss_sum[i], stats.correct[i], stats.count};
    e.packed_with = k - 1;
  }
  return Status::Ok();
}

PackEngine& PackEngine::instance() {
  static PackEngine engine;
  return engine;
}

PackEngine::PackEngine() : st_(std::make_unique<State>()) {}
PackEngine::~PackEngine() = default;

void PackEngine::set_slots(int64_t slots) {
  std::lock_guard lock(st_->mu);
  st_->slots = slots;
}

int64_t PackEngine::slots() const {
  std::lock_guard lock(st_->mu);
  return st_->slots;
}

std::string PackEngine::device() const {
  std::lock_guard lock(st_->mu);
  return st_->device;
}

Result<int64_t> PackEngine::join(const PackShape& shape) {
  std::lock_guard lock(st_->mu);
  if (st_->slots < 2) return err(Errc::kInvalidArgument, "not packed: this worker has one slot");
  if (st_->shape && !(*st_->shape == shape)) {
    return err(Errc::kInvalidArgument, "not packed: its shape (" + shape.describe() + ") is not the pack's (" +
                                           st_->shape->describe() + ", or another data set or classes)");
  }
  if (!st_->shape) st_->shape = shape;
  const int64_t id = st_->next_id++;
  st_->members[id] = Member{};
  return id;
}

void PackEngine::leave(int64_t id) {
  std::lock_guard lock(st_->mu);
  if (st_->members.erase(id) == 0) return;
  if (st_->members.empty() && !st_->running) st_->shape.reset();
  st_->cv.notify_all();
}

Result<bool> PackEngine::train_epoch(int64_t id, PackedEpoch& epoch, const std::function<bool()>& stop) {
  State& s = *st_;
  std::unique_lock lock(s.mu);
  auto it = s.members.find(id);
  if (it == s.members.end()) return err(Errc::kInternal, "packed trials: member " + std::to_string(id) + " left the pack");
  Member& me = it->second;
  me.submitted = &epoch;
  me.done = false;
  s.cv.notify_all();
  while (!me.done) {
    if (s.running || !s.all_submitted()) {
      if (!stop) {
        s.cv.wait(lock);
        continue;
      }
      s.cv.wait_for(lock, std::chrono::milliseconds(20));
      if (!me.done && stop()) {  // not in a round yet (a round marks its members done under the lock)
        const bool in_round = s.running && std::find(s.round.begin(), s.round.end(), &me) != s.round.end();
        if (!in_round) {
          me.submitted = nullptr;
          s.cv.notify_all();
          return false;
        }
      }
      continue;
    }
    // The last to arrive runs the round for everyone waiting (no one else can leave meanwhile:
    // every member is waiting here).
    std::vector<Member*>& round = s.round;
    round.clear();
    std::vector<PackedEpoch*> epochs;
    for (auto& [mid, m] : s.members) {
      round.push_back(&m);
      epochs.push_back(m.submitted);
    }
    const PackShape shape = *s.shape;
    s.running = true;
    lock.unlock();
    Status st = s.run_round(shape, epochs);
    lock.lock();
    s.running = false;
    for (Member* m : round) {
      m->done = true;
      m->status = st;
    }
    round.clear();
    if (s.members.empty()) s.shape.reset();
    s.cv.notify_all();
  }
  me.submitted = nullptr;
  me.done = false;
  if (!me.status.ok()) return me.status.error();
  return true;
}

}  // namespace hpctune::trainers
