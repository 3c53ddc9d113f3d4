// A live master (ZeroMQ, real worker processes) keeps serving good workers while garbage,
// oversized, deeply nested and out-of-order frames, impostors and floods arrive on its socket; it
// fails fast when every group dies; the launch credential is in no command line. Bound to a network
// address it uses CURVE by default: intruders without the campaign's keys get nothing through, and
// the key directory must be private (issue 13, acceptance 2).
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <regex>
#include <thread>
#include <unordered_set>

#include <zmq.hpp>

#include "config/config.h"
#include "scheduler/master.h"
#include "workflow/stages.h"
#include "protocol/curve_keys.h"
#include "protocol/messages.h"
#include "tests/campaign_fixture.h"

using namespace hpctune;
using namespace hpctune::launch;
using namespace hpctune::testing;

namespace {

// A master running a campaign on a thread of the test, its log captured and its endpoint known.
struct LiveMaster {
  LiveMaster(const std::string& config_text, TempDir& dir) {
    auto cfg = config::parse_config(config_text, dir.file("c.yaml"));
    REQUIRE_MESSAGE(cfg.ok(), (cfg.ok() ? "" : cfg.error().to_string()));
    options.db_path = dir.file("c.db");
    options.config = cfg.value();
    options.worker_program = HPCTUNE_BINARY;
    options.log = [this](const std::string& line) {
      std::smatch m;
      static const std::regex re("master at ((?:tcp|ipc)://[^ ,]+)");
      std::lock_guard lock(mu);
      lines.push_back(line);
      if (endpoint.empty() && std::regex_search(line, m, re)) endpoint = m[1];
    };
    thread = std::thread([this] {
      auto result = scheduler::run_master(options);
      std::lock_guard lock(mu);
      outcome.emplace(std::move(result));
    });
    REQUIRE(wait_until([&] { std::lock_guard lock(mu); return !endpoint.empty(); }, 10s));
  }
  ~LiveMaster() {
    if (thread.joinable()) thread.join();
  }
  // Waits for the campaign's end; its outcome, which must be a success.
  const scheduler::CampaignOutcome& finish() {
    thread.join();
    REQUIRE(outcome.has_value());
    REQUIRE_MESSAGE(outcome->ok(), (outcome->ok() ? "" : outcome->error().to_string()));
    return outcome->value();
  }
  bool running() {
    std::lock_guard lock(mu);
    return !outcome.has_value();
  }
  std::vector<std::string> log_lines() {
    std::lock_guard lock(mu);
    return lines;
  }
  int64_t log_lines_containing(const std::string& needle) {
    int64_t n = 0;
    for (const auto& l : log_lines()) n += l.find(needle) != std::string::npos;
    return n;
  }

  scheduler::MasterOptions options = [] {
    scheduler::MasterOptions o;
    o.make_stage = workflow::make_stage;
    return o;
  }();
  std::mutex mu;
  std::string endpoint;
  std::vector<std::string> lines;
  std::optional<Result<scheduler::CampaignOutcome>> outcome;
  std::thread thread;
};

// A DEALER socket of a process that was not launched by the master.
struct Rogue {
  explicit Rogue(const std::string& endpoint) : socket(ctx, zmq::socket_type::dealer) {
    socket.set(zmq::sockopt::linger, 0);
    socket.set(zmq::sockopt::sndtimeo, 2000);  // blocks while the master is slow, never past its end
    socket.connect(endpoint);
  }
  void send(const std::string& bytes) { (void)socket.send(zmq::buffer(bytes), zmq::send_flags::none); }
  void send(const protocol::Message& m) { send(protocol::encode(m)); }
  // Everything the master sent to this socket so far.
  std::vector<std::string> received() {
    std::vector<std::string> out;
    zmq::message_t msg;
    while (socket.recv(msg, zmq::recv_flags::dontwait)) out.push_back(msg.to_string());
    return out;
  }
  zmq::context_t ctx;
  zmq::socket_t socket;
};

int64_t event_rows(const std::string& db) { return static_cast<int64_t>(read_events(db).size()); }

}  // namespace

