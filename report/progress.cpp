// The live progress line (progress.h).
#include "report/progress.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "report/campaign.h"
#include "report/format.h"
#include "report/ranking.h"

namespace hpctune::report {

std::string progress_line(const Progress& p, double elapsed_s, int width) {
  const int64_t finished = p.done + p.pruned + p.failed;
  const int64_t total = std::max<int64_t>(p.max_trials, 1);
  // Each field with its importance: when the line is too wide, the least important goes first
  // (the bar, then the queue, the pruned count, the elapsed time...), and what still does not
  // fit is cut at the width.
  struct Field {
    std::string text;
    int importance;  // higher stays longer
  };
  std::vector<Field> fields;
  char count[64];
  std::snprintf(count, sizeof(count), "[%*lld/%lld]", static_cast<int>(std::to_string(total).size()),
                static_cast<long long>(finished), static_cast<long long>(total));
  fields.push_back({count, 100});
  const int bar_width = width > 0 ? std::clamp(width - 100, 10, 30) : 30;
  const int filled = static_cast<int>(bar_width * std::min<double>(1.0, static_cast<double>(finished) / total));
  std::string bar;
  for (int i = 0; i < bar_width; ++i) bar += i < filled ? "█" : "░";
  fields.push_back({bar, 10});
  fields.push_back({"done " + std::to_string(p.done), 90});
  if (p.pruned) fields.push_back({"pruned " + std::to_string(p.pruned), 40});
  if (p.failed) fields.push_back({"failed " + std::to_string(p.failed), 80});
  fields.push_back({"running " + std::to_string(p.running), 70});
  fields.push_back({"queued " + std::to_string(p.queued), 20});
  if (p.best) fields.push_back({"best " + format_number(*p.best) + " (#" + std::to_string(p.best_trial) + ")", 60});
  fields.push_back({format_duration(elapsed_s), 30});
  if (finished > 0 && finished < total) {
    fields.push_back(
        {"ETA " + format_duration(elapsed_s / static_cast<double>(finished) * static_cast<double>(total - finished)), 50});
  }
  auto compose = [&] {
    std::string out;
    for (size_t i = 0; i < fields.size(); ++i) {
      // The bar and the count are set apart by a space, the others by " · ".
      if (i > 0) out += (i == 1 || fields[i - 1].importance == 10) ? " " : " · ";
      out += fields[i].text;
    }
    return out;
  };
  std::string line = compose();
  if (width <= 0) return line;  // not a terminal: no limit
  while (display_width(line) > static_cast<size_t>(width) && fields.size() > 1) {
    auto least = std::min_element(fields.begin(), fields.end(),
                                  [](const Field& a, const Field& b) { return a.importance < b.importance; });
    fields.erase(least);
    line = compose();
  }
  return truncate_display(line, static_cast<size_t>(width));
}

Progress progress_of(const CampaignView& v) {
  using store::TrialState;
  Progress p;
  for (const auto& t : v.trials) {
    const TrialState s = t.state;
    if (s == TrialState::kDone) ++p.done;
    else if (s == TrialState::kPruned) ++p.pruned;
    else if (s == TrialState::kFailed) ++p.failed;
    else if (s == TrialState::kRunning || s == TrialState::kAssigned) ++p.running;
    else if (s == TrialState::kInterrupted) ++p.interrupted;
    else ++p.queued;
  }
  p.created = static_cast<int64_t>(v.trials.size());
  const auto& cj = v.campaign.config_json;
  if (cj.is_object() && cj.contains("search") && cj["search"].is_object() && cj["search"].contains("max_trials") &&
      cj["search"]["max_trials"].is_number_integer()) {
    p.max_trials = cj["search"]["max_trials"].get<int64_t>();
  }
  if (auto best = best_trial(v.main_trials, v.objectives.maximize)) {
    p.best = best->objective;
    p.best_trial = best->id;
  }
  return p;
}

}  // namespace hpctune::report
