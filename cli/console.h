// What a long command shows on standard error while it works: a live progress line on a terminal
// (redrawn in place, cut to the terminal's width), plain time-stamped lines elsewhere (a log file, a
// batch job's output), so that a log shows the work moving without a line per redraw.
#pragma once

#include <cstdint>
#include <string>

#include "common/progress.h"

namespace hpctune::cli {

// "HH:MM:SS", local time: the prefix of every line the CLI logs.
std::string timestamp();

class Console {
 public:
  Console();

  // One log line (control bytes escaped), with the progress line drawn again under it.
  void log(const std::string& line);
  // The progress line of a campaign: on a terminal, redrawn in place; elsewhere a line each time the
  // finished trials change, or, with `every_s` > 0, at most one every `every_s` seconds of `elapsed_s`
  // (the first once `every_s` have passed: a short run prints none).
  void progress(const hpctune::Progress& p, double elapsed_s, double every_s = 0);
  // Ends the progress line (a newline on a terminal).
  void finish();
  // True when standard error is a terminal (the progress line is redrawn in place).
  bool on_terminal() const { return tty_; }

 private:
  void clear();
  void redraw();
  bool tty_;
  std::string last_;
  int64_t last_finished_ = -1;
  double last_logged_s_ = -1;
};

}  // namespace hpctune::cli
