// End to end through the hpctune binary: the files a campaign creates and the output its reading
// commands write. Modes of the database and trial directories (storage_access), status/trials/
// export on a full disk and on a read-only copy, export -o written whole or not at all, and CSV at
// full precision.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <grp.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <functional>
#include <tuple>

#include "tests/campaign_fixture.h"

using namespace hpctune;
using namespace hpctune::launch;
using namespace hpctune::testing;
namespace fs = std::filesystem;

namespace {

// A three-trial campaign of the sleep trainer whose metric is its parameter: one value, the same
// for every trial, with more digits than any table shows.
constexpr const char* kPrecise = "0.123456789012";

std::string config(const std::string& access_line, const std::string& more_values = "") {
  return "name: files\nseed: 3\n" + access_line +
         // noisy: the one-point space runs 3 times (a search never repeats a configuration otherwise)
         "objective: {metric: value, mode: max, noisy: true}\n"
         "search: {algorithm: random, max_trials: 3}\n"
         "space:\n  value: {type: choice, values: [" + std::string(kPrecise) + more_values + "]}\n"
         "trainer: {kind: sleep, seconds: 0.01, steps: 1, metric: value}\n"
         "resources: {groups: 1}\n";
}

unsigned mode_of(const std::string& path) {
  struct stat st {};
  REQUIRE_MESSAGE(::stat(path.c_str(), &st) == 0, path);
  return st.st_mode & 07777;
}

// Runs `hpctune args...` with `setup` applied in the child just before exec (limits, descriptors,
// user); stdout to `out`, stderr to `errlog`.
ExitStatus run_with(const std::vector<std::string>& args, const std::string& out, const std::string& errlog,
                    const std::function<void()>& setup = {}) {
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = ::open(errlog.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0666);
    // Opened before `setup` may drop privileges: the build directory need not be reachable by nobody.
    int bin_fd = ::open(HPCTUNE_BINARY, O_RDONLY | O_CLOEXEC);
    if (o < 0 || e < 0 || bin_fd < 0 || ::dup2(o, 1) < 0 || ::dup2(e, 2) < 0) ::_exit(120);
    if (setup) setup();
    std::vector<char*> argv;
    std::string bin = HPCTUNE_BINARY;
    argv.push_back(bin.data());
    std::vector<std::string> copy = args;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::fexecve(bin_fd, argv.data(), environ);
    ::_exit(127);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  ExitStatus s;
  s.signaled = WIFSIGNALED(status);
  s.signal = s.signaled ? WTERMSIG(status) : 0;
  s.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return s;
}

// Drops to `nobody` when running as root, who writes anywhere: then permission bits hold. Exits
// 122 when `nobody` cannot reach `path` (a temporary directory under /root): nothing to test then.
std::function<void()> become_unprivileged(const std::string& path) {
  return [path] {
    if (::geteuid() == 0 && (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0)) {
      ::_exit(121);
    }
    if (::access(path.c_str(), R_OK) != 0) ::_exit(122);
  };
}

// A finished campaign in dir/<name>.db.
std::string finished_campaign(const TempDir& dir, const std::string& name, const std::string& access_line = "",
                              const std::string& more_values = "") {
  const std::string cfg = dir.write(name + ".yaml", config(access_line, more_values));
  const std::string db = dir.file(name + ".db");
  auto r = run_hpctune({"run", cfg, "--db", db}, dir.file(name + ".log"));
  REQUIRE_MESSAGE(r.success(), read_file(dir.file(name + ".log")));
  return db;
}

}  // namespace

TEST_CASE("the database and the trial directory are owner-only by default; storage_access widens them") {
  TempDir dir;
  const mode_t old = ::umask(022);  // the usual umask: on its own it gives 0644 files and 0755 dirs
  const std::string db = finished_campaign(dir, "owner");
  CHECK(mode_of(db) == 0600);
  CHECK(mode_of(db + ".trials") == 0700);
  const std::string group = finished_campaign(dir, "group", "storage_access: group\n");
  ::umask(old);
  for (const auto& [path, want] : std::vector<std::pair<std::string, unsigned>>{
           {db, 0600}, {db + "-wal", 0600}, {db + "-shm", 0600}, {db + "-master.lock", 0600},
           {db + ".trials", 0700}, {db + ".trials/logs", 0700},
           {group, 0640}, {group + "-wal", 0640}, {group + "-shm", 0640}, {group + ".trials", 0750},
           {group + ".trials/logs", 0750}}) {
    if (!fs::exists(path)) continue;  // -wal and -shm exist only while a connection is open
    CAPTURE(path);
    CHECK(mode_of(path) == want);
  }
  CHECK(mode_of(group) == 0640);
  CHECK(mode_of(group + ".trials") == 0750);
}

