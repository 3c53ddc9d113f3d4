// Where a campaign's group time went (`hpctune status`'s "Group time", its JSON's `compute`): the
// seconds its trials' attempts ran, by attempt state, against its groups x its span, the rest idle;
// and the training steps its trials consumed against search.max_steps. A campaign that spends
// its groups well shows little idle time and few seconds in failed or lost attempts.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "store/store.h"

namespace hpctune::report {

struct GroupTime {
  int64_t groups = 0;      // the config's resources.groups; 0 when it names none
  double span_s = 0;       // the campaign's creation to `until`
  bool resumed = false;    // the campaign was resumed: the span holds the time between its runs
  std::map<std::string, store::AttemptTime> by_state;  // attempt state -> attempts, seconds
  int64_t steps = 0;                                   // each trial's highest reported step, summed
  std::optional<int64_t> max_steps;                    // search.max_steps, when set

  double group_s() const { return static_cast<double>(groups) * span_s; }
  double busy_s() const;  // every attempt's seconds (packed trials' overlap: it may pass group_s)
  double idle_s() const;  // group_s - busy_s, at least 0
};

// Where the campaign's span ends, seen at `now`: its end, else its master's last heartbeat (which a
// live master writes every few seconds, and a master that is gone wrote last), else now.
double group_time_until(const store::CampaignRow& campaign, double now);

// Reads them from `db` for `campaign`, its attempts until `until` (group_time_until); `steps` is
// the sum of its trials' highest reported steps (TrialRow::step), which the caller has read.
Result<GroupTime> group_time(store::Store& db, const store::CampaignRow& campaign, int64_t steps, double until);

// {groups, span_s, group_seconds, busy_seconds, idle_seconds, resumed, attempts: {STATE: {attempts,
// seconds}}, steps, max_steps (null when unset)}.
nlohmann::json group_time_json(const GroupTime& g);

// "Group time: 2 groups x 1:05 = 2:10" and a table of where it went (trained, failed, lost or
// interrupted, idle: time, share, attempts), then the steps against max_steps when set. "" without
// groups or span.
std::string group_time_text(const GroupTime& g);

}  // namespace hpctune::report
