// The live progress line that `hpctune run` redraws on a terminal (and logs elsewhere).
#pragma once

#include <string>

#include "scheduler/scheduler.h"

namespace hpctune::report {

// "[12/16] ██████░░ done 10 · running 2 · queued 0 · best 0.8712 (#7) · 0:42 · ETA 0:08", at most
// `width` columns (0: no limit): the least important fields are left out first (the bar, the
// queue, ...), then the line is cut. A line wider than the terminal would wrap, and every redraw
// would leave a copy behind.
std::string progress_line(const scheduler::Progress& p, double elapsed_s, int width);

}  // namespace hpctune::report