TEST_CASE("trial and attempt directories follow storage_access whatever the umask") {
  // Before, the workers and the command trainer made them with the umask's mode: 0777 under umask
  // 0, so that only <db>.trials (0700) kept other users out, and `storage_access: group` gave the
  // group no more than the umask did.
  TempDir dir;
  const std::string script = dir.write("t.sh", "echo \"hpctune-report {\\\"step\\\": 1, \\\"value\\\": $1}\"\n");
  auto cfg = [&](const std::string& name, const std::string& access_line) {
    return dir.write(name + ".yaml", "name: " + name + "\nseed: 1\n" + access_line +
                                         "objective: {metric: value, mode: max}\n"
                                         "search: {algorithm: random, max_trials: 1}\n"
                                         "space: {x: {type: float, low: 0.1, high: 0.9}}\n"
                                         "trainer: {kind: command, command: \"/bin/sh " + script + " {x}\"}\n"
                                         "resources: {groups: 1}\n");
  };
  const mode_t old = ::umask(0);
  for (const auto& [name, access_line, want] :
       {std::tuple<std::string, std::string, unsigned>{"owner", "", 0700}, {"group", "storage_access: group\n", 0750},
        {"all", "storage_access: all\n", 0755}}) {
    CAPTURE(name);
    const std::string db = dir.file(name + ".db");
    auto r = run_hpctune({"run", cfg(name, access_line), "--db", db}, dir.file(name + ".log"));
    REQUIRE_MESSAGE(r.success(), read_file(dir.file(name + ".log")));
    CHECK(mode_of(db + ".trials") == want);
    CHECK(mode_of(db + ".trials/1") == want);
    CHECK(mode_of(db + ".trials/1/attempt-1") == want);
  }
  ::umask(old);
}

TEST_CASE("status, trials and export on a full disk exit 1 with a message") {
  TempDir dir;
  const std::string db = finished_campaign(dir, "full");
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"status", db}, {"trials", db}, {"trials", db, "--format", "csv"},
        {"trials", db, "--format", "json"}, {"export", db, "--format", "csv"}, {"export", db, "--format", "json"}}) {
    CAPTURE(args[0] + " " + args.back());
    auto r = run_with(args, "/dev/full", dir.file("err.log"));
    CHECK(r.code == 1);
    CHECK(read_file(dir.file("err.log")).find("No space left on device") != std::string::npos);
  }
  // A campaign whose closing summary cannot be written: exit 1, and the campaign is recorded.
  const std::string cfg = dir.write("full-run.yaml", config("", ""));
  auto run = run_with({"run", cfg, "--db", dir.file("full-run.db")}, "/dev/full", dir.file("err.log"));
  CHECK(run.code == 1);
  CHECK(read_file(dir.file("err.log")).find("No space left on device") != std::string::npos);
  for (const auto& t : read_trials(dir.file("full-run.db"))) CHECK(t.state == store::TrialState::kDone);
  // The same commands to a real file succeed (the check is not a false alarm).
  auto ok = run_with({"status", db}, dir.file("status.out"), dir.file("err.log"));
  CHECK(ok.code == 0);
  CHECK(read_file(dir.file("status.out")).find("campaign   files") == 0);
}

