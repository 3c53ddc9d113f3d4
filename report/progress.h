// The live progress line that `hpctune run` redraws on a terminal (and logs elsewhere), and the
// same progress read from a campaign's store (for a reader without a master to ask).
#pragma once

#include <string>

#include "common/progress.h"

namespace hpctune::report {

struct CampaignView;

// "[12/16] ██████░░ done 10 · running 2 · queued 0 · best 0.8712 (#7) · 0:42 · ETA 0:08", at most
// `width` columns (0: no limit): the least important fields are left out first (the bar, the
// queue, ...), then the line is cut. A line wider than the terminal would wrap, and every redraw
// would leave a copy behind.
std::string progress_line(const Progress& p, double elapsed_s, int width);

// The progress the view's campaign recorded: its trials by state (assigned counts as running,
// any state not listed in Progress as queued), the budget (search.max_trials of the stored
// config, as a resume may have extended it), and the best trial. `workers` is 0: the store does
// not know which groups are connected.
Progress progress_of(const CampaignView& view);

}  // namespace hpctune::report