TEST_CASE("garbage, oversized and out-of-order frames do not stop a live master") {
  TempDir dir;
  auto cfg = config::parse_config(sleep_config("garbage", 20, 0.1, 1, 2), dir.file("c.yaml"));
  REQUIRE_MESSAGE(cfg.ok(), (cfg.ok() ? "" : cfg.error().to_string()));
  scheduler::MasterOptions options;
  options.make_stage = workflow::make_stage;
  options.db_path = dir.file("c.db");
  options.config = cfg.value();
  options.worker_program = HPCTUNE_BINARY;
  std::mutex mu;
  std::string endpoint;
  options.log = [&](const std::string& line) {
    std::smatch m;
    static const std::regex re("master at ((?:tcp|ipc)://[^ ,]+)");
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
  options.make_stage = workflow::make_stage;
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

TEST_CASE("a frame nested 200000 levels deep is dropped and the live master completes its campaign") {
  TempDir dir;
  LiveMaster master(sleep_config("deep", 12, 0.1, 1, 2), dir);
  Rogue rogue(master.endpoint);
  const std::string deep = std::string(200000, '\x91') + "\xc0";  // the probe that overflowed the stack
  rogue.send(deep);
  rogue.send("\x81\xa1t" + std::string(150000, '\x81') + "\xc0");
  const auto& o = master.finish();
  CHECK(o.progress.done == 12);
  CHECK(o.counters.malformed == 2);
  CHECK(master.log_lines_containing("nested deeper than") == 2);
  CHECK(rogue.received().empty());
  for (const auto& t : read_trials(master.options.db_path)) CHECK(t.state == store::TrialState::kDone);
  check_no_orphans(master.options.db_path);
}

TEST_CASE("an impostor naming group 0 gets no assign and forges no result while the campaign completes") {
  TempDir dir;
  LiveMaster master(sleep_config("impostor", 16, 0.15, 2, 3), dir);
  Rogue rogue(master.endpoint);
  // Hello naming a launched group (without, and with a made-up, credential), ready, hello again,
  // and forged results for every trial id, over and over while the campaign runs.
  int64_t rounds = 0;
  std::vector<std::string> received;
  while (master.running() && rounds < 2000) {
    protocol::Hello h;
    h.group = rounds % 3;
    h.incarnation = 42;
    h.pid = 1;
    h.host = "impostor";
    if (rounds % 2) h.secret = std::string(32, 'a') + "." + std::string(32, 'b');
    rogue.send(h);
    rogue.send(protocol::Ready{});
    for (int64_t id = 1; id <= 16; ++id) {
      rogue.send(protocol::Done{id, 1, 2, false, {{"value", 99.0}}, {{"log", "/etc/shadow", 1}}});
      rogue.send(protocol::Failed{id, 1, "forged", ""});
    }
    rogue.send(protocol::Heartbeat{1, 1});
    for (auto& m : rogue.received()) received.push_back(std::move(m));
    ++rounds;
    std::this_thread::sleep_for(10ms);
  }
  const auto& o = master.finish();
  for (auto& m : rogue.received()) received.push_back(std::move(m));
  CHECK(rounds > 5);
  CHECK(received.empty());  // no welcome, no assign: nothing at all
  CHECK(o.progress.done == 16);
  CHECK(o.progress.failed == 0);
  CHECK(o.counters.lost_attempts == 0);
  CHECK(o.counters.unauthenticated >= rounds / 2);  // the last rounds may arrive after the end
  auto s = store::Store::open_readonly(master.options.db_path);
  REQUIRE(s.ok());
  for (const auto& t : read_trials(master.options.db_path)) {
    CHECK(t.state == store::TrialState::kDone);
    CHECK(t.attempt == 1);
    CHECK(t.objective.value_or(99.0) < 1.0);  // the real sleep trainer's value, not the forged 99
    auto artifacts = (*s)->artifacts(t.id);
    REQUIRE(artifacts.ok());
    for (const auto& a : *artifacts) CHECK(a.path != "/etc/shadow");
  }
  for (const auto& e : read_events(master.options.db_path)) CHECK(e.kind != "late_result_ignored");
  CHECK(master.log_lines_containing("refused a hello") <= 3 * 3 + 3);  // rate-limited
  check_no_orphans(master.options.db_path);
}

TEST_CASE("100000 unregistered done frames write no event rows and a handful of log lines") {
  TempDir dir;
  LiveMaster master(sleep_config("flood", 10, 0.3, 1, 2), dir);
  Rogue rogue(master.endpoint);
  const std::string done = protocol::encode(protocol::Done{1, 1, 1, false, {{"value", 5.0}}, {}});
  for (int i = 0; i < 100000; ++i) rogue.send(done);
  const auto& o = master.finish();
  CHECK(o.progress.done == 10);
  CHECK(o.counters.unregistered >= 50000);  // most of the flood reached the master before the end
  const int64_t events = event_rows(master.options.db_path);
  CHECK(events < 50);
  const auto lines = master.log_lines();
  CHECK(lines.size() < 50);
  CHECK(master.log_lines_containing("never said hello") <= 3);
  CHECK(master.log_lines_containing("more frames dropped") >= 1);  // the summary with the count
  MESSAGE("flood: " << o.counters.unregistered << " frames counted, " << events << " event rows, " << lines.size()
                    << " log lines");
  check_no_orphans(master.options.db_path);
}

TEST_CASE("the launch credential and the CURVE keys are in no worker's command line and no trial program's environment") {
  TempDir dir;
  const std::string cfg = dir.write(
      "cmd.yaml",
      "name: cred\nseed: 3\nobjective: {metric: value, mode: max}\n"
      "search: {algorithm: random, max_trials: 4}\n"
      "space:\n  x: {type: float, low: 0.0, high: 1.0}\n"
      "trainer:\n  kind: command\n"
      "  command: 'env > {trial_dir}/env.txt; sleep 0.5; echo hpctune-report {{\\\"value\\\": 0.5}}'\n"
      "resources: {groups: 2, bind: \"tcp://0.0.0.0:*\"}\n");  // CURVE: the workers' keys travel the same way
  const std::string db = dir.file("cmd.db");
  ChildProcess run = start_hpctune({"run", cfg, "--db", db}, dir.file("run.log"));
  // Both groups run a trial (so both workers are past their start-up) before their /proc is read.
  auto env_files = [&] {
    int n = 0;
    std::error_code ec;
    for (const auto& e : std::filesystem::recursive_directory_iterator(db + ".trials", ec)) {
      n += e.path().filename() == "env.txt";
    }
    return n;
  };
  REQUIRE(wait_until([&] { return env_files() >= 2 && workers_of(db).size() == 2; }, 20s));
  const std::regex long_hex("[0-9a-f]{32}");
  int checked = 0;
  for (pid_t pid : workers_of(db)) {
    const std::string cmdline = read_file("/proc/" + std::to_string(pid) + "/cmdline");
    const std::string environ = read_file("/proc/" + std::to_string(pid) + "/environ");
    if (cmdline.empty() || environ.empty()) continue;  // it just exited
    ++checked;
    CHECK(cmdline.find("HPCTUNE_SECRET") == std::string::npos);
    CHECK_FALSE(std::regex_search(cmdline, long_hex));
    // It was handed over in the environment, and the worker wiped the value at start.
    const auto at = environ.find("HPCTUNE_SECRET=");
    REQUIRE(at != std::string::npos);
    CHECK(environ[at + std::strlen("HPCTUNE_SECRET=")] == '\0');
  }
  CHECK(checked >= 1);
  auto status = run.wait_for(60s);
  REQUIRE(status.has_value());
  REQUIRE_MESSAGE(status->success(), read_file(dir.file("run.log")));
  int envs = 0;
  for (const auto& t : read_trials(db)) {
    CHECK(t.state == store::TrialState::kDone);
    const std::string env = read_file(db + ".trials/" + std::to_string(t.id) + "/env.txt");
    if (env.empty()) continue;
    ++envs;
    CHECK(env.find("HPCTUNE_SECRET") == std::string::npos);  // the trial program did not inherit it
    CHECK(env.find("HPCTUNE_CURVE_") == std::string::npos);  // nor the CURVE keys
  }
  CHECK(envs == 4);
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
  // (The default start-up is at most a quarter of max_trials: a set n_startup beyond it.)
  const std::string never = config("never", "{algorithm: tpe, max_trials: 8, settings: {n_startup: 10}}");
  CHECK(run_hpctune({"validate", never}, dir.file("never.log"), 30s).code == 0);
  CHECK(read_file(dir.file("never.log")).find("hpctune validate: warning: tpe: 10 random start-up trials of 8; the "
                                              "model is never used (lower search.settings.n_startup or raise "
                                              "search.max_trials)") != std::string::npos);
  const std::string used = config("used", "{algorithm: bayesian, max_trials: 30}");
  CHECK(run_hpctune({"validate", used}, dir.file("used.log"), 30s).code == 0);
  CHECK(read_file(dir.file("used.log")).find("warning") == std::string::npos);
  // run: the searcher's notes say from which trial the model suggests (auto: what it runs, too).
  const std::string run = config("run", "{algorithm: tpe, max_trials: 3, settings: {n_startup: 2}}");
  CHECK(run_hpctune({"run", run}, dir.file("run.log"), 60s).code == 0);
  CHECK(read_file(dir.file("run.log")).find("search: startup: 2 trials of 3; model from trial 3") != std::string::npos);
  const std::string picked = config("picked", "{max_trials: 8}");
  CHECK(run_hpctune({"run", picked}, dir.file("picked.log"), 60s).code == 0);
  const std::string log = read_file(dir.file("picked.log"));
  CHECK(log.find("search: auto: runs bayesian for 1 searched parameter(s): 1 float, 0 ordinal, 0 categorical;") !=
        std::string::npos);
  CHECK(log.find("search: startup: 4 trials of 8; model from trial 5") != std::string::npos);
}

// --- CURVE on a network address (issue 13, "Authenticated workers", acceptance 2) -----------------

namespace {

// `config` with resources.bind and anything else put first in its resources map.
std::string with_resources(std::string config, const std::string& keys) {
  config.replace(config.find("resources: {"), 12, "resources: {" + keys + ", ");
  return config;
}

// A TCP connection to 127.0.0.1:`port` that sends `bytes` (maybe nothing) and stays open.
int raw_connection(int port, const std::string& bytes) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  if (!bytes.empty()) REQUIRE(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size()));
  return fd;
}

protocol::TransportOptions curve_client(const protocol::CurveKeyPair& own, const std::string& server_public_key) {
  protocol::TransportOptions o;
  o.security = protocol::TransportOptions::Security::kCurve;
  o.curve_client = {own.public_key, own.secret_key, server_public_key};
  return o;
}

mode_t mode_of(const std::string& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

}  // namespace

TEST_CASE("CURVE by default on 0.0.0.0: intruders get nothing to the scheduler while the campaign's workers complete it") {
  TempDir dir;
  LiveMaster master(with_resources(sleep_config("curve", 20, 0.2, 1, 2), "bind: \"tcp://0.0.0.0:*\""), dir);
  const std::string db = master.options.db_path;
  REQUIRE(master.endpoint.rfind("tcp://0.0.0.0:", 0) == 0);
  CHECK(master.log_lines_containing("transport: CURVE encryption, only the campaign's workers admitted (keys in " +
                                    db + ".keys)") == 1);
  const int port = std::stoi(master.endpoint.substr(master.endpoint.rfind(':') + 1));
  const std::string endpoint = "tcp://127.0.0.1:" + std::to_string(port);

  // The keys the master made: private, and readable here only because the test runs as their owner.
  CHECK(mode_of(db + ".keys") == 0700);
  CHECK(mode_of(db + ".keys/server.key") == 0600);
  CHECK(mode_of(db + ".keys/worker.key") == 0600);
  auto keys = protocol::load_or_create_keys(db + ".keys");
  REQUIRE(keys.ok());

  // Silent and half-greeting raw TCP connections, held for the whole campaign (CVE-2020-15166).
  const int silent = raw_connection(port, "");
  const int half = raw_connection(port, std::string("\xff\0\0\0\0\0\0\0\x01\x7f", 10));

  // A client with the campaign's worker keys gets through after them: its one frame, not msgpack,
  // is the only malformed frame the scheduler may count.
  auto keyed = protocol::connect_zmq(endpoint, curve_client(keys->worker, keys->server.public_key));
  REQUIRE(keyed.ok());
  REQUIRE((*keyed)->send("keyed but not msgpack").ok());

  // Intruders: no keys; a random key not in the allowlist; the workers' own key with a wrong server key.
  auto stranger_keys = protocol::curve_keypair();
  auto other_server = protocol::curve_keypair();
  REQUIRE((stranger_keys.ok() && other_server.ok()));
  std::vector<std::unique_ptr<protocol::ClientTransport>> intruders;
  for (auto options : {protocol::TransportOptions{}, curve_client(*stranger_keys, keys->server.public_key),
                       curve_client(keys->worker, other_server->public_key)}) {
    auto c = protocol::connect_zmq(endpoint, options);
    REQUIRE(c.ok());
    intruders.push_back(std::move(c).value());
  }
  int64_t rounds = 0, received = 0, workers_checked = 0;
  while (master.running() && rounds < 1000) {
    for (auto& intruder : intruders) {
      protocol::Hello h;
      h.group = rounds % 2;
      h.incarnation = 7;
      h.secret = std::string(32, 'a') + "." + std::string(32, 'b');
      for (const std::string& frame : {protocol::encode(h), protocol::encode(protocol::Done{1, 1, 1, false, {{"value", 99.0}}, {}}),
                                       std::string("intruder garbage")}) {
        auto sent = intruder->send(frame);
        CHECK((sent.ok() || sent.error().code() == Errc::kBusy));  // never more: no connection to queue on
      }
      auto reply = intruder->recv(0ms);
      REQUIRE(reply.ok());
      received += reply->has_value();
    }
    // The workers' keys are in their environment, wiped at start, and on no command line (checked
    // once both said hello, so each is past its start).
    if (workers_checked == 0 && master.log_lines_containing(" registered (pid ") >= 2) {
      for (pid_t pid : workers_of(db)) {
        const std::string cmdline = read_file("/proc/" + std::to_string(pid) + "/cmdline");
        const std::string environ = read_file("/proc/" + std::to_string(pid) + "/environ");
        if (cmdline.empty() || environ.empty()) continue;
        ++workers_checked;
        CHECK(cmdline.find(keys->worker.secret_key) == std::string::npos);
        CHECK(environ.find(keys->worker.secret_key) == std::string::npos);
        const auto at = environ.find(std::string(protocol::kCurveSecretKeyEnv) + "=");
        REQUIRE(at != std::string::npos);
        CHECK(environ[at + std::strlen(protocol::kCurveSecretKeyEnv) + 1] == '\0');
      }
    }
    ++rounds;
    std::this_thread::sleep_for(10ms);
  }
  const auto& o = master.finish();
  ::close(silent);
  ::close(half);
  CHECK(rounds > 5);
  CHECK(workers_checked >= 1);
  CHECK(received == 0);
  CHECK(o.progress.done == 20);
  CHECK(o.progress.failed == 0);
  CHECK(o.counters.lost_attempts == 0);
  // Nothing from the intruders reached the scheduler: their hellos, results and garbage are not
  // counted anywhere; the keyed client's frame is (so the counters do see what gets through).
  CHECK(o.counters.malformed == 1);
  CHECK(o.counters.unauthenticated == 0);
  CHECK(o.counters.unregistered == 0);
  CHECK(o.counters.out_of_order == 0);
  CHECK(o.counters.stale_results == 0);
  CHECK(o.counters.identity_refused == 0);
  for (const auto& t : read_trials(db)) {
    CHECK(t.state == store::TrialState::kDone);
    CHECK(t.attempt == 1);
    CHECK(t.objective.value_or(99.0) < 1.0);
  }
  // The secret keys are in no file but their own (the store, the logs) and in no log line.
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir.path)) {
    if (!e.is_regular_file() || e.path().parent_path() == db + ".keys") continue;
    const std::string bytes = read_file(e.path().string());
    CHECK_MESSAGE(bytes.find(keys->worker.secret_key) == std::string::npos, e.path());
    CHECK_MESSAGE(bytes.find(keys->server.secret_key) == std::string::npos, e.path());
  }
  for (const auto& line : master.log_lines()) {
    CHECK(line.find(keys->worker.secret_key) == std::string::npos);
    CHECK(line.find(keys->server.secret_key) == std::string::npos);
  }
  check_no_orphans(db);
}