TEST_CASE("export -o writes the whole file or leaves none: a failed write keeps an existing file") {
  TempDir dir;
  // 10,000 choices make the export (which carries the config) about 100 kB: larger than the -shm
  // file (32 kB) the reader needs under the same limit.
  std::string values;
  for (int i = 1; i <= 10000; ++i) values += ", " + std::to_string(i);
  const std::string db = finished_campaign(dir, "atomic", "", values);
  const std::string out = dir.file("out.json");
  std::ofstream(out) << "the previous export\n";
  // A file size limit makes the write fail part-way, as a full disk or a quota would.
  auto r = run_with({"export", db, "--format", "json", "-o", out}, dir.file("o.log"), dir.file("e.log"), [] {
    ::signal(SIGXFSZ, SIG_IGN);  // write() then fails with EFBIG instead of killing the process
    rlimit lim{40000, 40000};
    ::setrlimit(RLIMIT_FSIZE, &lim);
  });
  CHECK(r.code == 1);
  CHECK_MESSAGE(read_file(dir.file("e.log")).find("cannot write " + out) != std::string::npos, read_file(dir.file("e.log")));
  CHECK(read_file(out) == "the previous export\n");
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir.path)) {
    if (e.path().filename().string().find(".tmp-") != std::string::npos) left.push_back(e.path());
  }
  CHECK_MESSAGE(left.empty(), "temporary files left: " << left.size());

  // A directory that cannot be written: exit 1, nothing created.
  const std::string missing = dir.file("no/such/dir/out.csv");
  r = run_with({"export", db, "--format", "csv", "-o", missing}, dir.file("o.log"), dir.file("e.log"));
  CHECK(r.code == 1);
  CHECK_FALSE(fs::exists(missing));

  // Success replaces the file whole, with the database's mode (it holds what the database holds).
  const mode_t old = ::umask(022);
  r = run_with({"export", db, "--format", "json", "-o", out}, dir.file("o.log"), dir.file("e.log"));
  ::umask(old);
  CHECK(r.code == 0);
  auto doc = nlohmann::json::parse(read_file(out));
  CHECK(doc["trials"].size() == 3);
  CHECK(mode_of(out) == mode_of(db));
}

TEST_CASE("status, trials and export of a finished database copied to a read-only directory") {
  TempDir dir;
  REQUIRE(::chmod(dir.path.c_str(), 0755) == 0);  // reachable by `nobody` when run as root
  const std::string db = finished_campaign(dir, "ro");
  const std::string ro = dir.file("readonly");
  REQUIRE(::mkdir(ro.c_str(), 0755) == 0);
  fs::copy_file(db, ro + "/ro.db");  // the database alone, as one copies a result
  REQUIRE(::chmod((ro + "/ro.db").c_str(), 0444) == 0);
  REQUIRE(::chmod(ro.c_str(), 0555) == 0);
  const std::string out_dir = dir.file("out");
  REQUIRE(::mkdir(out_dir.c_str(), 0777) == 0);
  REQUIRE(::chmod(out_dir.c_str(), 0777) == 0);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"status", ro + "/ro.db"}, {"trials", ro + "/ro.db", "--format", "csv"},
        {"export", ro + "/ro.db", "--format", "json"}}) {
    CAPTURE(args[0]);
    auto r = run_with(args, out_dir + "/stdout", out_dir + "/stderr", become_unprivileged(ro + "/ro.db"));
    if (r.code == 122) {
      MESSAGE("skipped: user nobody cannot reach " << ro);
      break;
    }
    CHECK_MESSAGE(r.code == 0, read_file(out_dir + "/stderr"));
    const std::string out = read_file(out_dir + "/stdout");
    CHECK(out.find(args[0] == "status" ? "campaign   files" : args[0] == "trials" ? "trial,seq" : "\"name\": \"files\"") !=
          std::string::npos);
  }
  CHECK_FALSE(fs::exists(ro + "/ro.db-shm"));
  REQUIRE(::chmod(ro.c_str(), 0755) == 0);
}

TEST_CASE("CSV carries every digit: trials --format csv and export --format csv") {
  TempDir dir;
  const std::string db = finished_campaign(dir, "csv");
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"trials", db, "--format", "csv"}, {"export", db, "--format", "csv"}}) {
    CAPTURE(args[0]);
    auto r = run_with(args, dir.file("out.csv"), dir.file("err.log"));
    REQUIRE(r.code == 0);
    const std::string csv = read_file(dir.file("out.csv"));
    // objective, params.value and metrics.value of each of the three trials.
    size_t n = 0;
    for (size_t at = csv.find(kPrecise); at != std::string::npos; at = csv.find(kPrecise, at + 1)) ++n;
    CHECK_MESSAGE(n == 9, csv);
    CHECK(csv.find("0.1235") == std::string::npos);
  }
}
