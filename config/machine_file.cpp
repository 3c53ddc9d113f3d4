#include "config/machine_file.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "common/text.h"
#include "config/settings.h"
#include "config/yaml_tree.h"

namespace hpctune::config {
namespace {

// One number of the file: its key path, where it goes (times `scale`), and its range [min, max]
// in the file's unit, stated in the message that refuses a value outside it. The ranges span
// every real machine and refuse what would price a step at infinity or past the simulator's clock
// (a rate of 0 or 1e-300, a latency of hours, an update of a second per parameter).
struct MachineKey {
  const char* path;
  double MachineModel::*number = nullptr;
  int64_t MachineModel::*integer = nullptr;
  double scale = 1;
  double min = 0, max = 0;
  const char* unit = "";
};

const std::vector<MachineKey>& machine_keys() {
  using M = MachineModel;
  static const std::vector<MachineKey> keys = {
      {"calibrated_nodes", nullptr, &M::calibrated_nodes, 1, 1, 1 << 20, "nodes"},
      {"ranks_per_node", nullptr, &M::ranks_per_node, 1, 1, 4096, "ranks"},
      {"nodes", nullptr, &M::nodes, 1, 0, 1 << 20, "nodes"},
      // 1 MFLOP/s (a 1980s workstation) to 1 EFLOP/s a rank.
      {"compute.mlp_gflops", &M::mlp_flops_per_s, nullptr, 1e9, 1e-3, 1e9, "GFLOP/s"},
      {"compute.cnn_gflops", &M::cnn_flops_per_s, nullptr, 1e9, 1e-3, 1e9, "GFLOP/s"},
      // Up to a second an image, a millisecond a parameter: beyond, not a cost of training.
      {"compute.image_overhead_us", &M::image_overhead_s, nullptr, 1e-6, 0, 1e6, "microseconds"},
      {"compute.update_ns_per_param", &M::update_s_per_param, nullptr, 1e-9, 0, 1e6, "nanoseconds"},
      // 1 MB/s to 1 PB/s; a latency or a hand-off of up to a second.
      {"network.intra_node.bandwidth_gb_s", &M::intra_bandwidth_bytes_per_s, nullptr, 1e9, 1e-3, 1e6, "GB/s"},
      {"network.intra_node.latency_us", &M::intra_latency_s, nullptr, 1e-6, 0, 1e6, "microseconds"},
      {"network.inter_node.bandwidth_gb_s", &M::inter_bandwidth_bytes_per_s, nullptr, 1e9, 1e-3, 1e6, "GB/s"},
      {"network.inter_node.latency_us", &M::inter_latency_s, nullptr, 1e-6, 0, 1e6, "microseconds"},
      {"network.stage_handoff_us", &M::stage_handoff_s, nullptr, 1e-6, 0, 1e6, "microseconds"},
      // Up to a day.
      {"startup.seconds", &M::startup_s, nullptr, 1, 0, 86400, "seconds"},
      {"startup.per_rank_seconds", &M::startup_per_rank_s, nullptr, 1, 0, 86400, "seconds"},
      {"startup.parallel_seconds", &M::startup_parallel_s, nullptr, 1, 0, 86400, "seconds"},
      {"startup.load_seconds", &M::load_s, nullptr, 1, 0, 86400, "seconds"},
      {"startup.trial_seconds", &M::trial_setup_s, nullptr, 1, 0, 86400, "seconds"},
      // 10 KB/s to 1 PB/s.
      {"disk.bandwidth_mb_s", &M::disk_bytes_per_s, nullptr, 1e6, 1e-2, 1e9, "MB/s"},
  };
  return keys;
}

Error at(const std::string& source, Mark m, const std::string& path, const std::string& what) {
  return err(Errc::kConfig, source + ":" + std::to_string(m.line) + ":" + std::to_string(m.column) + ": " + path + ": " + what);
}

// The sections and leaves that may appear below `prefix` ("" for the top level).
std::vector<std::string> children_of(const std::string& prefix) {
  std::vector<std::string> out;
  auto add = [&](const std::string& name) {
    for (const auto& o : out)
      if (o == name) return;
    out.push_back(name);
  };
  if (prefix.empty()) {
    add("name");
    add("notes");
  }
  for (const auto& k : machine_keys()) {
    const std::string p = k.path;
    if (p.size() <= prefix.size() || (!prefix.empty() && (p.compare(0, prefix.size(), prefix) != 0 || p[prefix.size()] != '.')))
      continue;
    const std::string rest = p.substr(prefix.empty() ? 0 : prefix.size() + 1);
    add(rest.substr(0, rest.find('.')));
  }
  return out;
}

const MachineKey* leaf(const std::string& path) {
  for (const auto& k : machine_keys())
    if (path == k.path) return &k;
  return nullptr;
}

// Walks a map node below `prefix`, checking every key against the table and filling `m`.
Status walk(const YNode& map, Mark map_mark, const std::string& prefix, const std::string& source, MachineModel& m,
            std::vector<std::string>& seen) {
  if (map.kind != YNode::Kind::kMap) return at(source, map_mark, prefix, std::string("must be a map, not ") + kind_text(map));
  const std::vector<std::string> known = children_of(prefix);
  for (const YEntry& e : map.entries) {
    const std::string path = prefix.empty() ? e.key : prefix + "." + e.key;
    bool ok = false;
    for (const auto& k : known) ok = ok || k == e.key;
    if (!ok) {
      std::vector<Candidate> cands;
      for (const auto& k : known) cands.push_back({k, k});
      std::string what = "unknown key";
      if (auto near = did_you_mean(e.key, cands)) what += ", did you mean '" + *near + "'?";
      else what += " (known: " + join(known, ", ") + ")";
      return at(source, e.key_mark, path, what);
    }
    if (prefix.empty() && (e.key == "name" || e.key == "notes")) {
      if (e.value.kind != YNode::Kind::kScalar) return at(source, e.key_mark, path, "must be a string");
      if (e.key == "name") m.name = e.value.text;
      continue;
    }
    const MachineKey* k = leaf(path);
    if (k == nullptr) {
      HPCTUNE_TRY(walk(e.value, e.key_mark, path, source, m, seen));
      continue;
    }
    seen.push_back(path);
    const nlohmann::json v = e.value.kind == YNode::Kind::kScalar && !e.value.quoted ? resolve_plain_scalar(e.value.text)
                                                                                      : nlohmann::json();
    if (!v.is_number()) {
      return at(source, e.key_mark, path, "must be a number of " + std::string(k->unit) + ", not " +
                                              (e.value.kind == YNode::Kind::kScalar ? "'" + e.value.text + "'" : kind_text(e.value)));
    }
    const double x = v.get<double>();
    if (!std::isfinite(x) || x < k->min || x > k->max) {
      char range[96];
      std::snprintf(range, sizeof range, "at least %g and at most %g", k->min, k->max);
      return at(source, e.key_mark, path, e.value.text + " is out of range: must be " + range + " " + k->unit);
    }
    if (k->integer != nullptr) {
      if (!v.is_number_integer()) return at(source, e.key_mark, path, "must be a whole number of " + std::string(k->unit));
      m.*(k->integer) = v.get<int64_t>();
    } else {
      m.*(k->number) = x * k->scale;
    }
  }
  return Status::Ok();
}

}  // namespace

Result<MachineModel> parse_machine_file(const std::string& text, const std::string& source) {
  HPCTUNE_ASSIGN(YNode tree, read_tree(text, source));
  MachineModel m;
  m.name = std::filesystem::path(source).stem().string();
  std::vector<std::string> seen;
  HPCTUNE_TRY(walk(tree, Mark{}, "", source, m, seen));
  for (const auto& k : machine_keys()) {
    bool found = false;
    for (const auto& s : seen) found = found || s == k.path;
    // Optional: nodes (0: unbounded), the update cost, a parallel launcher's start, the data's
    // load and a trial's setup (0: not priced).
    const std::string path = k.path;
    if (found || path == "nodes" || path == "compute.update_ns_per_param" || path == "startup.parallel_seconds" ||
        path == "startup.load_seconds" || path == "startup.trial_seconds") {
      continue;
    }
    // Missing: reported where its section is (or the file's start).
    std::string parent = k.path;
    Mark mark{};
    const auto dot = parent.rfind('.');
    if (dot != std::string::npos) mark = mark_below(tree, Mark{}, parent.substr(0, dot));
    return at(source, mark, k.path, std::string("is required (") + k.unit + ")");
  }
  return m;
}

Result<MachineModel> load_machine_file(const std::string& path) {
  HPCTUNE_ASSIGN(const std::string text, read_yaml_file(path, "machine file", kMaxMachineFileBytes));
  return parse_machine_file(text, path);
}

std::string machine_file_text(const MachineModel& m, const std::string& comments) {
  auto num = [](double v) {
    char b[64];
    std::snprintf(b, sizeof b, "%.6g", v);
    return std::string(b);
  };
  std::string t;
  std::size_t pos = 0;
  while (pos < comments.size()) {
    const auto nl = comments.find('\n', pos);
    const std::string line = comments.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    t += line.empty() ? "#\n" : "# " + line + "\n";
    if (nl == std::string::npos) break;
    pos = nl + 1;
  }
  t += "name: " + m.name + "\n";
  t += "calibrated_nodes: " + std::to_string(m.calibrated_nodes) + "\n";
  t += "ranks_per_node: " + std::to_string(m.ranks_per_node) + "\n";
  if (m.nodes > 0) t += "nodes: " + std::to_string(m.nodes) + "\n";
  t += "compute:\n  mlp_gflops: " + num(m.mlp_flops_per_s / 1e9) + "\n  cnn_gflops: " + num(m.cnn_flops_per_s / 1e9) +
       "\n  image_overhead_us: " + num(m.image_overhead_s * 1e6) + "\n" +
       (m.update_s_per_param > 0 ? "  update_ns_per_param: " + num(m.update_s_per_param * 1e9) + "\n" : std::string());
  t += "network:\n  intra_node: {bandwidth_gb_s: " + num(m.intra_bandwidth_bytes_per_s / 1e9) +
       ", latency_us: " + num(m.intra_latency_s * 1e6) + "}\n";
  t += "  inter_node: {bandwidth_gb_s: " + num(m.inter_bandwidth_bytes_per_s / 1e9) +
       ", latency_us: " + num(m.inter_latency_s * 1e6) + "}\n";
  t += "  stage_handoff_us: " + num(m.stage_handoff_s * 1e6) + "\n";
  t += "startup: {seconds: " + num(m.startup_s) + ", per_rank_seconds: " + num(m.startup_per_rank_s) +
       (m.startup_parallel_s > 0 ? ", parallel_seconds: " + num(m.startup_parallel_s) : std::string()) +
       (m.load_s > 0 ? ", load_seconds: " + num(m.load_s) : std::string()) +
       (m.trial_setup_s > 0 ? ", trial_seconds: " + num(m.trial_setup_s) : std::string()) + "}\n";
  t += "disk: {bandwidth_mb_s: " + num(m.disk_bytes_per_s / 1e6) + "}\n";
  return t;
}

int64_t rank_slots(const MachineModel& m) { return m.nodes <= 0 ? 0 : m.nodes * std::max<int64_t>(1, m.ranks_per_node); }

double sharing_slowdown(int64_t slots, int64_t ranks) {
  if (slots <= 0 || ranks <= 0) return 1.0;
  return std::max(1.0, static_cast<double>(ranks) / static_cast<double>(slots));
}

double sharing_slowdown(const MachineModel& m, int64_t ranks) { return sharing_slowdown(rank_slots(m), ranks); }

}  // namespace hpctune::config
