// A live master (ZeroMQ, real worker processes) keeps serving good workers while garbage,
// oversized and out-of-order frames arrive on its socket; it fails fast when every group dies.
#include <doctest/doctest.h>

#include <mutex>
#include <regex>
#include <thread>

#include <zmq.hpp>

#include "scheduler/config.h"
#include "scheduler/master.h"
#include "scheduler/protocol.h"
#include "tests/campaign_fixture.h"

using namespace hpctune;
using namespace hpctune::testing;

TEST_CASE("garbage, oversized and out-of-order frames do not stop a live master") {
  TempDir dir;
  auto cfg = config::parse_config(sleep_config("garbage", 20, 0.1, 1, 2), dir.file("c.yaml"));
  REQUIRE_MESSAGE(cfg.ok(), (cfg.ok() ? "" : cfg.error().to_string()));
  scheduler::MasterOptions options;
  options.db_path = dir.file("c.db");
  options.config = cfg.value();
  options.worker_program = HPCTUNE_BINARY;
  std::mutex mu;
  std::string endpoint;
  options.log = [&](const std::string& line) {
    std::smatch m;
    static const std::regex re("master at (tcp://[0-9.:]+)");
    std::lock_guard lock(mu);
    if (endpoint.empty() && std::regex_search(line, m, re)) endpoint = m[1];
  };
  std::optional<Result<scheduler::CampaignOutcome>> outcome;
  std::thread master([&] { outcome.emplace(scheduler::run_master(options)); });

  REQUIRE(wait_until([&] { std::lock_guard lock(mu); return !endpoint.empty(); }, 10s));
  zmq::context_t ctx;
  zmq::socket_t rogue(ctx, zmq::socket_type::dealer);
  rogue.set(zmq::sockopt::linger, 0);
  {
    std::lock_guard lock(mu);
    rogue.connect(endpoint);
  }
  auto send = [&](const std::string& bytes) { rogue.send(zmq::buffer(bytes), zmq::send_flags::dontwait); };
  send("this is not msgpack");                                             // malformed
  send(std::string("\x81\xa1t\xa8teleport", 11));                          // {"t":"teleport"}: unknown type
  send(protocol::encode(protocol::Report{1, 1, 1, {{"value", 1.0}}}));    // never said hello
  send(protocol::encode(protocol::Done{1, 1, 1, false, {{"value", 9.0}}, {}}));  // a result it has no right to
  std::string big(static_cast<size_t>(protocol::kMaxMessageBytes) + 10, 'x');
  send(big);                                                                // oversized: dropped by ZeroMQ
  zmq::socket_t multi(ctx, zmq::socket_type::dealer);
  multi.set(zmq::sockopt::linger, 0);
  multi.connect(endpoint);
  multi.send(zmq::str_buffer("a"), zmq::send_flags::sndmore);
  multi.send(zmq::str_buffer("b"), zmq::send_flags::none);                  // a frame shape the protocol does not use

  master.join();
  REQUIRE(outcome.has_value());
  REQUIRE_MESSAGE(outcome->ok(), (outcome->ok() ? "" : outcome->error().to_string()));
  const auto& o = outcome->value();
  CHECK(o.progress.done == 20);
  CHECK(o.counters.malformed >= 3);  // garbage, unknown type, multipart
  CHECK(o.counters.unregistered + o.counters.stale_results >= 2);
  for (const auto& t : read_trials(options.db_path)) CHECK(t.state == store::TrialState::kDone);
  check_no_orphans(options.db_path);
}

TEST_CASE("the master fails fast when every group dies at start-up") {
  TempDir dir;
  auto cfg = config::parse_config(sleep_config("dead-groups", 4, 0.0, 1, 3), dir.file("c.yaml"));
  REQUIRE(cfg.ok());
  scheduler::MasterOptions options;
  options.db_path = dir.file("c.db");
  options.config = cfg.value();
  options.worker_program = "/bin/false";
  const auto start = std::chrono::steady_clock::now();
  auto outcome = scheduler::run_master(options);
  REQUIRE_FALSE(outcome.ok());
  CHECK(outcome.error().code() == Errc::kFailed);
  CHECK(outcome.error().message().find("exited at start-up") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - start < 10s);
  auto trials = read_trials(options.db_path);  // nothing recorded is lost: the campaign row is there
  auto s = store::Store::open_readonly(options.db_path);
  REQUIRE(s.ok());
  auto c = (*s)->load_campaign();
  REQUIRE((c.ok() && *c));
  CHECK((*c)->state == "failed");
}

