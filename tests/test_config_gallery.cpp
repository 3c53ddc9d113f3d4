// The config gallery (configs/*.yaml) and the README that describes it.
//
// Every config under configs/ must pass `hpctune validate`, and each must run: a shrunk copy of it
// (few trials, 2 epochs over a slice of the data; the algorithm, the stopper, the ranks and the
// trainer left as they are) completes with at least one done trial. The README must list every
// file of configs/ and only folders that exist. The README cases are cheap and also run alone as
// the fast test test_readme_gallery (-tc="README*").
#include <algorithm>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <yaml-cpp/yaml.h>

#include "tests/campaign_fixture.h"

using namespace hpctune;
using namespace hpctune::launch;
using namespace hpctune::testing;
namespace fs = std::filesystem;

namespace {

const std::string kSource = HPCTUNE_SOURCE_DIR;

std::vector<fs::path> files_in_configs() {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(kSource + "/configs"))
    if (e.is_regular_file()) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<fs::path> gallery_yaml() {
  std::vector<fs::path> out;
  for (const auto& p : files_in_configs())
    if (p.extension() == ".yaml") out.push_back(p);
  return out;
}

// Runs hpctune with the checkout as its working directory (the command trainer's configs name
// their script and tools/python relative to it); returns its exit status.
ExitStatus run_in_checkout(const std::vector<std::string>& args, const std::string& log, std::chrono::seconds limit) {
  SpawnOptions o;
  o.argv = {HPCTUNE_BINARY};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.workdir = kSource;
  o.stdout_path = log;
  o.stderr_path = "=stdout";
  auto child = ChildProcess::spawn(o);
  REQUIRE(child.ok());
  auto status = child->wait_for(limit);
  REQUIRE_MESSAGE(status.has_value(), "hpctune did not finish in time; log:\n" << tail_file(log, 40));
  return *status;
}

int64_t as_int(const YAML::Node& n, int64_t fallback) { return n && n.IsScalar() ? n.as<int64_t>() : fallback; }

// The config shrunk to a quick run: at most 3 trials (a grid keeps its size, which max_trials must
// cover), 2 epochs over 1,000 training and 500 test images, warm_start taken from `dir`.
// A search section shrunk to at most 3 trials (a grid keeps its size), its warm start from `dir`.
void shrink_search(YAML::Node search, const std::string& dir) {
  if (search["algorithm"].as<std::string>("random") != "grid")
    search["max_trials"] = std::min<int64_t>(as_int(search["max_trials"], 3), 3);
  if (auto w = search["warm_start"]; w && !w.as<std::string>().empty())
    search["warm_start"] = dir + "/" + fs::path(w.as<std::string>()).filename().string();
}

// A workflow's stages shrunk the same way: searches to 3 trials, a PBT population of 2 over 2
// steps, stage trainers' slices of the data small.
void shrink_stages(YAML::Node stages, const std::string& dir) {
  for (YAML::Node st : stages) {
    if (st["search"]) shrink_search(st["search"], dir);
    if (st["kind"].as<std::string>() == "pbt") {
      st["population"] = 2;
      st["ready"] = 1;
      st["steps"] = 2;
    }
    if (st["max_train_samples"]) st["max_train_samples"] = std::min<int64_t>(as_int(st["max_train_samples"], 300), 300);
    if (st["retrain"]) st["retrain"] = YAML::Load("{top: 1, seeds: 1}");
    if (YAML::Node t = st["trainer"]; t && t.IsMap()) {
      if (t["epochs"]) t["epochs"] = 2;
      if (t["max_train_samples"]) t["max_train_samples"] = 1000;
      if (t["max_test_samples"]) t["max_test_samples"] = 500;
    }
  }
}

std::string shrunk(const fs::path& config, const std::string& dir) {
  YAML::Node root = YAML::LoadFile(config.string());
  if (root["stages"]) {
    shrink_stages(root["stages"], dir);
  } else {
    shrink_search(root["search"], dir);
  }
  YAML::Node trainer = root["trainer"];
  const std::string kind = trainer["kind"].as<std::string>();
  if (kind == "mlp" || kind == "cnn") {
    trainer["epochs"] = std::min<int64_t>(as_int(trainer["epochs"], 10), 2);
    trainer["max_train_samples"] = 1000;
    trainer["max_test_samples"] = 500;
  }
  // A fixed `epochs` in the space (the command trainer's script takes it as an argument).
  if (YAML::Node space = root["space"]; space && space["epochs"] && space["epochs"].IsScalar()) space["epochs"] = 2;
  if (YAML::Node es = root["early_stopping"]; es && es.IsMap() && es["max_t"]) es["max_t"] = 2;
  // A first judged step below the 2 epochs (validate refuses one that judges no trial).
  if (YAML::Node es = root["early_stopping"]; es && es.IsMap() && es["grace_period"]) es["grace_period"] = 1;
  YAML::Emitter out;
  out << root;
  REQUIRE(out.good());
  return out.c_str();
}

// The store a config's search.warm_start names; "" for none (a workflow has no top-level search).
std::string warm_start_of(const fs::path& config) {
  const YAML::Node root = YAML::LoadFile(config.string());
  const YAML::Node search = root["search"];
  if (!search || !search.IsMap()) return "";
  const YAML::Node w = search["warm_start"];
  return w && w.IsScalar() ? w.as<std::string>() : "";
}

// `storage:` of a config as the gallery writes it (warm-start sources are found by it).
std::string storage_of(const fs::path& config) {
  YAML::Node root = YAML::LoadFile(config.string());
  return root["storage"] ? root["storage"].as<std::string>() : root["name"].as<std::string>() + ".db";
}

std::string read_readme() {
  std::string text = read_file(kSource + "/README.md");
  REQUIRE(!text.empty());
  return text;
}

// The lines of the README section that starts with `heading` (up to the next heading of its level).
std::vector<std::string> section(const std::string& readme, const std::string& heading) {
  std::vector<std::string> out;
  std::istringstream in(readme);
  std::string line;
  bool inside = false;
  const std::string level = heading.substr(0, heading.find(' ') + 1);
  while (std::getline(in, line)) {
    if (line.rfind(heading, 0) == 0) {
      inside = true;
      continue;
    }
    if (inside && line.rfind(level, 0) == 0) break;
    if (inside) out.push_back(line);
  }
  return out;
}

}  // namespace

