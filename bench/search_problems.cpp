// The problems of bench_search (search_problems.h): continuous test functions, their discretised
// versions, NAS-like cells, mixed conditional spaces and the tabulated Fashion-MNIST MLP.
#include "bench/search_problems.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "common/rng.h"
#include "search/test_functions.h"

namespace hpctune::bench {

namespace {

using nlohmann::json;
using search::Params;
using search::ParamSpec;
using search::ParamType;

// "levy10" -> levy in 10 dimensions; "branin" -> its natural dimension.
Result<search::TestFunction> test_function(const std::string& id) {
  std::size_t cut = id.size();
  while (cut > 0 && std::isdigit(static_cast<unsigned char>(id[cut - 1]))) --cut;
  const std::string name = id.substr(0, cut);
  const int dim = cut < id.size() && name != "hartmann" ? std::atoi(id.c_str() + cut) : 0;
  return search::make_test_function(name == "hartmann" ? "hartmann6" : name, dim);
}

// "x3": built by appending (GCC 12 warns falsely on "x" + std::to_string(...) when inlined).
std::string indexed(const char* prefix, std::size_t i) {
  std::string out = prefix;
  out += std::to_string(i);
  return out;
}

ParamSpec float_param(std::string name, double low, double high, bool log = false) {
  ParamSpec p;
  p.name = std::move(name);
  p.type = ParamType::kFloat;
  p.low = low;
  p.high = high;
  p.log = log;
  return p;
}

ParamSpec int_param(std::string name, int64_t low, int64_t high) {
  ParamSpec p;
  p.name = std::move(name);
  p.type = ParamType::kInt;
  p.low = static_cast<double>(low);
  p.high = static_cast<double>(high);
  return p;
}

ParamSpec choice_param(std::string name, std::vector<json> values, bool ordered) {
  ParamSpec p;
  p.name = std::move(name);
  p.type = ParamType::kChoice;
  p.choices = std::move(values);
  p.ordered = ordered;
  return p;
}

ParamSpec when(ParamSpec p, std::string parent, std::vector<json> values) {
  p.when = search::Condition{std::move(parent), std::move(values)};
  return p;
}

// A few points with their values, and the optimum's point when known: search_optuna.py checks
// its evaluation against them before it runs.
void add_checks(Problem& p) {
  Rng rng(4242);
  json checks = json::array();
  for (int k = 0; k < 6; ++k) {
    const Params x = p.space.sample(rng);
    checks.push_back({{"params", x}, {"value", p.eval(x)}});
  }
  p.definition["checks"] = checks;
  p.definition["optimum"] = p.optimum;
  p.definition["space"] = space_json(p.space);
  p.definition["kind"] = p.kind;
  p.definition["dim"] = p.dim;
}

// Calls visit(index vector) for every point of a grid of `levels` per dimension.
template <class F>
void for_each_point(const std::vector<int>& levels, F&& visit) {
  std::vector<int> k(levels.size(), 0);
  while (true) {
    visit(k);
    std::size_t i = 0;
    while (i < k.size() && ++k[i] == levels[i]) k[i++] = 0;
    if (i == k.size()) return;
  }
}

// --- continuous -------------------------------------------------------------------------------

Result<Problem> continuous(const std::string& id) {
  HPCTUNE_ASSIGN(const search::TestFunction fn, test_function(id));
  Problem p;
  p.id = id;
  p.kind = "continuous";
  p.dim = fn.dim;
  p.space = search::test_function_space(fn);
  p.eval = [fn](const Params& x) { return fn(x); };
  p.optimum = fn.optimum;
  p.definition = {{"function", fn.name}, {"low", fn.low}, {"high", fn.high}};
  return p;
}

// --- ordinal: a test function on a grid -------------------------------------------------------

struct GridSpec {
  const char* id;
  const char* function;
  int dim;
  bool as_int;              // integer level indices, or choices of the points
  std::vector<int> levels;  // per dimension
  bool ordered = true;      // choices only: ordered, or unordered (categorical: no order to use)
};

const std::vector<GridSpec>& grid_specs() {
  static const std::vector<GridSpec> specs = {
      {"branin-int16", "branin", 2, true, {16, 16}},
      {"hartmann6-int6", "hartmann6", 6, true, {6, 6, 6, 6, 6, 6}},
      {"hartmann6-cat6", "hartmann6", 6, false, {6, 6, 6, 6, 6, 6}, /*ordered=*/false},
      {"rosenbrock4-int10", "rosenbrock", 4, true, {10, 10, 10, 10}},
      {"levy8-ord", "levy", 8, false, {2, 4, 6, 8, 10, 3, 5, 7}},
      {"ackley5-ord", "ackley", 5, false, {5, 9, 3, 7, 10}},
  };
  return specs;
}

Result<Problem> ordinal(const GridSpec& g) {
  HPCTUNE_ASSIGN(const search::TestFunction fn, search::make_test_function(g.function, g.dim));
  // points[i][k]: the k-th level of dimension i, evenly spaced over the box, both ends included.
  std::vector<std::vector<double>> points(static_cast<std::size_t>(g.dim));
  std::vector<ParamSpec> specs;
  for (std::size_t i = 0; i < points.size(); ++i) {
    const int levels = g.levels[i];
    for (int k = 0; k < levels; ++k)
      points[i].push_back(fn.low[i] + (fn.high[i] - fn.low[i]) * static_cast<double>(k) / static_cast<double>(levels - 1));
    const std::string name = indexed("x", i + 1);
    if (g.as_int) {
      specs.push_back(int_param(name, 0, levels - 1));
    } else {
      std::vector<json> values(points[i].begin(), points[i].end());
      specs.push_back(choice_param(name, values, g.ordered));
    }
  }
  Problem p;
  p.id = g.id;
  p.kind = g.ordered ? "ordinal" : "categorical";
  p.dim = g.dim;
  HPCTUNE_ASSIGN(p.space, search::Space::create(specs));
  const bool as_int = g.as_int;
  std::vector<std::string> names;
  for (std::size_t i = 0; i < points.size(); ++i) names.push_back(indexed("x", i + 1));
  p.eval = [fn, points, as_int, names](const Params& params) {
    std::vector<double> x(points.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      const json& v = params.at(names[i]);
      x[i] = as_int ? points[i][v.get<std::size_t>()] : v.get<double>();
    }
    return fn(x);
  };
  // The optimum by enumeration of the grid.
  double best = INFINITY;
  std::vector<int> argmin;
  std::vector<double> x(points.size());
  for_each_point(g.levels, [&](const std::vector<int>& k) {
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = points[i][static_cast<std::size_t>(k[i])];
    const double v = fn(x);
    if (v < best) best = v, argmin = k;
  });
  p.optimum = best;
  Params at = json::object();
  for (std::size_t i = 0; i < x.size(); ++i) {
    const auto k = static_cast<std::size_t>(argmin[i]);
    at[indexed("x", i + 1)] = as_int ? json(k) : json(points[i][k]);
  }
  std::size_t size = 1;
  for (int l : g.levels) size *= static_cast<std::size_t>(l);
  p.definition = {{"function", fn.name}, {"as_int", as_int}, {"points", points}, {"argmin", at}, {"points_in_space", size}};
  if (!g.ordered)
    p.definition["what"] = "the test function at the levels of a grid, each level an unordered choice (no order to use)";
  return p;
}

// --- categorical: a NAS-like cell --------------------------------------------------------------

struct CellSpec {
  const char* id;
  uint64_t seed;
  double interaction;  // the scale of the pairwise effects against the per-edge ones
};

const std::vector<CellSpec>& cell_specs() {
  static const std::vector<CellSpec> specs = {{"nas-cell", 1, 0.5}, {"nas-cell2", 2, 1.0}};
  return specs;
}

Result<Problem> nas_cell(const CellSpec& c) {
  constexpr int kEdges = 6;
  const std::vector<std::string> ops = {"none", "skip", "conv1x1", "conv3x3", "avgpool3x3"};
  const int n_ops = static_cast<int>(ops.size());
  // value = sum_i unary[i][op_i] + sum_{i<j} pair[i][j][op_i][op_j], each effect uniform in
  // [-1, 1] (the pairs' times `interaction`), drawn in this order from Rng(seed).
  Rng rng(c.seed);
  std::vector<std::vector<double>> unary(kEdges, std::vector<double>(static_cast<std::size_t>(n_ops)));
  for (auto& row : unary)
    for (auto& v : row) v = rng.uniform(-1, 1);
  json pairs = json::array();  // [{"i": i, "j": j, "table": [[...]]}] for the definition
  std::vector<std::vector<double>> pair_tables;  // index (i, j) in the order of `pairs`
  for (int i = 0; i < kEdges; ++i)
    for (int j = i + 1; j < kEdges; ++j) {
      std::vector<double> t(static_cast<std::size_t>(n_ops * n_ops));
      for (auto& v : t) v = c.interaction * rng.uniform(-1, 1);
      std::vector<std::vector<double>> rows;
      for (int a = 0; a < n_ops; ++a) rows.emplace_back(t.begin() + a * n_ops, t.begin() + (a + 1) * n_ops);
      pairs.push_back({{"i", i}, {"j", j}, {"table", rows}});
      pair_tables.push_back(std::move(t));
    }
  auto value_of = [unary, pair_tables, n_ops](const std::vector<int>& k) {
    double v = 0;
    for (int i = 0; i < kEdges; ++i) v += unary[static_cast<std::size_t>(i)][static_cast<std::size_t>(k[static_cast<std::size_t>(i)])];
    std::size_t pi = 0;
    for (int i = 0; i < kEdges; ++i)
      for (int j = i + 1; j < kEdges; ++j)
        v += pair_tables[pi++][static_cast<std::size_t>(k[static_cast<std::size_t>(i)] * n_ops + k[static_cast<std::size_t>(j)])];
    return v;
  };
  std::vector<ParamSpec> specs;
  for (int i = 0; i < kEdges; ++i) specs.push_back(choice_param(indexed("e", static_cast<std::size_t>(i + 1)), std::vector<json>(ops.begin(), ops.end()), false));
  Problem p;
  p.id = c.id;
  p.kind = "categorical";
  p.dim = kEdges;
  HPCTUNE_ASSIGN(p.space, search::Space::create(specs));
  std::vector<std::string> names;
  for (int i = 0; i < kEdges; ++i) names.push_back(indexed("e", static_cast<std::size_t>(i + 1)));
  p.eval = [value_of, ops, names](const Params& params) {
    std::vector<int> k(kEdges);
    for (int i = 0; i < kEdges; ++i) {
      const auto& op = params.at(names[static_cast<std::size_t>(i)]).get_ref<const std::string&>();
      k[static_cast<std::size_t>(i)] = static_cast<int>(std::find(ops.begin(), ops.end(), op) - ops.begin());
    }
    return value_of(k);
  };
  double best = INFINITY;
  std::vector<int> argmin;
  for_each_point(std::vector<int>(kEdges, n_ops), [&](const std::vector<int>& k) {
    const double v = value_of(k);
    if (v < best) best = v, argmin = k;
  });
  p.optimum = best;
  Params at = json::object();
  for (int i = 0; i < kEdges; ++i) at[indexed("e", static_cast<std::size_t>(i + 1))] = ops[static_cast<std::size_t>(argmin[static_cast<std::size_t>(i)])];
  p.definition = {{"ops", ops}, {"unary", unary}, {"pairs", pairs}, {"seed", c.seed}, {"interaction", c.interaction},
                  {"argmin", at}, {"points_in_space", 15625}};
  return p;
}

// --- mixed conditional spaces ------------------------------------------------------------------
//
// value = offset[value of the branch parameter] + sum over the active terms of
//         weight * (t(x) - center)^2, t = log10, log2 or the identity,
//       + choice_terms[param][value] for the active choice parameters listed there.
// Every center lies inside its range (and on a level for ints and choices), so the minimum is the
// smallest offset plus the smallest choice terms, reached at the centers.

struct Term {
  std::string param, transform;
  double center, weight;
};

struct MixedModel {
  std::string branch;
  std::map<std::string, double> offset;  // by the branch parameter's value as text
  std::vector<Term> terms;
  std::map<std::string, std::map<std::string, double>> choice_terms;
  double optimum;
};

std::string value_key(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

double mixed_value(const MixedModel& m, const Params& params) {
  double v = m.offset.at(value_key(params.at(m.branch)));
  for (const auto& t : m.terms) {
    if (!params.contains(t.param)) continue;
    const double x = params.at(t.param).get<double>();
    const double u = t.transform == "log10" ? std::log10(x) : t.transform == "log2" ? std::log2(x) : x;
    v += t.weight * (u - t.center) * (u - t.center);
  }
  for (const auto& [param, table] : m.choice_terms)
    if (params.contains(param)) v += table.at(value_key(params.at(param)));
  return v;
}

json mixed_json(const MixedModel& m) {
  json terms = json::array();
  for (const auto& t : m.terms) terms.push_back({{"param", t.param}, {"transform", t.transform}, {"center", t.center}, {"weight", t.weight}});
  return {{"branch", m.branch}, {"offset", m.offset}, {"terms", terms}, {"choice_terms", m.choice_terms}};
}

Result<Problem> mixed(const std::string& id) {
  std::vector<ParamSpec> specs;
  MixedModel m;
  int dim = 0;
  if (id == "mixed-optim") {
    // An optimizer choice, each optimizer with its own learning rate and one more parameter, and
    // shared int, ordinal and float parameters. adam at its centers is the optimum.
    const std::vector<json> opt = {"sgd", "adam", "rmsprop"};
    specs = {choice_param("optimizer", opt, false),
             when(float_param("sgd_lr", 1e-4, 1, true), "optimizer", {"sgd"}),
             when(float_param("momentum", 0, 0.99), "optimizer", {"sgd"}),
             when(float_param("adam_lr", 1e-5, 1e-1, true), "optimizer", {"adam"}),
             when(float_param("beta1", 0.5, 0.999), "optimizer", {"adam"}),
             when(float_param("rms_lr", 1e-5, 1e-1, true), "optimizer", {"rmsprop"}),
             when(float_param("rho", 0.8, 0.999), "optimizer", {"rmsprop"}),
             int_param("layers", 1, 8),
             choice_param("width", {16, 32, 64, 128, 256, 512}, true),
             float_param("dropout", 0, 0.6)};
    m.branch = "optimizer";
    m.offset = {{"sgd", 0.1}, {"adam", 0.0}, {"rmsprop", 0.05}};
    m.terms = {{"sgd_lr", "log10", -1.3, 0.4}, {"momentum", "", 0.9, 2.0},  {"adam_lr", "log10", -3.2, 0.4},
               {"beta1", "", 0.88, 3.0},       {"rms_lr", "log10", -2.7, 0.4}, {"rho", "", 0.95, 5.0},
               {"layers", "", 3, 0.03},        {"width", "log2", 7, 0.05},   {"dropout", "", 0.15, 0.8}};
    m.optimum = 0;
    dim = 6;
  } else if (id == "mixed-arch") {
    // A depth (int) with one width per layer under it, an activation choice, a learning rate and
    // a batch size: 3 layers of the centered widths with gelu is the optimum.
    const std::vector<json> widths = {8, 16, 32, 64, 128, 256};
    specs = {int_param("depth", 1, 4),
             choice_param("width1", widths, true),
             when(choice_param("width2", widths, true), "depth", {2, 3, 4}),
             when(choice_param("width3", widths, true), "depth", {3, 4}),
             when(choice_param("width4", widths, true), "depth", {4}),
             choice_param("activation", {"relu", "tanh", "gelu", "sigmoid"}, false),
             float_param("lr", 1e-4, 1, true),
             int_param("batch", 16, 512)};
    m.branch = "depth";
    m.offset = {{"1", 0.4}, {"2", 0.15}, {"3", 0.0}, {"4", 0.08}};
    m.terms = {{"width1", "log2", 6, 0.04}, {"width2", "log2", 7, 0.04}, {"width3", "log2", 5, 0.04},
               {"width4", "log2", 4, 0.04}, {"lr", "log10", -1.7, 0.3},  {"batch", "log2", 6, 0.03}};
    m.choice_terms = {{"activation", {{"relu", 0.02}, {"tanh", 0.06}, {"gelu", 0.0}, {"sigmoid", 0.15}}}};
    m.optimum = 0;
    dim = 7;
  } else {
    return err(Errc::kInvalidArgument, "unknown mixed problem " + id);
  }
  Problem p;
  p.id = id;
  p.kind = "mixed";
  p.dim = dim;
  HPCTUNE_ASSIGN(p.space, search::Space::create(specs));
  p.eval = [m](const Params& params) { return mixed_value(m, params); };
  p.optimum = m.optimum;
  p.definition = {{"model", mixed_json(m)}};
  return p;
}

// --- the tabulated Fashion-MNIST MLP ------------------------------------------------------------

const std::vector<std::string> kTableParams = {"hidden", "layers", "activation", "lr", "batch_size", "dropout"};

// A CSV cell as JSON: an integer, a number, or else text (the same rule as search_optuna.py's).
json parse_cell(const std::string& s) {
  char* end = nullptr;
  if (!s.empty() && s.find_first_of(".eE") == std::string::npos) {
    const long long i = std::strtoll(s.c_str(), &end, 10);
    if (end && *end == '\0') return i;
  }
  const double d = std::strtod(s.c_str(), &end);
  if (!s.empty() && end && *end == '\0') return d;
  return s;
}

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  std::string cell;
  while (std::getline(ss, cell, ',')) out.push_back(cell);
  return out;
}

std::string table_key(const Params& params) {
  std::string key;
  for (const auto& name : kTableParams) key += params.at(name).dump() + "|";
  return key;
}

Result<Problem> fashion_table(const std::string& path) {
  std::ifstream f(path);
  if (!f) return err(Errc::kInvalidArgument, "fashion-mlp: cannot read the table " + path + " (bench/make-fashion-table makes it)");
  std::string line;
  std::getline(f, line);
  const auto header = split_csv_line(line);
  std::vector<std::size_t> col;
  for (const auto& name : kTableParams) {
    const auto it = std::find(header.begin(), header.end(), name);
    if (it == header.end()) return err(Errc::kInvalidArgument, path + ": no column " + name);
    col.push_back(static_cast<std::size_t>(it - header.begin()));
  }
  const auto mean_it = std::find(header.begin(), header.end(), "val_accuracy_mean");
  if (mean_it == header.end()) return err(Errc::kInvalidArgument, path + ": no column val_accuracy_mean");
  const auto mean_col = static_cast<std::size_t>(mean_it - header.begin());
  std::map<std::string, double> error;  // configuration key -> 1 - mean validation accuracy
  std::vector<std::vector<json>> levels(kTableParams.size());
  double best = INFINITY;
  Params argmin;
  int line_no = 1;
  while (std::getline(f, line)) {
    ++line_no;
    if (line.empty()) continue;
    const auto cells = split_csv_line(line);
    if (cells.size() != header.size()) return err(Errc::kInvalidArgument, path + ":" + std::to_string(line_no) + ": wrong number of cells");
    Params params = json::object();
    for (std::size_t i = 0; i < kTableParams.size(); ++i) {
      json v = parse_cell(cells[col[i]]);
      if (std::find(levels[i].begin(), levels[i].end(), v) == levels[i].end()) levels[i].push_back(v);
      params[kTableParams[i]] = std::move(v);
    }
    const double e = 1.0 - std::strtod(cells[mean_col].c_str(), nullptr);
    error[table_key(params)] = e;
    if (e < best) best = e, argmin = params;
  }
  std::vector<ParamSpec> specs;
  std::size_t size = 1;
  for (std::size_t i = 0; i < kTableParams.size(); ++i) {
    auto& v = levels[i];
    const bool numeric = v.front().is_number();
    if (numeric) std::sort(v.begin(), v.end(), [](const json& a, const json& b) { return a.get<double>() < b.get<double>(); });
    specs.push_back(choice_param(kTableParams[i], v, numeric));
    size *= v.size();
  }
  if (size != error.size())
    return err(Errc::kInvalidArgument, path + ": " + std::to_string(error.size()) + " configurations, not the full grid of " + std::to_string(size));
  Problem p;
  p.id = "fashion-mlp";
  p.kind = "table";
  p.dim = static_cast<int>(kTableParams.size());
  HPCTUNE_ASSIGN(p.space, search::Space::create(specs));
  p.eval = [error](const Params& params) { return error.at(table_key(params)); };
  p.optimum = best;
  p.definition = {{"path", path}, {"params", kTableParams}, {"objective", "1 - val_accuracy_mean"}, {"argmin", argmin},
                  {"points_in_space", size}};
  return p;
}

}  // namespace

json space_json(const search::Space& space) {
  json out = json::array();
  for (const auto& s : space.params()) {
    json p = {{"name", s.name}, {"type", search::param_type_name(s.type)}};
    if (s.type == ParamType::kFloat || s.type == ParamType::kInt) {
      p["low"] = s.low;
      p["high"] = s.high;
      p["log"] = s.log;
      if (s.type == ParamType::kInt) p["step"] = s.step;
    } else if (s.type == ParamType::kChoice) {
      p["choices"] = s.choices;
      p["ordered"] = s.ordered;
    } else {
      p["value"] = s.value;
    }
    if (s.when) p["when"] = {{"parent", s.when->parent}, {"values", s.when->values}};
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<std::string> problem_ids() {
  std::vector<std::string> ids = {"branin", "hartmann6", "levy10", "rosenbrock4", "ackley4"};
  for (const auto& g : grid_specs()) ids.emplace_back(g.id);
  for (const auto& c : cell_specs()) ids.emplace_back(c.id);
  ids.insert(ids.end(), {"mixed-optim", "mixed-arch", "fashion-mlp"});
  return ids;
}

Result<Problem> make_problem(const std::string& id, const std::string& fashion_table_path) {
  Result<Problem> made = err(Errc::kInvalidArgument, "unknown problem");
  bool found = false;
  for (const auto& g : grid_specs())
    if (id == g.id) made = ordinal(g), found = true;
  for (const auto& c : cell_specs())
    if (id == c.id) made = nas_cell(c), found = true;
  if (!found && id.rfind("mixed-", 0) == 0) made = mixed(id), found = true;
  if (!found && id == "fashion-mlp") made = fashion_table(fashion_table_path), found = true;
  if (!found) made = continuous(id);
  if (!made.ok()) return made;
  Problem p = std::move(made).value();
  p.definition["id"] = p.id;
  add_checks(p);
  return p;
}

}  // namespace hpctune::bench
