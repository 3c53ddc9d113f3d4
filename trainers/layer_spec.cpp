// The parser of a layer map (layer_spec.h).
#include "trainers/layer_spec.h"

#include <cmath>
#include <set>

namespace hpctune::trainers {

namespace {

using nlohmann::json;

// The activations a dense or conv layer takes (nn/layers.h: parse_layer_activation maps them).
bool known_activation(const std::string& name) {
  return name == "none" || name == "relu" || name == "tanh" || name == "sigmoid";
}

// The form of one kind's map; "" for an unknown kind.
std::string form_of(const std::string& kind) {
  if (kind == "dense") return "{kind: dense, units, activation}";
  if (kind == "conv") return "{kind: conv, filters, kernel, stride, padding, activation}";
  if (kind == "maxpool") return "{kind: maxpool, size, stride}";
  if (kind == "dropout") return "{kind: dropout, rate}";
  return "";
}

// Reads the fields of one layer map, in the order the kinds declare them.
class FieldReader {
 public:
  FieldReader(const json& item, const std::string& kind) : item_(item), kind_(kind) {}

  std::optional<LayerSpecProblem> integer(const char* field, int64_t fallback, bool required, int64_t& out) const {
    auto it = item_.find(field);
    if (it == item_.end()) {
      if (required) return problem(field, "missing (required for kind " + kind_ + ")");
      out = fallback;
      return std::nullopt;
    }
    if (it->is_number_integer() || it->is_number_unsigned()) {
      out = it->get<int64_t>();
      return std::nullopt;
    }
    if (it->is_number_float()) {
      const double d = it->get<double>();
      if (d == std::floor(d) && std::fabs(d) < 1e15) {
        out = static_cast<int64_t>(d);
        return std::nullopt;
      }
    }
    return problem(field, "must be an integer, got " + it->dump());
  }

  std::optional<LayerSpecProblem> text(const char* field, const std::string& fallback, std::string& out) const {
    auto it = item_.find(field);
    if (it == item_.end()) {
      out = fallback;
      return std::nullopt;
    }
    if (!it->is_string()) return problem(field, "must be a string, got " + it->dump());
    out = it->get<std::string>();
    return std::nullopt;
  }

  LayerSpecProblem problem(const std::string& field, const std::string& what) const {
    return LayerSpecProblem{field, what, form_of(kind_)};
  }

 private:
  const json& item_;
  const std::string& kind_;
};

#define HPCTUNE_LAYER_TRY(expr)        \
  do {                                 \
    if (auto p_ = (expr)) return p_;   \
  } while (0)

std::optional<LayerSpecProblem> read_fields(const json& item, const FieldReader& f, LayerSpec& s,
                                            std::set<std::string>& known) {
  auto below = [&](const char* field, int64_t value, int64_t least) -> std::optional<LayerSpecProblem> {
    if (value >= least) return std::nullopt;
    return f.problem(field, "must be >= " + std::to_string(least) + ", got " + std::to_string(value));
  };
  if (s.kind == "dense") {
    known = {"kind", "units", "activation"};
    HPCTUNE_LAYER_TRY(f.integer("units", 0, true, s.units));
    HPCTUNE_LAYER_TRY(below("units", s.units, 1));
    HPCTUNE_LAYER_TRY(f.text("activation", "relu", s.activation));
  } else if (s.kind == "conv") {
    known = {"kind", "filters", "kernel", "stride", "padding", "activation"};
    HPCTUNE_LAYER_TRY(f.integer("filters", 0, true, s.filters));
    HPCTUNE_LAYER_TRY(below("filters", s.filters, 1));
    HPCTUNE_LAYER_TRY(f.integer("kernel", 0, true, s.kernel));
    if (s.kernel < 1 || s.kernel % 2 == 0) return f.problem("kernel", "must be odd and >= 1, got " + std::to_string(s.kernel));
    HPCTUNE_LAYER_TRY(f.integer("stride", 1, false, s.stride));
    HPCTUNE_LAYER_TRY(below("stride", s.stride, 1));
    HPCTUNE_LAYER_TRY(f.text("padding", "same", s.padding));
    if (s.padding != "same" && s.padding != "valid") return f.problem("padding", "must be same or valid, got '" + s.padding + "'");
    HPCTUNE_LAYER_TRY(f.text("activation", "relu", s.activation));
  } else if (s.kind == "maxpool") {
    known = {"kind", "size", "stride"};
    HPCTUNE_LAYER_TRY(f.integer("size", 0, true, s.size));
    HPCTUNE_LAYER_TRY(below("size", s.size, 2));
    HPCTUNE_LAYER_TRY(f.integer("stride", s.size, false, s.stride));
    HPCTUNE_LAYER_TRY(below("stride", s.stride, 1));
  } else if (s.kind == "dropout") {
    known = {"kind", "rate"};
    auto it = item.find("rate");
    if (it == item.end()) return f.problem("rate", "missing (required for kind dropout)");
    if (!it->is_number()) return f.problem("rate", "must be a number, got " + it->dump());
    s.rate = it->get<double>();
    if (!(s.rate >= 0.0 && s.rate < 1.0)) return f.problem("rate", "must be in [0, 1), got " + it->dump());
  } else {
    return LayerSpecProblem{"kind", "unknown kind '" + s.kind + "' (known: dense, conv, maxpool, dropout)", kLayerSpecForms};
  }
  return std::nullopt;
}

#undef HPCTUNE_LAYER_TRY

}  // namespace

std::optional<LayerSpecProblem> read_layer_spec(const json& item, LayerSpec& out) {
  if (!item.is_object()) return LayerSpecProblem{"", "must be a mapping with a kind, got " + item.dump(), kLayerSpecForms};
  auto kind_it = item.find("kind");
  if (kind_it == item.end()) return LayerSpecProblem{"kind", "missing (dense, conv, maxpool or dropout)", kLayerSpecForms};
  if (!kind_it->is_string())
    return LayerSpecProblem{"kind", "must be a string, got " + kind_it->dump(), kLayerSpecForms};
  LayerSpec s;
  s.kind = kind_it->get<std::string>();
  const FieldReader f(item, s.kind);
  std::set<std::string> known;
  if (auto p = read_fields(item, f, s, known)) return p;
  if (item.contains("activation") && !known_activation(s.activation))
    return f.problem("activation", "unknown activation '" + s.activation + "' (known: none, relu, tanh, sigmoid)");
  for (const auto& [key, value] : item.items()) {
    if (known.count(key) == 0) {
      std::string list_known;
      for (const auto& k : known) list_known += (list_known.empty() ? "" : ", ") + k;
      return f.problem(key, "unknown field for kind " + s.kind + " (known: " + list_known + ")");
    }
  }
  out = std::move(s);
  return std::nullopt;
}

Result<std::vector<LayerSpec>> parse_layer_specs(const json& list) {
  if (!list.is_array()) return err(Errc::kInvalidArgument, "layers: must be a list of layers, got " + list.dump());
  std::vector<LayerSpec> specs;
  for (size_t i = 0; i < list.size(); ++i) {
    LayerSpec s;
    if (auto p = read_layer_spec(list[i], s)) {
      return err(Errc::kInvalidArgument,
                 "layers[" + std::to_string(i) + "]" + (p->field.empty() ? "" : "." + p->field) + ": " + p->what);
    }
    specs.push_back(std::move(s));
  }
  return specs;
}

}  // namespace hpctune::trainers
