#include "cli/console.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>

#include "report/format.h"
#include "report/progress.h"

namespace hpctune::cli {

namespace {

bool stderr_is_tty() { return isatty(STDERR_FILENO) == 1; }

int terminal_width() {
  winsize ws{};
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 120;
}

}  // namespace

std::string timestamp() {
  std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%H:%M:%S", std::localtime(&now));
  return buf;
}

Console::Console() : tty_(stderr_is_tty()) {}

void Console::log(const std::string& line) {
  clear();
  // A line may carry a trainer's error or stderr: no terminal control of it reaches the screen.
  std::fprintf(stderr, "%s  %s\n", timestamp().c_str(), report::terminal_safe(line).c_str());
  redraw();
}

void Console::progress(const hpctune::Progress& p, double elapsed_s, double every_s) {
  if (tty_) {
    // One column short of the width: a line that fills the last column wraps on some terminals.
    last_ = report::progress_line(p, elapsed_s, std::max(terminal_width() - 1, 1));
    std::fprintf(stderr, "\r\033[2K%s", last_.c_str());
    std::fflush(stderr);
    return;
  }
  const int64_t finished = p.done + p.pruned + p.failed;
  if (finished == last_finished_) return;
  if (every_s > 0 && elapsed_s - std::max(last_logged_s_, 0.0) < every_s) return;  // none in the first every_s
  last_finished_ = finished;
  last_logged_s_ = elapsed_s;
  std::fprintf(stderr, "%s  %s\n", timestamp().c_str(), report::progress_line(p, elapsed_s, 0).c_str());
}

void Console::finish() {
  if (tty_ && !last_.empty()) std::fprintf(stderr, "\n");
  last_.clear();
}

void Console::clear() {
  if (tty_ && !last_.empty()) std::fprintf(stderr, "\r\033[2K");
}

void Console::redraw() {
  if (tty_ && !last_.empty()) std::fprintf(stderr, "%s", last_.c_str());
  std::fflush(stderr);
}

}  // namespace hpctune::cli
