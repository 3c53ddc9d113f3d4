// Tests that check what a trainer logs: this process's stderr into a private temporary file while
// a body runs, then its text (also written to the real stderr, so it stays in the test's output).
#pragma once

#include <doctest/doctest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace hpctune::testing {

template <class Body>
std::string capture_stderr(Body body) {
  char path[] = "/tmp/hpctune-test-stderr-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  std::fflush(stderr);
  const int saved = dup(2);
  dup2(fd, 2);
  body();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  unlink(path);
  std::fputs(text.str().c_str(), stderr);
  return text.str();
}

}  // namespace hpctune::testing
