// The settings of the `cnn` trainer kind (cnn_trainer.h): the classifier loop's, with its own
// learning rate, its layers, and the named blocks a searched architecture fills in.
#include "trainers/trainer_settings.h"

#include <algorithm>
#include <iterator>
#include <set>
#include <string>

#include "trainers/idx_header.h"
#include "trainers/internal_params.h"
#include "trainers/layer_spec.h"

namespace hpctune::trainers {

const std::vector<SettingDecl>& cnn_setting_specs() {
  // Not const: tests change a declaration through mutable_setting_specs_for_testing().
  static std::vector<SettingDecl> specs = [] {
    std::vector<SettingDecl> out = classifier_common_setting_specs();
    for (auto& d : out) {
      // 0.05 (the mlp's) drives the default CNN with momentum 0.9 to chance (dead ReLUs); 0.01 learns.
      if (d.key == "lr") {
        d.default_value = 0.01;
        d.help = "Learning rate (before lr_scaling); the default CNN does not learn at the mlp's 0.05.";
      }
    }
    // The Fashion-MNIST benchmark CNN: conv 5x5 32, pool 2, conv 5x5 64, pool 2, dense 1024.
    out.push_back({.key = "layers",
                   .type = SettingType::kValueList,
                   .default_value = nlohmann::json::parse(R"([
                     {"kind": "conv", "filters": 32, "kernel": 5}, {"kind": "maxpool", "size": 2},
                     {"kind": "conv", "filters": 64, "kernel": 5}, {"kind": "maxpool", "size": 2},
                     {"kind": "dense", "units": 1024}])"),
                   .help = "The CNN's hidden layers in order, each {kind: conv, filters, kernel, stride, padding, "
                           "activation} | {kind: maxpool, size, stride} | {kind: dense, units, activation} | "
                           "{kind: dropout, rate}; the output layer is added.",
                   .aliases = {"architecture", "network", "net"}});
    // Named blocks, for architecture search (configs/fashion_nas.yaml): each a searched choice among
    // layer lists, conditional on a depth parameter, placed where `layers` names it.
    out.push_back({.key = "blocks",
                   .type = SettingType::kInt,
                   .default_value = nullptr,
                   .min = 0,
                   .max = 4,
                   .help = "How many of block1..block4 are in use (default: every one that is set): a later one adds no "
                           "layers even when set. The parent of the blocks' conditions in an architecture search.",
                   .aliases = {"num_blocks", "depth"}});
    for (const char* block : kCnnBlocks) {
      out.push_back({.key = block,
                     .type = SettingType::kValueList,
                     .default_value = nullptr,
                     .help = std::string("A block of layers (a list of layer maps, as in layers) that takes the place of "
                                         "the entry '") +
                             block + "' of layers; absent (e.g. an inactive conditional parameter): no layers there."});
    }
    return out;
  }();
  return specs;
}

