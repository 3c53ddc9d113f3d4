// The launch backends this build knows, by the name `resources.backend` takes. Declared once, here,
// header-only: the config's validation (config/settings.cpp, which links no launcher) and the
// registry (launch/registry.cpp, which maps each name to its launcher) both read this list, and
// test_group_launch checks that every name has a launcher.
#pragma once

namespace hpctune::launch {

inline constexpr const char* kBackendNames[] = {"local", "slurm"};

}  // namespace hpctune::launch
