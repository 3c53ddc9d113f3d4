// Algorithm settings: one declaration per key (name, type, default, bounds, help), from which the
// searchers and stoppers read their SearchSpec::settings / StopperSpec::settings.
//
// Each algorithm owns its table (random_search.cpp, genetic.cpp, ...); the factory exposes them
// through searcher_settings() / stopper_settings() so that the config layer, `hpctune validate`
// and configs/reference.yaml can be generated from the same list the algorithm reads. The
// declaration type and its check are common/settings.h, shared with the trainer kinds' settings.
#pragma once

#include "common/settings.h"

namespace hpctune::search {

using hpctune::resolve_settings;
using hpctune::SettingDecl;
using hpctune::SettingType;
using hpctune::setting_type_name;

}  // namespace hpctune::search