TEST_CASE("CURVE keys at the CLI: a loose key directory or key file is refused (exit 1, nothing recorded), keys are reused on resume") {
  TempDir dir;
  const std::string cfg = dir.write("c.yaml", sleep_config("keys", 2, 0.01, 1, 2));
  const std::string db = dir.file("c.db");
  const std::string keys_dir = db + ".keys";
  REQUIRE(::mkdir(keys_dir.c_str(), 0700) == 0);
  REQUIRE(::chmod(keys_dir.c_str(), 0755) == 0);
  auto status = run_hpctune({"run", cfg, "--db", db, "--bind", "tcp://0.0.0.0:*"}, dir.file("loose.log"), 60s);
  std::string out = read_file(dir.file("loose.log"));
  CHECK_MESSAGE(status.code == 1, out);
  CHECK_MESSAGE(out.find("hpctune run: error: the CURVE key directory " + keys_dir + " has mode 0755") != std::string::npos, out);
  CHECK(out.find("fix: chmod 700 " + keys_dir) != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(db));  // refused before the store was created
  CHECK(std::filesystem::is_empty(keys_dir));

  REQUIRE(::chmod(keys_dir.c_str(), 0700) == 0);
  status = run_hpctune({"run", cfg, "--db", db, "--bind", "tcp://0.0.0.0:*"}, dir.file("run.log"), 60s);
  out = read_file(dir.file("run.log"));
  REQUIRE_MESSAGE(status.code == 0, out);
  CHECK(out.find("transport: CURVE encryption") != std::string::npos);
  CHECK(out.find("warning") == std::string::npos);  // CURVE protects it: no network-bind warning
  const std::string worker_key = read_file(keys_dir + "/worker.key");
  const std::string server_key = read_file(keys_dir + "/server.key");
  CHECK(worker_key.size() == 41);

  // A loose key file: the resume is refused, and what was recorded stays as it was.
  REQUIRE(::chmod((keys_dir + "/worker.key").c_str(), 0640) == 0);
  status = run_hpctune({"resume", db, "--max-trials", "4", "--bind", "tcp://0.0.0.0:*"}, dir.file("loose2.log"), 60s);
  out = read_file(dir.file("loose2.log"));
  CHECK_MESSAGE(status.code == 1, out);
  CHECK_MESSAGE(out.find("the CURVE key file " + keys_dir + "/worker.key has mode 0640") != std::string::npos, out);
  CHECK(out.find("fix: chmod 600 " + keys_dir + "/worker.key") != std::string::npos);
  CHECK(read_trials(db).size() == 2);
  {
    auto s = store::Store::open_readonly(db);
    REQUIRE(s.ok());
    auto c = (*s)->load_campaign();
    REQUIRE((c.ok() && *c));
    CHECK((*c)->state == "completed");
  }

  // Fixed: the resume runs with the same keys.
  REQUIRE(::chmod((keys_dir + "/worker.key").c_str(), 0600) == 0);
  status = run_hpctune({"resume", db, "--max-trials", "4", "--bind", "tcp://0.0.0.0:*"}, dir.file("resume.log"), 60s);
  out = read_file(dir.file("resume.log"));
  REQUIRE_MESSAGE(status.code == 0, out);
  CHECK(out.find("transport: CURVE encryption") != std::string::npos);
  CHECK(read_file(keys_dir + "/worker.key") == worker_key);
  CHECK(read_file(keys_dir + "/server.key") == server_key);
  CHECK(read_trials(db).size() == 4);
  for (const auto& t : read_trials(db)) CHECK(t.state == store::TrialState::kDone);
}