TEST_CASE("README: the config gallery table lists every file in configs/") {
  const auto lines = section(read_readme(), "## Config gallery");
  REQUIRE_MESSAGE(!lines.empty(), "README.md has no '## Config gallery' section");
  std::string table;
  for (const auto& l : lines)
    if (l.rfind("|", 0) == 0) table += l + "\n";
  for (const auto& p : files_in_configs()) {
    const std::string name = "configs/" + p.filename().string();
    CHECK_MESSAGE(table.find("`" + name + "`") != std::string::npos,
                  name << " is not listed in the README's config gallery table");
  }
}

TEST_CASE("README: the architecture section matches the tree: every folder it lists exists, and every folder with code is listed") {
  const auto lines = section(read_readme(), "## Architecture");
  REQUIRE(!lines.empty());
  // Table rows such as "| `scheduler/` | `hpctune_scheduler` | ..." and bullets such as
  // "- **`configs/`** — ..." name folders in their first cell or bold part.
  const std::regex folder("`([A-Za-z0-9_./-]+)/`");
  std::set<std::string> listed;
  for (const auto& l : lines) {
    std::string head;
    if (l.rfind("- **", 0) == 0) head = l.substr(0, l.find("**", 4) + 2);
    else if (l.rfind("| `", 0) == 0) head = l.substr(0, l.find('|', 1));
    else continue;
    for (std::sregex_iterator m(head.begin(), head.end(), folder), end; m != end; ++m) {
      const std::string dir = (*m)[1].str();
      listed.insert(dir);
      CHECK_MESSAGE(fs::is_directory(kSource + "/" + dir), "README lists folder " << dir << "/, which does not exist");
    }
  }
  // Every top-level folder that holds code (a CMakeLists.txt, or a C++ source) has its line.
  for (const auto& entry : fs::directory_iterator(kSource)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || name.front() == '.' || name.rfind("build", 0) == 0) continue;
    bool code = fs::exists(entry.path() / "CMakeLists.txt");
    for (const auto& f : fs::directory_iterator(entry.path())) {
      const auto ext = f.path().extension();
      code |= ext == ".h" || ext == ".cpp";
    }
    if (code) CHECK_MESSAGE(listed.count(name) == 1, "folder " << name << "/ holds code but has no line in the README's architecture section");
  }
  CHECK(listed.size() >= 14);
}

