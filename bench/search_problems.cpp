// The problems of bench_search (search_problems.h): continuous test functions, their discretised
// versions, NAS-like cells, mixed conditional spaces and the tabulated Fashion-MNIST MLP.
#include "bench/search_problems.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
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

// Hartmann-3 over [0, 1]^3 (the generated grids use it; search/test_functions.h has no 3-d one).
double hartmann3(const std::vector<double>& x) {
  static constexpr double kAlpha[4] = {1.0, 1.2, 3.0, 3.2};
  static constexpr double kA[4][3] = {{3, 10, 30}, {0.1, 10, 35}, {3, 10, 30}, {0.1, 10, 35}};
  static constexpr double kP[4][3] = {
      {0.3689, 0.1170, 0.2673}, {0.4699, 0.4387, 0.7470}, {0.1091, 0.8732, 0.5547}, {0.0381, 0.5743, 0.8828}};
  double out = 0;
  for (int i = 0; i < 4; ++i) {
    double e = 0;
    for (int j = 0; j < 3; ++j) e += kA[i][j] * (x[static_cast<std::size_t>(j)] - kP[i][j]) * (x[static_cast<std::size_t>(j)] - kP[i][j]);
    out -= kAlpha[i] * std::exp(-e);
  }
  return out;
}

// search/test_functions.h's functions, and hartmann3.
Result<search::TestFunction> bench_function(const std::string& name, int dim) {
  if (name != "hartmann3") return search::make_test_function(name, dim);
  search::TestFunction fn;
  fn.name = name;
  fn.dim = 3;
  fn.low.assign(3, 0.0);
  fn.high.assign(3, 1.0);
  fn.optimum = -3.86278;
  fn.f = &hartmann3;
  return fn;
}

// "x3": built by appending (GCC 12 warns falsely on "x" + std::to_string(...) when inlined).
std::string indexed(const char* prefix, std::size_t i) {
  std::string out = prefix;
  out += std::to_string(i);
  return out;
}

}  // namespace

ParamSpec float_param(std::string name, double low, double high, bool log) {
  ParamSpec p;
  p.name = std::move(name);
  p.type = ParamType::kFloat;
  p.low = low;
  p.high = high;
  p.log = log;
  return p;
}

