// Fuzz target: the dashboard's routes (dashboard::Api::get, what every HTTP GET reaches after the
// token and Host checks) with arbitrary paths and query parameters, over a synthetic campaign with
// every stage kind (tests/synthetic_campaign.h: search, ensemble, transfer, pbt), written once at
// start-up into a temporary directory.
//
// An input is the path, then one query parameter per line as name=value (no '=': an empty value;
// names repeat as they may in a URL); bytes are taken as they are, NULs and invalid UTF-8 included,
// as the server hands them over after URL decoding. Every answer must be 200, 400 or 404 (500 is
// only for a database that cannot be read, and this one can), an error must say why in `error`,
// and the body must serialise as the server serialises it. abort() on any violation, so libFuzzer
// keeps the input.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include <unistd.h>

#include "dashboard/api.h"
#include "tests/synthetic_campaign.h"

using namespace hpctune;

namespace {

std::unique_ptr<dashboard::Api> api;
std::string work_dir;

[[noreturn]] void violated(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_dashboard: %s: %s\n", what, detail.c_str());
  std::abort();
}

void remove_work_dir() {
  std::error_code ec;
  std::filesystem::remove_all(work_dir, ec);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::string pattern = (std::filesystem::temp_directory_path() / "hpctune-fuzz-dashboard-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) violated("mkdtemp", pattern);
  work_dir = pattern;
  std::atexit(remove_work_dir);
  const std::string db = work_dir + "/synthetic.db";
  testing::SyntheticOptions o;
  o.with_stages = true;
  o.population = 20;
  o.groups = 4;
  o.running = 3;
  if (auto st = testing::make_synthetic_campaign(db, 200, 6, 1, o); !st.ok()) violated("fixture", st.error().to_string());
  // Snapshots are checked for changes once an hour: nothing writes the file while fuzzing.
  api = std::make_unique<dashboard::Api>(std::vector<std::string>{db}, std::chrono::hours(1));
  if (auto st = api->load(); !st.ok()) violated("load", st.error().to_string());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const size_t eol = bytes.find('\n');
  const std::string path(bytes.substr(0, eol));
  dashboard::QueryParams params;
  for (size_t at = eol; at != std::string_view::npos && at < bytes.size();) {
    const size_t next = bytes.find('\n', at + 1);
    const std::string_view line = bytes.substr(at + 1, next == std::string_view::npos ? std::string_view::npos : next - at - 1);
    const size_t eq = line.find('=');
    params.emplace(std::string(line.substr(0, eq)), eq == std::string_view::npos ? "" : std::string(line.substr(eq + 1)));
    at = next;
  }
  const dashboard::ApiResponse r = api->get(path, params);
  if (r.status != 200 && r.status != 400 && r.status != 404) {
    violated("a status other than 200, 400 or 404", std::to_string(r.status) + " for " + path + ": " + r.body.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace));
  }
  if (!r.content_type.empty()) return 0;  // text (CSV), served as it is
  const std::string body = r.body.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
  if (r.status != 200 && !(r.body.is_object() && r.body.contains("error") && r.body["error"].is_string())) {
    violated("an error without an 'error' message", path + ": " + body);
  }
  if (r.status == 200 && !r.body.is_object()) violated("a 200 answer that is not a JSON object", path + ": " + body);
  return 0;
}