namespace {

bool is_cnn_block(const std::string& name) {
  return std::any_of(std::begin(kCnnBlocks), std::end(kCnnBlocks), [&](const char* b) { return name == b; });
}

// `layers` and the blocks (TrainerCapabilities::value_problem): lists whose entries are layer maps
// (layer_spec.h), or in `layers` also the name of a block, each once.
std::optional<std::pair<std::string, std::string>> cnn_value_problem(std::string_view key, const nlohmann::json& value) {
  const bool blocks_too = key == "layers";
  if (!blocks_too && !is_cnn_block(std::string(key))) return std::nullopt;
  if (!value.is_array()) return std::nullopt;  // the declaration (a list) refuses it
  const std::string block_names = "block1, block2, block3, block4, head";
  std::set<std::string> placed;
  // After a dense layer the images are 1x1 (through dropout layers too), whatever the data: a conv
  // right after it, a larger kernel or a pooling window there cannot be built (nn/network.cpp).
  bool after_dense = false, flat = false;
  for (std::size_t i = 0; i < value.size(); ++i) {
    const std::string at = "[" + std::to_string(i) + "]";
    const nlohmann::json& entry = value[i];
    if (entry.is_string() && blocks_too) {
      const std::string name = entry.get<std::string>();
      if (!is_cnn_block(name))
        return {{at, "'" + name + "' is neither a layer map nor a block; a layer is " + kLayerSpecForms +
                         ", a block one of " + block_names + " (a setting that holds a list of layers)"}};
      if (!placed.insert(name).second) return {{at, "the block '" + name + "' is placed twice"}};
      after_dense = flat = false;  // what the block holds is its own
      continue;
    }
    LayerSpec spec;
    if (auto p = read_layer_spec(entry, spec)) {
      std::string what = p->what + "; a layer is " + p->form;
      if (p->field.empty() && blocks_too) what += ", or a block (" + block_names + ")";
      return {{at + (p->field.empty() ? "" : "." + p->field), what}};
    }
    const std::string flat_input = " (a dense layer before it leaves 1x1 images; put conv and maxpool layers first)";
    if (spec.kind == "conv" && after_dense) return {{at + ".kind", "a conv right after a dense layer" + flat_input}};
    if (spec.kind == "conv" && flat && spec.kernel > 1)
      return {{at + ".kernel", "kernel " + std::to_string(spec.kernel) + " is larger than the 1x1 input" + flat_input}};
    if (spec.kind == "maxpool" && flat)
      return {{at + ".size", "window " + std::to_string(spec.size) + " is larger than the 1x1 input" + flat_input}};
    after_dense = spec.kind == "dense";
    flat = flat || after_dense;
  }
  return std::nullopt;
}

// The layers of its network (TrainerCapabilities::model_stages): each layer map of `layers`, the
// layers of each block it places (none for a block that is absent or beyond `blocks`), and the
// output layer; 0 when `layers` is not a list of those.
int64_t cnn_layer_count(const nlohmann::json& settings) {
  if (!settings.is_object() || !settings.contains("layers") || !settings["layers"].is_array()) return 0;
  const nlohmann::json& blocks = settings.contains("blocks") ? settings["blocks"] : nlohmann::json();
  int64_t count = 1;  // the output layer
  for (const auto& entry : settings["layers"]) {
    if (entry.is_object()) {
      ++count;
      continue;
    }
    if (!entry.is_string() || !is_cnn_block(entry.get<std::string>())) return 0;
    const std::string name = entry.get<std::string>();
    if (!settings.contains(name) || settings[name].is_null()) continue;  // absent: no layers there
    if (name != "head" && blocks.is_number() && name[5] - '0' > blocks.get<double>()) continue;  // beyond `blocks`
    if (!settings[name].is_array()) return 0;
    count += static_cast<int64_t>(settings[name].size());
  }
  return count;
}

// The layer maps of the network in order, each with the setting that gives it and its place there
// ("layers", "[2]"; "block1", "[0]"): `layers` with each block it places filled in (none for a block
// that is absent or beyond `blocks`). False when one of them is open (searched), or not a list.
struct PlacedLayer {
  std::string key, below;
  const nlohmann::json* map = nullptr;
};
bool placed_layers(const nlohmann::json& s, const std::vector<std::string>& open, std::vector<PlacedLayer>& out) {
  auto is_open = [&](const std::string& key) { return std::find(open.begin(), open.end(), key) != open.end(); };
  if (is_open("layers") || is_open("blocks") || !s.contains("layers") || !s["layers"].is_array()) return false;
  const nlohmann::json& blocks = s.contains("blocks") ? s["blocks"] : nlohmann::json();
  const nlohmann::json& layers = s["layers"];
  for (std::size_t i = 0; i < layers.size(); ++i) {
    if (layers[i].is_object()) {
      out.push_back({"layers", "[" + std::to_string(i) + "]", &layers[i]});
      continue;
    }
    if (!layers[i].is_string() || !is_cnn_block(layers[i].get<std::string>())) return false;
    const std::string name = layers[i].get<std::string>();
    if (is_open(name)) return false;
    if (!s.contains(name) || s[name].is_null()) continue;  // absent: no layers there
    if (name != "head" && blocks.is_number() && name[5] - '0' > blocks.get<double>()) continue;  // beyond `blocks`
    if (!s[name].is_array()) return false;
    for (std::size_t j = 0; j < s[name].size(); ++j) out.push_back({name, "[" + std::to_string(j) + "]", &s[name][j]});
  }
  return true;
}

// The cnn's data rule (TrainerCapabilities::data_rules): the classifier loop's, then its layers on the
// data's images, as nn/network.cpp (Network::create) builds them: a conv's kernel and a pooling window
// no larger than the image they get, which each conv (by its stride) and pooling layer shrinks.
std::optional<DataProblem> cnn_data_problem(const nlohmann::json& s, const std::vector<std::string>& open) {
  IdxSetShape shape;
  if (auto problem = classifier_data_problem(s, open, &shape)) return problem;
  std::vector<PlacedLayer> layers;
  if (shape.rows == 0 || !placed_layers(s, open, layers)) return std::nullopt;
  int64_t h = shape.rows, w = shape.cols;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    LayerSpec spec;
    if (read_layer_spec(*layers[i].map, spec)) return std::nullopt;  // value_problem refuses it
    const std::string input = " than the " + std::to_string(h) + "x" + std::to_string(w) + " image it gets (the " +
                              std::to_string(shape.rows) + "x" + std::to_string(shape.cols) + " images of '" +
                              s["data"].get<std::string>() + "'" + (i == 0 ? ")" : " after the layers before it)");
    if (spec.kind == "conv") {
      if (spec.kernel > h || spec.kernel > w)
        return DataProblem{layers[i].key, layers[i].below + ".kernel", "kernel " + std::to_string(spec.kernel) + " is larger" + input};
      const int64_t stride = spec.stride == 0 ? 1 : spec.stride;
      const bool same = spec.padding == "same";  // nn/layers_conv.cpp: conv_output_size
      h = same ? (h + stride - 1) / stride : (h - spec.kernel) / stride + 1;
      w = same ? (w + stride - 1) / stride : (w - spec.kernel) / stride + 1;
    } else if (spec.kind == "maxpool") {
      if (spec.size > h || spec.size > w)
        return DataProblem{layers[i].key, layers[i].below + ".size", "window " + std::to_string(spec.size) + " is larger" + input};
      const int64_t stride = spec.stride == 0 ? spec.size : spec.stride;
      h = (h - spec.size) / stride + 1;
      w = (w - spec.size) / stride + 1;
    } else if (spec.kind == "dense") {
      h = w = 1;
    }
  }
  return std::nullopt;
}

}  // namespace

TrainerCapabilities cnn_capabilities() {
  TrainerCapabilities can = classifier_capabilities();
  // A checkpoint's layers: the list, and the blocks that fill it in.
  can.network_settings = {{"layers"}, {"blocks"}};
  for (const char* block : kCnnBlocks) can.network_settings.push_back({block});
  can.value_problem = &cnn_value_problem;
  can.model_stages.count = &cnn_layer_count;
  can.model_stages.what = "the layers of its network: each entry of layers (the layers of a block where it is placed), "
                          "and the output layer";
  can.model_stages.reads = {"layers", "blocks"};
  for (const char* block : kCnnBlocks) can.model_stages.reads.push_back(block);
  can.data_rules = {&cnn_data_problem, {"data", "classes", kInitFromParam, "layers", "blocks"}};
  for (const char* block : kCnnBlocks) can.data_rules.reads.push_back(block);
  return can;
}

}  // namespace hpctune::trainers
