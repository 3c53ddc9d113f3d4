// libFuzzer target: the campaign config parser on arbitrary bytes taken as YAML text.
//
// parse_config must return a Result for every input, never throw, crash, hang or exhaust memory:
// the YAML reader, alias expansion, the walk against the settings table and the checks across
// keys (space, grid size, assign size, durations) all run on each input. Any Result is fine; an
// Errc::kInternal is a bug (no input may reach "internal error"), reported by aborting.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto parsed = hpctune::config::parse_config(text, "fuzz.yaml");
  if (!parsed.ok() && parsed.error().code() == hpctune::Errc::kInternal) {
    std::fprintf(stderr, "internal error: %s\n", parsed.error().message().c_str());
    std::abort();
  }
  if (parsed.ok()) {
    // What validate and the master do with a parsed config.
    (void)parsed->normalized.dump();
    (void)hpctune::config::model_startup(*parsed);
  }
  return 0;
}
