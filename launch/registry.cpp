// The launcher registry (launcher.h: make_launcher): each backend's name and builder in one table.
#include <iterator>

#include "launch/backends.h"
#include "launch/launcher.h"
#include "launch/slurm_launcher.h"

namespace hpctune::launch {
namespace {

struct Backend {
  const char* name;
  Result<std::unique_ptr<Launcher>> (*make)(LocalLauncherOptions);
};

Result<std::unique_ptr<Launcher>> make_local(LocalLauncherOptions options) { return make_local_launcher(std::move(options)); }

constexpr Backend kBackends[] = {
    {"local", make_local},
    {"slurm", make_slurm_launcher},
};
static_assert(std::size(kBackends) == std::size(kBackendNames), "every backend name has a launcher (backends.h)");

}  // namespace

const char* to_string(GroupState state) noexcept {
  switch (state) {
    case GroupState::kPending: return "pending";
    case GroupState::kStarting: return "starting";
    case GroupState::kRunning: return "running";
    case GroupState::kExited: return "exited";
  }
  return "?";
}

std::vector<std::string> launcher_names() {
  std::vector<std::string> out;
  for (const Backend& b : kBackends) out.push_back(b.name);
  return out;
}

Result<std::unique_ptr<Launcher>> make_launcher(const std::string& backend, LocalLauncherOptions options) {
  std::string known;
  for (const Backend& b : kBackends) {
    if (backend == b.name) return b.make(std::move(options));
    known += (known.empty() ? "" : ", ") + std::string(b.name);
  }
  return err(Errc::kConfig, "resources.backend: unknown launch backend '" + backend + "' (known: " + known + ")");
}

Status check_backend(const std::string& backend) {
  if (backend == "slurm") {
    if (auto job = slurm_allocation({}); !job.ok()) return std::move(job).error();
  }
  return {};
}

std::string backend_default_bind(const std::string& backend, const std::string& bind) {
  return backend == "slurm" ? slurm_default_bind() : bind;
}

}  // namespace hpctune::launch