ParamSpec int_param(std::string name, int64_t low, int64_t high, bool log) {
  ParamSpec p;
  p.name = std::move(name);
  p.type = ParamType::kInt;
  p.low = static_cast<double>(low);
  p.high = static_cast<double>(high);
  p.log = log;
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

namespace {

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
  std::string id;
  std::string function;
  int dim;
  bool as_int;              // integer level indices, or choices of the points
  std::vector<int> levels;  // per dimension
  bool ordered = true;      // choices only: ordered, or unordered (categorical: no order to use)
  // Generated grids: level k of dimension i at low + (high - low) * (k + shift[i]) / levels[i]
  // (inside the box, offset by a shift in (0, 1)); empty: evenly spaced with both ends included.
  std::vector<double> shift = {};
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
  HPCTUNE_ASSIGN(const search::TestFunction fn, bench_function(g.function, g.dim));
  // points[i][k]: the k-th level of dimension i, evenly spaced over the box, both ends included.
  std::vector<std::vector<double>> points(static_cast<std::size_t>(g.dim));
  std::vector<ParamSpec> specs;
  for (std::size_t i = 0; i < points.size(); ++i) {
    const int levels = g.levels[i];
    for (int k = 0; k < levels; ++k)
      points[i].push_back(g.shift.empty()
                              ? fn.low[i] + (fn.high[i] - fn.low[i]) * static_cast<double>(k) / static_cast<double>(levels - 1)
                              : fn.low[i] + (fn.high[i] - fn.low[i]) * (static_cast<double>(k) + g.shift[i]) / static_cast<double>(levels));
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
  if (!g.shift.empty()) {  // a generated grid: say which
    std::string levels;
    for (int l : g.levels) levels += (levels.empty() ? "" : "x") + std::to_string(l);
    p.definition["what"] = fn.name + " (d = " + std::to_string(g.dim) + ") on a shifted grid of " + levels + " levels, " +
                           (g.as_int ? "as integer level indices" : g.ordered ? "as ordered choices" : "as unordered choices");
  }
  return p;
}

// --- categorical: a NAS-like cell --------------------------------------------------------------

struct CellSpec {
  std::string id;
  uint64_t seed;
  double interaction;  // the scale of the pairwise effects against the per-edge ones
  int edges = 6;
  int n_ops = 5;       // the first n_ops of kOps
  double shared = 0;   // the scale of an effect per operation shared by every edge (generated cells)
};

const std::vector<std::string> kOps = {"none", "skip", "conv1x1", "conv3x3", "avgpool3x3", "maxpool3x3",
                                       "conv5x5", "sepconv3x3", "dilconv3x3"};

const std::vector<CellSpec>& cell_specs() {
  static const std::vector<CellSpec> specs = {{"nas-cell", 1, 0.5}, {"nas-cell2", 2, 1.0}};
  return specs;
}

Result<Problem> nas_cell(const CellSpec& c) {
  const int edges = c.edges;
  const std::vector<std::string> ops(kOps.begin(), kOps.begin() + c.n_ops);
  const int n_ops = static_cast<int>(ops.size());
  // value = sum_i unary[i][op_i] + sum_{i<j} pair[i][j][op_i][op_j], each effect uniform in
  // [-1, 1] (the pairs' times `interaction`), drawn in this order from Rng(seed).
  Rng rng(c.seed);
  std::vector<std::vector<double>> unary(edges, std::vector<double>(static_cast<std::size_t>(n_ops)));
  for (auto& row : unary)
    for (auto& v : row) v = rng.uniform(-1, 1);
  if (c.shared > 0) {  // an operation good on one edge tends to be good on every edge
    Rng shared_rng(derive_seed(c.seed, 77));
    std::vector<double> shared(static_cast<std::size_t>(n_ops));
    for (auto& v : shared) v = c.shared * shared_rng.uniform(-1, 1);
    for (auto& row : unary)
      for (std::size_t o = 0; o < row.size(); ++o) row[o] += shared[o];
  }
  json pairs = json::array();  // [{"i": i, "j": j, "table": [[...]]}] for the definition
  std::vector<std::vector<double>> pair_tables;  // index (i, j) in the order of `pairs`
  for (int i = 0; i < edges; ++i)
    for (int j = i + 1; j < edges; ++j) {
      std::vector<double> t(static_cast<std::size_t>(n_ops * n_ops));
      for (auto& v : t) v = c.interaction * rng.uniform(-1, 1);
      std::vector<std::vector<double>> rows;
      for (int a = 0; a < n_ops; ++a) rows.emplace_back(t.begin() + a * n_ops, t.begin() + (a + 1) * n_ops);
      pairs.push_back({{"i", i}, {"j", j}, {"table", rows}});
      pair_tables.push_back(std::move(t));
    }
  auto value_of = [unary, pair_tables, n_ops, edges](const std::vector<int>& k) {
    double v = 0;
    for (int i = 0; i < edges; ++i) v += unary[static_cast<std::size_t>(i)][static_cast<std::size_t>(k[static_cast<std::size_t>(i)])];
    std::size_t pi = 0;
    for (int i = 0; i < edges; ++i)
      for (int j = i + 1; j < edges; ++j)
        v += pair_tables[pi++][static_cast<std::size_t>(k[static_cast<std::size_t>(i)] * n_ops + k[static_cast<std::size_t>(j)])];
    return v;
  };
  std::vector<ParamSpec> specs;
  for (int i = 0; i < edges; ++i) specs.push_back(choice_param(indexed("e", static_cast<std::size_t>(i + 1)), std::vector<json>(ops.begin(), ops.end()), false));
  Problem p;
  p.id = c.id;
  p.kind = "categorical";
  p.dim = edges;
  HPCTUNE_ASSIGN(p.space, search::Space::create(specs));
  std::vector<std::string> names;
  for (int i = 0; i < edges; ++i) names.push_back(indexed("e", static_cast<std::size_t>(i + 1)));
  p.eval = [value_of, ops, names, edges](const Params& params) {
    std::vector<int> k(edges);
    for (int i = 0; i < edges; ++i) {
      const auto& op = params.at(names[static_cast<std::size_t>(i)]).get_ref<const std::string&>();
      k[static_cast<std::size_t>(i)] = static_cast<int>(std::find(ops.begin(), ops.end(), op) - ops.begin());
    }
    return value_of(k);
  };
  double best = INFINITY;
  std::vector<int> argmin;
  for_each_point(std::vector<int>(edges, n_ops), [&](const std::vector<int>& k) {
    const double v = value_of(k);
    if (v < best) best = v, argmin = k;
  });
  p.optimum = best;
  Params at = json::object();
  for (int i = 0; i < edges; ++i) at[indexed("e", static_cast<std::size_t>(i + 1))] = ops[static_cast<std::size_t>(argmin[static_cast<std::size_t>(i)])];
  std::size_t size = 1;
  for (int i = 0; i < edges; ++i) size *= static_cast<std::size_t>(n_ops);
  p.definition = {{"ops", ops}, {"unary", unary}, {"pairs", pairs}, {"seed", c.seed}, {"interaction", c.interaction},
                  {"argmin", at}, {"points_in_space", size}};
  if (c.shared > 0 || edges != 6 || n_ops != 5)
    p.definition["what"] = "a NAS-like cell: " + std::to_string(edges) + " edges of " + std::to_string(n_ops) +
                           " operations, per-operation + per-edge effects + pairwise interactions (x" +
                           std::to_string(static_cast<int>(c.interaction * 100 + 0.5)) + "%)";
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

Result<Problem> mixed_problem(const std::string& id, std::vector<ParamSpec> specs, const MixedModel& m, int dim) {
  Problem p;
  p.id = id;
  p.kind = "mixed";
  p.dim = dim;
  HPCTUNE_ASSIGN(p.space, search::Space::create(std::move(specs)));
  p.eval = [m](const Params& params) { return mixed_value(m, params); };
  p.optimum = m.optimum;
  p.definition = {{"model", mixed_json(m)}};
  return p;
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
  return mixed_problem(id, std::move(specs), m, dim);
}

// --- tables of real trainings -----------------------------------------------------------------

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

// A table of trainings: the columns before val_accuracy_mean are its parameters; `fixed` keeps
// only the rows with that parameter at that value (a slice: the parameter leaves the space).
struct TableSpec {
  std::string id, file;  // file: under the directory of the fashion table
  std::string fixed_param = {};
  json fixed_value = {};
  std::vector<int> budgets = {};  // empty: drawn by the suite's rule
};

const std::vector<TableSpec>& table_specs() {
  static const std::vector<TableSpec> specs = {
      {"fashion-mlp", "fashion_mlp_table.csv", "", json(), {50, 100}},
      {"table-mlp", "search_mlp_table.csv"},
      {"table-mlp-sgd", "search_mlp_table.csv", "optimizer", "sgd"},
      {"table-mlp-adam", "search_mlp_table.csv", "optimizer", "adam"},
      {"table-cnn", "search_cnn_table.csv"},
      {"table-cnn-constant", "search_cnn_table.csv", "lr_schedule", "constant"},
      {"table-cnn-cosine", "search_cnn_table.csv", "lr_schedule", "cosine"},
      {"fashion-mlp-relu", "fashion_mlp_table.csv", "activation", "relu"},
      {"fashion-mlp-tanh", "fashion_mlp_table.csv", "activation", "tanh"},
      {"fashion-mlp-sigmoid", "fashion_mlp_table.csv", "activation", "sigmoid"},
  };
  return specs;
}

std::string table_key(const std::vector<std::string>& names, const Params& params) {
  std::string key;
  for (const auto& name : names) key += params.at(name).dump() + "|";
  return key;
}

Result<Problem> table_problem(const TableSpec& t, const std::string& path) {
  std::ifstream f(path);
  if (!f) return err(Errc::kInvalidArgument, t.id + ": cannot read the table " + path + " (bench/make-fashion-table or bench/make-search-tables makes it)");
  std::string line;
  int line_no = 0;
  while (std::getline(f, line)) {  // '#' lines: how the table was made
    ++line_no;
    if (line.empty() || line[0] != '#') break;
  }
  const auto header = split_csv_line(line);
  const auto mean_it = std::find(header.begin(), header.end(), "val_accuracy_mean");
  if (mean_it == header.end()) return err(Errc::kInvalidArgument, path + ":" + std::to_string(line_no) + ": no column val_accuracy_mean");
  const auto mean_col = static_cast<std::size_t>(mean_it - header.begin());
  std::vector<std::string> names;  // the space's parameters: the columns before the mean, less the fixed one
  std::vector<std::size_t> col;
  std::size_t fixed_col = header.size();
  for (std::size_t i = 0; i < mean_col; ++i) {
    if (header[i] == t.fixed_param) {
      fixed_col = i;
      continue;
    }
    names.push_back(header[i]);
    col.push_back(i);
  }
  if (!t.fixed_param.empty() && fixed_col == header.size())
    return err(Errc::kInvalidArgument, path + ": no column " + t.fixed_param + " (" + t.id + " slices it)");
  std::map<std::string, double> error;  // configuration key -> 1 - mean validation accuracy
  std::vector<std::vector<json>> levels(names.size());
  double best = INFINITY;
  Params argmin;
  while (std::getline(f, line)) {
    ++line_no;
    if (line.empty() || line[0] == '#') continue;
    const auto cells = split_csv_line(line);
    if (cells.size() != header.size()) return err(Errc::kInvalidArgument, path + ":" + std::to_string(line_no) + ": wrong number of cells");
    if (fixed_col < header.size() && parse_cell(cells[fixed_col]) != t.fixed_value) continue;
    Params params = json::object();
    for (std::size_t i = 0; i < names.size(); ++i) {
      json v = parse_cell(cells[col[i]]);
      if (std::find(levels[i].begin(), levels[i].end(), v) == levels[i].end()) levels[i].push_back(v);
      params[names[i]] = std::move(v);
    }
    const double e = 1.0 - std::strtod(cells[mean_col].c_str(), nullptr);
    error[table_key(names, params)] = e;
    if (e < best) best = e, argmin = params;
  }
  if (error.empty()) return err(Errc::kInvalidArgument, path + ": no rows" + (t.fixed_param.empty() ? "" : " with " + t.fixed_param + " = " + t.fixed_value.dump()));
  std::vector<ParamSpec> specs;
  std::size_t size = 1;
  for (std::size_t i = 0; i < names.size(); ++i) {
    auto& v = levels[i];
    const bool numeric = v.front().is_number();
    if (numeric) std::sort(v.begin(), v.end(), [](const json& a, const json& b) { return a.get<double>() < b.get<double>(); });
    specs.push_back(choice_param(names[i], v, numeric));
    size *= v.size();
  }
  if (size != error.size())
    return err(Errc::kInvalidArgument, path + ": " + std::to_string(error.size()) + " configurations, not the full grid of " + std::to_string(size));
  Problem p;
  p.id = t.id;
  p.kind = "table";
  p.dim = static_cast<int>(names.size());
  HPCTUNE_ASSIGN(p.space, search::Space::create(specs));
  p.eval = [error, names](const Params& params) { return error.at(table_key(names, params)); };
  p.optimum = best;
  p.budgets = t.budgets;
  const std::string file = path.substr(path.find_last_of('/') + 1);
  p.definition = {{"path", path}, {"params", names}, {"objective", "1 - val_accuracy_mean"}, {"argmin", argmin},
                  {"points_in_space", size}};
  if (!t.fixed_param.empty()) p.definition["fixed"] = {{t.fixed_param, t.fixed_value}};
  const std::string trainer = file.find("cnn") != std::string::npos ? "cnn" : "mlp";
  p.definition["what"] = "hpctune's " + trainer + " on Fashion-MNIST (bench/data/" + file + "): mean validation error" +
                         (t.fixed_param.empty() ? "" : ", the rows with " + t.fixed_param + " = " + value_key(t.fixed_value));
  return p;
}

// --- real tables (issue 38): scikit-learn models and cnn cells, 3 seeds each --------------------

// The ids of the real tables, fixed (with the held-out rule applied to them) before any search ran on
// them; each is bench/data/real-tables/<id>.csv.
const std::vector<std::string>& real_ids() {
  static const std::vector<std::string> ids = {
      "real-svm-digits",    "real-svm-breast",  "real-svm-fashion",   "real-rf-digits",      "real-rf-wine",
      "real-et-breast",     "real-et-fashion",  "real-gb-breast",     "real-gb-diabetes",    "real-logreg-breast",
      "real-logreg-wine",   "real-logreg-fashion", "real-knn-digits", "real-knn-wine",       "real-knn-fashion",
      "real-mlp-digits",    "real-mlp-breast",  "real-mlp-fashion",   "real-mlpreg-diabetes", "real-cnn-cell4",
      "real-cnn-cell3h"};
  return ids;
}

// A configuration's key in a real table: its active parameters, in the space's order.
std::string real_key(const std::vector<std::string>& names, const Params& params) {
  std::string key;
  for (const auto& name : names)
    if (params.contains(name)) key += name + "=" + params.at(name).dump() + "|";
  return key;
}

// Every configuration of a space of choices (conditional ones only where their condition holds).
std::vector<Params> all_configurations(const std::vector<ParamSpec>& specs) {
  std::vector<Params> out = {json::object()};
  for (const auto& s : specs) {
    std::vector<Params> next;
    for (const auto& c : out) {
      if (s.when && (!c.contains(s.when->parent) ||
                     std::find(s.when->values.begin(), s.when->values.end(), c.at(s.when->parent)) == s.when->values.end())) {
        next.push_back(c);
        continue;
      }
      for (const auto& v : s.choices) {
        Params d = c;
        d[s.name] = v;
        next.push_back(std::move(d));
      }
    }
    out = std::move(next);
  }
  return out;
}

// The table's parameters from its `# space: [...]` line: {name, values, ordered, when: {parent, values}}.
Result<std::vector<ParamSpec>> real_table_specs(const std::string& path, int line_no, const std::string& text) {
  const json space = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (space.is_discarded() || !space.is_array() || space.empty())
    return err(Errc::kInvalidArgument, path + ":" + std::to_string(line_no) + ": `# space:` is not a JSON list of parameters");
  std::vector<ParamSpec> specs;
  for (const auto& p : space) {
    if (!p.is_object() || !p.contains("name") || !p.contains("values") || !p["values"].is_array() || p["values"].empty())
      return err(Errc::kInvalidArgument, path + ":" + std::to_string(line_no) + ": a parameter of `# space:` without name or values: " + p.dump());
    ParamSpec s = choice_param(p["name"].get<std::string>(), p["values"].get<std::vector<json>>(), p.value("ordered", false));
    if (p.contains("when"))
      s = when(s, p["when"].at("parent").get<std::string>(), p["when"].at("values").get<std::vector<json>>());
    specs.push_back(std::move(s));
  }
  return specs;
}

struct RealRows {
  std::map<std::string, std::vector<double>> seeds;  // key -> each seed's validation error
  std::map<std::string, double> mean;                // key -> the mean validation error (the truth)
};

// The rows of a real table: each a full configuration of `specs` (its cells canonical level values,
// empty where a conditional parameter is inactive), its mean and per-seed validation scores.
Result<RealRows> read_real_rows(const std::string& path, std::ifstream& f, int& line_no, const std::vector<ParamSpec>& specs,
                                const std::vector<std::string>& header) {
  auto column = [&](const std::string& name) { return static_cast<std::size_t>(std::find(header.begin(), header.end(), name) - header.begin()); };
  std::vector<std::size_t> param_col, seed_col;
  std::vector<std::string> names;
  for (const auto& s : specs) {
    names.push_back(s.name);
    param_col.push_back(column(s.name));
    if (param_col.back() == header.size()) return err(Errc::kInvalidArgument, path + ": no column " + s.name + " (a parameter of `# space:`)");
  }
  const std::size_t mean_col = column("val_score_mean") < header.size() ? column("val_score_mean") : column("val_accuracy_mean");
  for (std::size_t i = 0; i < header.size(); ++i)
    if (header[i].rfind("val_score_seed", 0) == 0 || header[i].rfind("val_accuracy_seed", 0) == 0) seed_col.push_back(i);
  if (mean_col == header.size() || seed_col.empty())
    return err(Errc::kInvalidArgument, path + ": no column val_score_mean (or val_accuracy_mean) or no val_score_seed<N> columns");
  RealRows rows;
  std::string line;
  while (std::getline(f, line)) {
    ++line_no;
    if (line.empty() || line[0] == '#') continue;
    const std::string at = path + ":" + std::to_string(line_no);
    auto cells = split_csv_line(line);
    cells.resize(header.size());  // a trailing empty cell
    Params params = json::object();
    for (std::size_t i = 0; i < specs.size(); ++i) {
      const std::string& text = cells[param_col[i]];
      if (text.empty()) continue;
      const json v = parse_cell(text);
      const auto& levels = specs[i].choices;
      const auto level = std::find(levels.begin(), levels.end(), v);
      if (level == levels.end()) return err(Errc::kInvalidArgument, at + ": " + names[i] + " = " + text + " is not one of its levels");
      params[names[i]] = *level;
    }
    const std::string key = real_key(names, params);
    if (rows.mean.count(key)) return err(Errc::kInvalidArgument, at + ": a second row of the configuration " + key);
    rows.mean[key] = 1.0 - std::strtod(cells[mean_col].c_str(), nullptr);
    for (std::size_t c : seed_col) rows.seeds[key].push_back(1.0 - std::strtod(cells[c].c_str(), nullptr));
  }
  return rows;
}

Result<Problem> real_table_problem(const std::string& id, const std::string& path) {
  std::ifstream f(path);
  if (!f) return err(Errc::kInvalidArgument, id + ": cannot read the table " + path + " (bench/make-search-tables --tables real makes it)");
  std::string line, made_by, space_text;
  int line_no = 0, space_line = 0;
  while (std::getline(f, line)) {
    ++line_no;
    if (line.rfind("# space: ", 0) == 0) space_text = line.substr(9), space_line = line_no;
    else if (line.rfind("# made by ", 0) == 0) made_by = line.substr(2);
    if (line.empty() || line[0] != '#') break;
  }
  if (space_text.empty()) return err(Errc::kInvalidArgument, path + ": no `# space:` line before the header");
  HPCTUNE_ASSIGN(const std::vector<ParamSpec> specs, real_table_specs(path, space_line, space_text));
  HPCTUNE_ASSIGN(RealRows rows, read_real_rows(path, f, line_no, specs, split_csv_line(line)));
  std::vector<std::string> names;
  for (const auto& s : specs) names.push_back(s.name);
  // The table must be the full grid: every configuration of the space once, nothing else.
  const auto configs = all_configurations(specs);
  int dim = 0;
  for (const auto& c : configs) {
    if (!rows.mean.count(real_key(names, c))) return err(Errc::kInvalidArgument, path + ": no row of the configuration " + c.dump());
    dim = std::max(dim, static_cast<int>(c.size()));
  }
  if (rows.mean.size() != configs.size())
    return err(Errc::kInvalidArgument, path + ": " + std::to_string(rows.mean.size()) + " rows, the grid has " + std::to_string(configs.size()) +
                                           " configurations (a row with an inactive parameter set, or one missing?)");
  Problem p;
  p.id = id;
  p.kind = "real-table";
  p.dim = dim;
  HPCTUNE_ASSIGN(p.space, search::Space::create(specs));
  double best = INFINITY;
  Params argmin;
  for (const auto& c : configs)
    if (const double v = rows.mean.at(real_key(names, c)); v < best) best = v, argmin = c;
  auto mean = std::make_shared<const std::map<std::string, double>>(std::move(rows.mean));
  auto seeds = std::make_shared<const std::map<std::string, std::vector<double>>>(std::move(rows.seeds));
  p.eval = [mean, names](const Params& params) { return mean->at(real_key(names, params)); };
  p.truth = p.eval;
  p.draw = [seeds, names](const Params& params, Rng& rng) {
    const auto& values = seeds->at(real_key(names, params));
    return values[rng.below(values.size())];
  };
  p.optimum = best;
  const std::size_t n_seeds = seeds->begin()->second.size();
  p.definition = {{"path", path}, {"params", names}, {"objective", "1 - val_score_mean; each evaluation 1 - one seed's val_score"},
                  {"argmin", argmin}, {"points_in_space", configs.size()}, {"seeds", n_seeds}, {"made_by", made_by}};
  const std::string file = path.substr(path.find_last_of('/') + 1);
  // What the table is: the `# made by` line's description (scikit-learn) or its grid (the cnn cells).
  std::string what = made_by.substr(std::min(made_by.size(), made_by.find(": ", made_by.find(" at commit ")) + 2));
  if (const auto grid = what.find("; grid "); grid != std::string::npos) what = what.substr(0, grid);
  else if (const auto open = made_by.find(" ("); open != std::string::npos)
    what = "hpctune's cnn, a cell " + made_by.substr(open + 1, made_by.find(") at commit") - open);
  p.definition["what"] = what + " (bench/data/real-tables/" + file + ", " + std::to_string(n_seeds) +
                         " seeds; each evaluation one seed's validation error)";
  return p;
}

// --- noisy: a grid or cell whose points carry a fixed noise --------------------------------------
//
// value(x) = truth(x) + sd * z(x), z(x) = (u1 + u2 + u3 + u4 - 2) * sqrt(3) (mean 0, variance 1),
// u_j the j-th draw of splitmix64 from state noise_seed ^ (index(x) * 0x9E3779B97F4A7C15), as
// (z >> 11) * 2^-53; index(x) the point's mixed-radix number over the space's levels (an int's
// values low..high, a choice's values), the first parameter fastest. search_optuna.py does the same.

std::vector<std::vector<json>> space_levels(const search::Space& space) {
  std::vector<std::vector<json>> out;
  for (const auto& s : space.params()) {
    std::vector<json> v;
    if (s.type == ParamType::kInt)
      for (auto k = static_cast<int64_t>(s.low); k <= static_cast<int64_t>(s.high); k += s.step) v.emplace_back(k);
    else
      v = s.choices;
    out.push_back(std::move(v));
  }
  return out;
}

double noise_z(uint64_t noise_seed, uint64_t index) {
  uint64_t state = noise_seed ^ (index * 0x9E3779B97F4A7C15ULL);
  double sum = 0;
  for (int j = 0; j < 4; ++j) sum += static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53;
  return (sum - 2.0) * std::sqrt(3.0);
}

Problem make_noisy(Problem base, const std::string& id, uint64_t noise_seed, double relative_sd) {
  // sd: relative_sd x the spread of the good values: the range of the best 10% of 2,000 random
  // points (where the search decides; rosenbrock's huge values elsewhere do not count).
  Rng rng(derive_seed(noise_seed, 1));
  std::vector<double> probe(2000);
  for (auto& v : probe) v = base.eval(base.space.sample(rng));
  std::sort(probe.begin(), probe.end());
  const double sd = relative_sd * (probe[200] - probe[0]);
  std::vector<std::string> names;
  for (const auto& s : base.space.params()) names.push_back(s.name);
  const auto levels = space_levels(base.space);
  auto truth = base.eval;
  Problem p;
  p.id = id;
  p.kind = "noisy";
  p.dim = base.dim;
  p.space = base.space;
  p.truth = truth;
  p.eval = [truth, names, levels, noise_seed, sd](const Params& params) {
    uint64_t index = 0, radix = 1;
    for (std::size_t i = 0; i < names.size(); ++i) {
      const json& v = params.at(names[i]);
      const auto at = static_cast<uint64_t>(std::find(levels[i].begin(), levels[i].end(), v) - levels[i].begin());
      index += at * radix;
      radix *= levels[i].size();
    }
    return truth(params) + sd * noise_z(noise_seed, index);
  };
  p.optimum = base.optimum;
  base.definition["id"] = base.id;
  base.definition["kind"] = base.kind;
  base.definition["space"] = space_json(base.space);
  p.definition = {{"base", base.definition}, {"noise", {{"seed", noise_seed}, {"sd", sd}, {"relative_sd", relative_sd}}},
                  {"points_in_space", base.definition.value("points_in_space", json())}};
  if (base.definition.contains("argmin")) p.definition["argmin"] = base.definition["argmin"];
  char what[200];
  std::snprintf(what, sizeof what, "%s; each point's value + a fixed noise of sd %.3g (%.0f%% of the range of the best 10%% of random points)",
                base.definition.value("what", base.kind).c_str(), sd, relative_sd * 100);
  p.definition["what"] = what;
  return p;
}

// --- the generated suite ------------------------------------------------------------------------

constexpr uint64_t kSuiteSeed = 2511;  // issue 25's suite
constexpr int kOrdinal = 14, kCategorical = 12, kConditional = 10, kNoisy = 10;

std::string numbered(const char* prefix, int n) {
  char id[32];
  std::snprintf(id, sizeof id, "%s-%02d", prefix, n);
  return id;
}

// Budgets: (20, 50) with probability 0.4, (50, 100) 0.4, (100, 200) 0.2; a finite space smaller
// than twice the larger budget takes the next smaller pair.
std::vector<int> draw_budgets(Rng& rng, double points) {
  const double u = rng.uniform();
  int pick = u < 0.4 ? 0 : u < 0.8 ? 1 : 2;
  static const std::vector<std::vector<int>> pairs = {{20, 50}, {50, 100}, {100, 200}};
  while (pick > 0 && points < 2.0 * pairs[static_cast<std::size_t>(pick)][1]) --pick;
  return pairs[static_cast<std::size_t>(pick)];
}

// ord-NN: a test function on a grid of 3-10 levels per dimension (at most 10^6 points), shifted
// inside the box; levels as integer indices or as ordered choices of the points.
GridSpec draw_grid(const std::string& id, uint64_t seed, bool ordered) {
  Rng rng(seed);
  static const std::vector<std::pair<std::string, std::pair<int, int>>> functions = {
      {"branin", {2, 2}}, {"hartmann3", {3, 3}}, {"hartmann6", {6, 6}},
      {"rosenbrock", {2, 6}}, {"levy", {2, 8}}, {"ackley", {2, 8}}};
  const auto& [name, dims] = functions[rng.below(functions.size())];
  const int dim = static_cast<int>(rng.integer(dims.first, dims.second));
  GridSpec g{id, name, dim, false, {}, ordered, {}};
  for (int i = 0; i < dim; ++i) g.levels.push_back(static_cast<int>(rng.integer(3, 10)));
  for (int i = 0; i < dim; ++i) g.shift.push_back(rng.uniform(0.1, 0.9));
  g.as_int = ordered && rng.uniform() < 0.5;
  auto size = [&] {
    double n = 1;
    for (int l : g.levels) n *= l;
    return n;
  };
  while (size() > 1e6) --*std::max_element(g.levels.begin(), g.levels.end());
  while (size() < 100 && *std::min_element(g.levels.begin(), g.levels.end()) < 10)
    ++*std::min_element(g.levels.begin(), g.levels.end());
  return g;
}

CellSpec draw_cell(const std::string& id, uint64_t seed) {
  Rng rng(seed);
  CellSpec c{id, derive_seed(seed, 1), rng.uniform(0.2, 1.5), static_cast<int>(rng.integer(3, 8)),
             static_cast<int>(rng.integer(3, 8)), rng.uniform(0.3, 1.2)};
  while (std::pow(c.n_ops, c.edges) > 4e5) c.edges > 4 ? --c.edges : --c.n_ops;
  while (std::pow(c.n_ops, c.edges) < 256) ++c.edges;
  return c;
}

// cond-NN: a branch choice of 2-4 values, each with 1-3 parameters of its own (a float, a
// log-scaled float, an int or an ordered choice of powers of 2) and a quadratic term in each
// (its center drawn inside the range), plus 1-3 shared parameters and maybe an unordered choice
// with an effect per value; the branch's offset: one at 0, the others 0.02-0.3. Optimum 0.
Result<Problem> draw_conditional(const std::string& id, uint64_t seed) {
  Rng rng(seed);
  MixedModel m;
  m.branch = "branch";
  m.optimum = 0;
  std::vector<ParamSpec> specs;
  const int branches = static_cast<int>(rng.integer(2, 4));
  std::vector<json> values;
  for (int b = 0; b < branches; ++b) values.emplace_back(indexed("b", static_cast<std::size_t>(b + 1)));
  specs.push_back(choice_param("branch", values, false));
  const auto best_branch = rng.below(static_cast<uint64_t>(branches));
  for (int b = 0; b < branches; ++b)
    m.offset[values[static_cast<std::size_t>(b)].get<std::string>()] = static_cast<uint64_t>(b) == best_branch ? 0.0 : rng.uniform(0.02, 0.3);
  auto add_param = [&](const std::string& name, std::optional<json> under) {
    ParamSpec p;
    Term t{name, "", 0, 0};
    switch (rng.below(4)) {
      case 0:
        p = float_param(name, 0, 1);
        t.center = rng.uniform(0.1, 0.9);
        t.weight = rng.uniform(0.5, 3);
        break;
      case 1: {
        const double lo = rng.uniform(-5, -1), width = rng.uniform(2, 4);
        p = float_param(name, std::pow(10.0, lo), std::pow(10.0, lo + width), true);
        t.transform = "log10";
        t.center = lo + width * rng.uniform(0.15, 0.85);
        t.weight = rng.uniform(0.05, 0.3);
        break;
      }
      case 2: {
        const int high = static_cast<int>(rng.integer(4, 16));
        p = int_param(name, 1, high);
        t.center = static_cast<double>(rng.integer(1, high));
        t.weight = 0.3 / ((high - 1.0) * (high - 1.0)) * rng.uniform(0.5, 2);
        break;
      }
      default: {
        const int first = static_cast<int>(rng.integer(2, 5)), n = static_cast<int>(rng.integer(3, 8));
        std::vector<json> v;
        for (int k = 0; k < n; ++k) v.emplace_back(int64_t{1} << (first + k));
        p = choice_param(name, v, true);
        t.transform = "log2";
        t.center = static_cast<double>(first + static_cast<int>(rng.below(static_cast<uint64_t>(n))));
        t.weight = rng.uniform(0.01, 0.06);
      }
    }
    if (under) p = when(p, "branch", {*under});
    specs.push_back(std::move(p));
    m.terms.push_back(t);
  };
  int most = 0;
  for (int b = 0; b < branches; ++b) {
    const int own = static_cast<int>(rng.integer(1, 3));
    most = std::max(most, own);
    for (int k = 0; k < own; ++k)
      add_param(indexed((values[static_cast<std::size_t>(b)].get<std::string>() + "_p").c_str(), static_cast<std::size_t>(k + 1)),
                values[static_cast<std::size_t>(b)]);
  }
  const int shared = static_cast<int>(rng.integer(1, 3));
  for (int k = 0; k < shared; ++k) add_param(indexed("s", static_cast<std::size_t>(k + 1)), std::nullopt);
  int dim = 1 + most + shared;
  if (rng.uniform() < 0.6) {
    const int n = static_cast<int>(rng.integer(3, 5));
    std::vector<json> v;
    std::map<std::string, double> effect;
    const auto best = rng.below(static_cast<uint64_t>(n));
    for (int k = 0; k < n; ++k) {
      v.emplace_back(indexed("c", static_cast<std::size_t>(k + 1)));
      effect[v.back().get<std::string>()] = static_cast<uint64_t>(k) == best ? 0.0 : rng.uniform(0.01, 0.2);
    }
    specs.push_back(choice_param("act", v, false));
    m.choice_terms["act"] = effect;
    ++dim;
  }
  HPCTUNE_ASSIGN(Problem p, mixed_problem(id, std::move(specs), m, dim));
  p.definition["what"] = "a conditional space: a branch of " + std::to_string(branches) + " values with " +
                         "their own parameters, " + std::to_string(shared) + " shared (a sum of quadratic terms, minimum 0)";
  return p;
}

struct SuiteEntry {
  std::string id;
  std::function<Result<Problem>(const std::string& table_dir)> make;
};

const std::vector<SuiteEntry>& suite() {
  static const std::vector<SuiteEntry> entries = [] {
    std::vector<SuiteEntry> out;
    // Problem n of class c: derive_seed(kSuiteSeed, 1000 c + n), so that a class can grow without
    // changing the problems already in it or in another class.
    for (int n = 1; n <= kOrdinal; ++n) {
      const uint64_t seed = derive_seed(kSuiteSeed, 1000 + static_cast<uint64_t>(n));
      out.push_back({numbered("ord", n), [id = numbered("ord", n), seed](const std::string&) {
                       return ordinal(draw_grid(id, seed, true));
                     }});
    }
    for (int n = 1; n <= kCategorical; ++n) {  // two in three a NAS-like cell, one a grid of unordered levels
      const uint64_t seed = derive_seed(kSuiteSeed, 2000 + static_cast<uint64_t>(n));
      out.push_back({numbered("cat", n), [id = numbered("cat", n), seed, n](const std::string&) -> Result<Problem> {
                       if (n % 3 == 0) return ordinal(draw_grid(id, seed, false));
                       return nas_cell(draw_cell(id, seed));
                     }});
    }
    for (int n = 1; n <= kConditional; ++n) {
      const uint64_t seed = derive_seed(kSuiteSeed, 3000 + static_cast<uint64_t>(n));
      out.push_back({numbered("cond", n), [id = numbered("cond", n), seed](const std::string&) {
                       return draw_conditional(id, seed);
                     }});
    }
    for (int n = 1; n <= kNoisy; ++n) {  // alternately an ordinal grid and a cell
      const uint64_t seed = derive_seed(kSuiteSeed, 4000 + static_cast<uint64_t>(n));
      out.push_back({numbered("noisy", n), [id = numbered("noisy", n), seed, n](const std::string&) -> Result<Problem> {
                       Rng rng(derive_seed(seed, 2));
                       const double relative_sd = rng.uniform(0.1, 0.5);
                       auto base = n % 2 ? ordinal(draw_grid(id + "-base", seed, true)) : nas_cell(draw_cell(id + "-base", seed));
                       if (!base.ok()) return base;
                       return make_noisy(std::move(base).value(), id, derive_seed(seed, 3), relative_sd);
                     }});
    }
    for (const auto& t : table_specs()) {
      out.push_back({t.id, [t](const std::string& dir) { return table_problem(t, dir + "/" + t.file); }});
    }
    for (const auto& id : real_ids())
      out.push_back({id, [id](const std::string& dir) { return real_table_problem(id, dir + "/real-tables/" + id + ".csv"); }});
    return out;
  }();
  return entries;
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

namespace {

// The first benchmark's problems (auto's choices were made on them): always in the tuning part.
const std::vector<std::string>& first_ids() {
  static const std::vector<std::string> ids = [] {
    std::vector<std::string> out = {"branin", "hartmann6", "levy10", "rosenbrock4", "ackley4"};
    for (const auto& g : grid_specs()) out.emplace_back(g.id);
    for (const auto& c : cell_specs()) out.emplace_back(c.id);
    out.insert(out.end(), {"mixed-optim", "mixed-arch"});
    return out;
  }();
  return ids;
}

uint64_t fnv1a64(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

}  // namespace

std::vector<std::string> problem_ids() {
  std::vector<std::string> ids = first_ids();
  for (const auto& e : suite()) ids.push_back(e.id);  // fashion-mlp first among the tables
  return ids;
}

std::vector<std::string> real_table_ids() { return real_ids(); }

std::string problem_part(const std::string& id) {
  if (id == "fashion-mlp" || std::find(first_ids().begin(), first_ids().end(), id) != first_ids().end()) return "tuning";
  const auto& real = real_ids();
  if (std::find(real.begin(), real.end(), id) != real.end()) {  // every third by FNV-1a-64: a third exactly
    const auto below = std::count_if(real.begin(), real.end(), [&](const std::string& other) { return fnv1a64(other) < fnv1a64(id); });
    return below % 3 == 0 ? "held-out" : "tuning";
  }
  return fnv1a64(id) % 3 == 0 ? "held-out" : "tuning";
}

Result<Problem> make_problem(const std::string& id, const std::string& fashion_table_path) {
  Result<Problem> made = err(Errc::kInvalidArgument, "unknown problem");
  bool found = false;
  for (const auto& g : grid_specs())
    if (id == g.id) made = ordinal(g), found = true;
  for (const auto& c : cell_specs())
    if (id == c.id) made = nas_cell(c), found = true;
  if (!found && (id == "mixed-optim" || id == "mixed-arch")) made = mixed(id), found = true;
  const std::string table_dir = fashion_table_path.substr(0, fashion_table_path.find_last_of('/') + 1);
  for (const auto& e : suite())
    if (!found && id == e.id) {
      made = id == "fashion-mlp" ? table_problem(table_specs().front(), fashion_table_path)
                                 : e.make(table_dir.empty() ? "." : table_dir.substr(0, table_dir.size() - 1));
      found = true;
    }
  if (!found) made = continuous(id);
  if (!made.ok()) return made;
  Problem p = std::move(made).value();
  p.part = problem_part(p.id);
  if (p.budgets.empty()) {
    const bool first = std::find(first_ids().begin(), first_ids().end(), p.id) != first_ids().end();
    Rng rng(derive_seed(kSuiteSeed ^ fnv1a64(p.id), 4));
    const json& points = p.definition.contains("points_in_space") ? p.definition["points_in_space"] : json();
    p.budgets = first ? std::vector<int>{50, 100} : draw_budgets(rng, points.is_number() ? points.get<double>() : INFINITY);
  }
  p.definition["id"] = p.id;
  add_checks(p);
  p.definition["budgets"] = p.budgets;
  p.definition["part"] = p.part;
  return p;
}

}  // namespace hpctune::bench
