// Campaign preparation: what `hpctune run`, `resume` and `simulate` do before their Master starts,
// one function for the three (they differ only in their clock, transport and launcher: run_master
// in scheduler/master.h, simulate_campaign in simulate/simulator.h).
//
// prepare_campaign(), in order, stopping at the first refusal:
//   1. `resume` of a database that does not exist: kNotFound.
//   2. A new campaign: the driver's preflight (its transport and backend, on the config), then its
//      warm-start store (search.warm_start: read, its trials projected onto this campaign's space),
//      all before any file is created.
//   3. Opens the store (master lock; a new campaign's file with the modes of storage_access).
//   4. Resolves the campaign against it: a new campaign in an empty store, a resume of an unfinished
//      one (or one extended by --max-trials); the effective config (a resumed one read back, with
//      its seed, groups and budget; --seed and --groups applied).
//   5. A resumed campaign: the driver's preflight on the config read back, before anything is written.
//   6. Records the (re)start: the campaign row or its state, the events, a new budget; a resumed
//      campaign reads its warm-start store again.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/result.h"
#include "config/config.h"
#include "scheduler/scheduler.h"
#include "store/store.h"

namespace hpctune::scheduler {

struct MasterOptions;  // scheduler/master.h

// A campaign resolved against its store, ready for a Master: the effective config (a resumed one
// read back from the store, with its seed, groups and budget), its id, and whether it resumes.
struct PreparedCampaign {
  config::CampaignConfig cfg;
  int64_t campaign_id = 0;
  bool resuming = false;
  std::optional<WarmStart> warm;
  std::string db_path;
  std::string run_dir;  // "<db>.trials" (make_trial_directories); "" = trials keep no files
};

// A prepared campaign and its open store (the Master's MasterParts::store).
struct CampaignInStore {
  std::unique_ptr<store::Store> store;
  PreparedCampaign campaign;
};

// The driver's own checks of a campaign's config before anything is recorded (run_master: the
// campaign's key directory, CURVE in libzmq, the backend's allocation); none for the simulator.
using CampaignPreflight = std::function<Status(const config::CampaignConfig&)>;

// The store's path: --db, else the config's storage.
std::string campaign_db_path(const MasterOptions& options);

// Steps 1-6 above, the campaign's (re)start recorded at `t` (unix seconds on the driver's clock).
Result<CampaignInStore> prepare_campaign(const MasterOptions& options, double t, const CampaignPreflight& preflight);

// Steps 4 and 6 alone, in a store the caller opened (tests, bench/scale): no preflight, and a new
// campaign's warm start is not read.
Result<PreparedCampaign> prepare_campaign_in(const MasterOptions& options, store::Store& db, const std::string& db_path,
                                             double t);

// Creates the campaign's trial directory "<db>.trials" and its "logs" (the modes of storage_access:
// 0700 by default) and sets campaign.run_dir to its absolute path.
Status make_trial_directories(PreparedCampaign& campaign);

// The store's row for a new campaign of this config, running from `created_at` (seconds since the
// epoch): the config's text and its normalized JSON with the effective seed and group count.
store::CampaignRow campaign_row(const config::CampaignConfig& cfg, double created_at);

}  // namespace hpctune::scheduler