TEST_CASE("README: the architecture diagram shows every folder that the table gives a library") {
  const auto lines = section(read_readme(), "## Architecture");
  REQUIRE(!lines.empty());
  // The first fenced block of the section is the diagram.
  std::string diagram;
  bool fenced = false;
  for (const auto& l : lines) {
    if (l.rfind("```", 0) == 0) {
      if (fenced) break;
      fenced = true;
      continue;
    }
    if (fenced) diagram += l + "\n";
  }
  REQUIRE_MESSAGE(!diagram.empty(), "the architecture section has no diagram");
  // Table rows "| `report/` | `hpctune_report` | ...": a folder with a library (or the binary).
  const std::regex row("^\\| `([A-Za-z0-9_]+)/` \\| ");
  int rows = 0;
  for (const auto& l : lines) {
    std::smatch m;
    if (!std::regex_search(l, m, row)) continue;
    ++rows;
    const std::regex shown("(^|[ (])" + m[1].str() + "/");
    CHECK_MESSAGE(std::regex_search(diagram, shown), "the architecture diagram leaves out " << m[1].str() << "/");
  }
  CHECK(rows >= 14);
}

TEST_CASE("gallery: every config validates and a shrunk copy of each runs to a done trial") {
  TempDir dir;
  const auto configs = gallery_yaml();
  REQUIRE(configs.size() >= 16);

  // Warm-start configs last: their source database is written by another config of the gallery.
  std::vector<fs::path> order;
  std::vector<fs::path> warm;
  std::set<std::string> storages;
  for (const auto& c : configs) {
    const std::string log = dir.file(c.stem().string() + ".validate.log");
    const ExitStatus v = run_in_checkout({"validate", c.string()}, log, 60s);
    CHECK_MESSAGE(v.success(), c.filename() << " does not validate:\n" << read_file(log));
    (warm_start_of(c).empty() ? order : warm).push_back(c);
    storages.insert(storage_of(c));
  }
  order.insert(order.end(), warm.begin(), warm.end());

  for (const auto& c : order) {
    const std::string stem = c.stem().string();
    CAPTURE(stem);
    if (const std::string w = warm_start_of(c); !w.empty()) {
      REQUIRE_MESSAGE(storages.count(w) == 1, c.filename() << ": its warm_start " << w << " is written by no gallery config");
    }
    const std::string small = dir.write(stem + ".yaml", shrunk(c, dir.path));
    const std::string db = dir.file(storage_of(c));
    const std::string log = dir.file(stem + ".log");
    const auto t0 = std::chrono::steady_clock::now();
    const ExitStatus s = run_in_checkout({"run", small, "--db", db}, log, 120s);
    MESSAGE(stem << ": " << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s");
    CHECK_MESSAGE(s.success(), stem << " exited with " << s.describe() << "; log:\n" << tail_file(log, 30));
    const auto trials = read_trials(db);
    const auto done = std::count_if(trials.begin(), trials.end(),
                                     [](const store::TrialRow& t) { return t.state == store::TrialState::kDone; });
    CHECK_MESSAGE(done >= 1, stem << ": no trial is done; log:\n" << tail_file(log, 30));
    if (!warm.empty() && c == warm.front()) {
      const auto events = read_events(db);
      const bool loaded = std::any_of(events.begin(), events.end(), [](const store::EventRow& e) {
        return e.kind == "warm_start" && e.detail.value("loaded", int64_t{0}) > 0;
      });
      CHECK_MESSAGE(loaded, stem << ": no warm-start trial was loaded");
    }
  }
}
