#include "config/trial_work.h"

#include <algorithm>
#include <cmath>

#include "trainers/trainer_settings.h"

namespace hpctune::config {
namespace {

constexpr double kImageSide = 28, kChannels = 1, kClasses = 10, kDatasetImages = 60000, kTestImages = 10000;

bool declares(const std::vector<SettingDecl>& decls, const char* key) {
  return std::any_of(decls.begin(), decls.end(), [&](const SettingDecl& d) { return d.key == key; });
}

// Forward multiply-adds and parameters of a dense layer in -> out; its stage-balancing cost
// (multiply-adds, its output and its activation's) appended to `costs`.
void dense(double in, double out, double& macs, double& params, std::vector<double>& costs) {
  macs += in * out;
  params += in * out + out;
  costs.push_back(in * out + 2 * out);
}

}  // namespace

Result<TrialWork> trial_work(const nlohmann::json& trainer) {
  const std::string kind = trainer.is_object() ? trainer.value("kind", std::string()) : std::string();
  HPCTUNE_ASSIGN(const std::vector<SettingDecl>* decls, trainers::trainer_setting_specs(kind));
  nlohmann::json settings = trainer;
  settings.erase("kind");
  // Keep only declared keys: a trial's params may name a test function's x1, x2, ...
  for (auto it = settings.begin(); it != settings.end();) {
    if (declares(*decls, it.key().c_str())) ++it;
    else it = settings.erase(it);
  }
  trainers::SettingsReader r(kind, settings, *decls);
  TrialWork w;
  if (declares(*decls, "seconds_per_step")) {
    HPCTUNE_ASSIGN(w.seconds_per_step, r.number("seconds_per_step"));
    if (declares(*decls, "parameters")) {
      HPCTUNE_ASSIGN(const int64_t p, r.integer("parameters"));
      w.parameter_bytes = 4.0 * static_cast<double>(p);
    }
    if (declares(*decls, "batches_per_step")) {
      HPCTUNE_ASSIGN(const int64_t b, r.integer("batches_per_step"));
      w.steps_per_report = static_cast<double>(b);
    }
    if (declares(*decls, "layers")) {
      HPCTUNE_ASSIGN(const nlohmann::json l, r.value("layers"));
      if (l.is_number_integer()) w.layers = std::max<int64_t>(1, l.get<int64_t>());
    }
    return w;
  }
  const bool dense_stack = declares(*decls, "hidden");
  if (!dense_stack && !(declares(*decls, "layers") && r.raw("layers").is_array())) {
    return err(Errc::kInvalidArgument, kind + " trainer: the simulator's cost model knows neither its network nor its seconds_per_step");
  }
  w.has_network = true;
  double macs = 0, params = 0;
  int64_t weighted = 0;
  // The first layer with weights: its multiply-adds (no input gradient in its backward).
  double first_macs = -1;
  auto note_first = [&] {
    if (first_macs < 0) first_macs = macs;
  };
  double h = kImageSide, wd = kImageSide, c = kChannels;
  if (dense_stack) {
    HPCTUNE_ASSIGN(const nlohmann::json hidden, r.value("hidden"));
    std::vector<double> widths;
    if (hidden.is_array()) {
      for (const auto& x : hidden) widths.push_back(x.get<double>());
    } else {
      int64_t n = 1;
      if (r.has("layers")) {
        HPCTUNE_ASSIGN(n, r.integer("layers"));
      }
      widths.assign(static_cast<std::size_t>(n), hidden.get<double>());
    }
    double in = h * wd * c;
    for (double u : widths) {
      dense(in, u, macs, params, w.layer_costs);
      note_first();
      in = u;
      ++weighted;
    }
    h = wd = 1;
    c = in;
  } else {
    for (const auto& layer : r.raw("layers")) {
      if (!layer.is_object()) continue;  // a named block (architecture search): not costed
      const std::string lk = layer.value("kind", std::string());
      if (lk == "conv") {
        const double f = layer.value("filters", 1.0), k = layer.value("kernel", 3.0);
        const double s = std::max(1.0, layer.value("stride", 1.0));
        const bool same = layer.value("padding", std::string("same")) == "same";
        const double oh = same ? std::ceil(h / s) : std::floor((h - k) / s) + 1;
        const double ow = same ? std::ceil(wd / s) : std::floor((wd - k) / s) + 1;
        macs += k * k * c * f * oh * ow;
        params += k * k * c * f + f;
        note_first();
        w.layer_costs.push_back(k * k * c * f * oh * ow + 2 * f * oh * ow);
        h = std::max(1.0, oh);
        wd = std::max(1.0, ow);
        c = f;
        ++weighted;
        w.convolutional = true;
      } else if (lk == "maxpool") {
        const double z = std::max(1.0, layer.value("size", 2.0)), s = std::max(1.0, layer.value("stride", z));
        h = std::max(1.0, std::floor((h - z) / s) + 1);
        wd = std::max(1.0, std::floor((wd - z) / s) + 1);
        if (!w.layer_costs.empty()) w.layer_costs.back() += c * h * wd;  // the stage of the layer before
      } else if (lk == "dense") {
        const double u = layer.value("units", 1.0);
        dense(h * wd * c, u, macs, params, w.layer_costs);
        note_first();
        h = wd = 1;
        c = u;
        ++weighted;
      }
    }
  }
  dense(h * wd * c, kClasses, macs, params, w.layer_costs);
  note_first();
  ++weighted;
  // Forward: 2 FLOPs per multiply-add. Backward: the weights' gradient as much again, and the input's
  // gradient as much again for every layer but the first (the trainers compute no gradient of the
  // images: nn/layers_dense.cpp and layers_conv.cpp skip dx for the first layer).
  w.forward_flops_per_image = 2 * macs;
  w.flops_per_image = 3 * 2 * macs - 2 * first_macs;
  w.parameter_bytes = 4 * params;
  w.layers = weighted;
  HPCTUNE_ASSIGN(w.batch_size, r.integer("batch_size"));
  w.images_per_step = static_cast<double>(w.batch_size);
  HPCTUNE_ASSIGN(const int64_t cap, r.integer("max_train_samples"));
  HPCTUNE_ASSIGN(const double val, r.number("val_fraction"));
  const double images = (cap > 0 ? std::min<double>(static_cast<double>(cap), kDatasetImages) : kDatasetImages) * (1 - val);
  w.steps_per_report = std::ceil(images / w.images_per_step);
  // Evaluation: the validation images every epoch, and the test images once, spread over the epochs.
  HPCTUNE_ASSIGN(const int64_t test_cap, r.integer("max_test_samples"));
  HPCTUNE_ASSIGN(const int64_t epochs, r.integer("epochs"));
  const double pool = cap > 0 ? std::min<double>(static_cast<double>(cap), kDatasetImages) : kDatasetImages;
  const double test = test_cap > 0 ? std::min<double>(static_cast<double>(test_cap), kTestImages) : kTestImages;
  w.eval_images_per_report = pool * val + test / static_cast<double>(std::max<int64_t>(1, epochs));
  HPCTUNE_ASSIGN(const bool ckpt, r.boolean("checkpoint"));
  const std::string optimizer = declares(*decls, "optimizer") ? r.raw("optimizer").get<std::string>() : "sgd";
  w.checkpoint_bytes = ckpt ? w.parameter_bytes * (optimizer == "sgd" ? 2 : 3) : 0;  // weights + optimizer state
  HPCTUNE_ASSIGN(w.micro_batches, r.integer("micro_batches"));
  return w;
}

}  // namespace hpctune::config