TEST_CASE("the CLI maps errors to exit codes") {
  TempDir dir;
  const std::string bad = dir.write("bad.yaml", "name: x\nsearch: {algorithm: random, max_trails: 3}\n");
  auto status = run_hpctune({"validate", bad}, dir.file("v.log"), 30s);
  CHECK(status.code == 2);
  const std::string out = read_file(dir.file("v.log"));
  CHECK(out.find("bad.yaml:2:") != std::string::npos);
  CHECK(out.find("max_trials") != std::string::npos);  // "did you mean"

  CHECK(run_hpctune({"run"}, dir.file("u.log"), 30s).code == 2);
  CHECK(run_hpctune({"status", dir.file("missing.db")}, dir.file("s.log"), 30s).code == 2);
  CHECK(run_hpctune({"trials", dir.file("missing.db"), "--format", "xml"}, dir.file("t.log"), 30s).code == 2);
  CHECK(run_hpctune({"--version"}, dir.file("ver.log"), 30s).code == 0);
  CHECK(read_file(dir.file("ver.log")).find("hpctune ") == 0);
}

TEST_CASE("validate: a directory, a device and an alias bomb are config errors, exit 2 (issue 9, items 14, 18)") {
  TempDir dir;
  CHECK(run_hpctune({"validate", dir.path}, dir.file("dir.log"), 30s).code == 2);
  CHECK(run_hpctune({"validate", "/dev/zero"}, dir.file("zero.log"), 30s).code == 2);
  CHECK(read_file(dir.file("zero.log")).find("not a regular file") != std::string::npos);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string bomb = std::string(HPCTUNE_SOURCE_DIR) + "/tests/configs/bad/alias_bomb.yaml";
  CHECK(run_hpctune({"validate", bomb}, dir.file("bomb.log"), 30s).code == 2);
  CHECK(read_file(dir.file("bomb.log")).find("alias_bomb.yaml:10:10: a5[0]: the config has more than 100000 YAML nodes") !=
        std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);  // it took 2.8 GB before it failed
}

TEST_CASE("tpe and bayesian say how many trials are random start-up (issue 9, item 24)") {
  TempDir dir;
  auto config = [&](const std::string& name, const std::string& search) {
    return dir.write(name + ".yaml", "name: " + name + "\nstorage: " + dir.file(name + ".db") +
                                         "\nobjective: {metric: value}\nsearch: " + search +
                                         "\nspace:\n  value: {type: float, low: 0, high: 1}\ntrainer: {kind: sleep}\n");
  };
  // validate: valid (exit 0), with a warning on stderr when the model would never be used.
  const std::string never = config("never", "{algorithm: tpe, max_trials: 8}");
  CHECK(run_hpctune({"validate", never}, dir.file("never.log"), 30s).code == 0);
  CHECK(read_file(dir.file("never.log")).find("hpctune validate: warning: tpe: 10 random start-up trials of 8; the "
                                              "model is never used (lower search.settings.n_startup or raise "
                                              "search.max_trials)") != std::string::npos);
  const std::string used = config("used", "{algorithm: bayesian, max_trials: 30}");
  CHECK(run_hpctune({"validate", used}, dir.file("used.log"), 30s).code == 0);
  CHECK(read_file(dir.file("used.log")).find("warning") == std::string::npos);
  // run: the master's log says from which trial the model suggests.
  const std::string run = config("run", "{algorithm: tpe, max_trials: 3, settings: {n_startup: 2}}");
  CHECK(run_hpctune({"run", run}, dir.file("run.log"), 60s).code == 0);
  CHECK(read_file(dir.file("run.log")).find("tpe: the first 2 of 3 trials are random start-up; the model suggests "
                                            "from trial 3 on") != std::string::npos);
}