TEST_CASE("resources.security: none on a network address is warned about and makes no keys; curve on loopback uses them") {
  TempDir dir;
  const std::string none = dir.write("none.yaml", with_resources(sleep_config("none", 2, 0.01, 1, 2),
                                                                 "bind: \"tcp://*:*\", security: none"));
  auto status = run_hpctune({"run", none, "--db", dir.file("none.db")}, dir.file("none.log"), 60s);
  std::string out = read_file(dir.file("none.log"));
  REQUIRE_MESSAGE(status.code == 0, out);
  CHECK(out.find("hpctune run: warning: the master listens on tcp://*:*, reachable from other machines, with "
                 "resources.security none") != std::string::npos);
  CHECK(out.find("transport: CURVE") == std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir.file("none.db.keys")));
  CHECK(run_hpctune({"validate", none}, dir.file("vnone.log"), 30s).code == 0);
  CHECK(read_file(dir.file("vnone.log")).find("hpctune validate: warning: the master listens on tcp://*:*") != std::string::npos);

  const std::string curve = dir.write("curve.yaml", with_resources(sleep_config("curve", 2, 0.01, 1, 2), "security: curve"));
  status = run_hpctune({"run", curve, "--db", dir.file("curve.db")}, dir.file("curve.log"), 60s);
  out = read_file(dir.file("curve.log"));
  REQUIRE_MESSAGE(status.code == 0, out);
  CHECK(out.find("transport: CURVE encryption") != std::string::npos);
  CHECK(out.find("master at ipc:///") != std::string::npos);  // the default bind, with CURVE as asked
  CHECK(std::filesystem::exists(dir.file("curve.db.keys/worker.key")));
  for (const auto& t : read_trials(dir.file("curve.db"))) CHECK(t.state == store::TrialState::kDone);

  // The default (the private ipc socket): no CURVE, no keys, no warning.
  const std::string plain = dir.write("plain.yaml", sleep_config("plain", 1, 0.01, 1, 1));
  status = run_hpctune({"run", plain, "--db", dir.file("plain.db")}, dir.file("plain.log"), 60s);
  out = read_file(dir.file("plain.log"));
  REQUIRE_MESSAGE(status.code == 0, out);
  CHECK(out.find("transport: CURVE") == std::string::npos);
  CHECK(out.find("warning") == std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir.file("plain.db.keys")));
}

TEST_CASE("a worker given only some of its CURVE keys says which are missing (exit 2)") {
  TempDir dir;
  auto server = protocol::curve_keypair();
  REQUIRE(server.ok());
  launch::SpawnOptions o;
  o.argv = {HPCTUNE_BINARY, "worker", "--master", "tcp://127.0.0.1:1", "--group", "0"};
  o.env[protocol::kCurveServerKeyEnv] = server->public_key;
  o.stdout_path = dir.file("w.log");
  o.stderr_path = "=stdout";
  auto child = launch::ChildProcess::spawn(o);
  REQUIRE(child.ok());
  auto status = child->wait_for(30s);
  REQUIRE(status.has_value());
  const std::string out = read_file(dir.file("w.log"));
  CHECK_MESSAGE(status->code == 2, out);
  CHECK_MESSAGE(out.find("the worker's CURVE keys are set only in part: HPCTUNE_CURVE_PUBLIC_KEY, "
                         "HPCTUNE_CURVE_SECRET_KEY missing from the environment") != std::string::npos, out);
}
