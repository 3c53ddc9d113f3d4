// What a database names is opened as the user's own or not at all, and outputs never replace an
// input (issue 21, findings 3, 6, 9 and 14), through the hpctune binary and the dashboard's API:
// a planted <db>.trials link (made by `nobody`) is not followed; JSON nested 300,000 deep in a
// trial is an error naming the trial and column, never a crash; `export -o` refuses the database
// by any name while its campaign runs, a FIFO, a link in a directory others can write, and writes
// with the database's mode; `--db` of a directory or a device leaves nothing behind; an output
// line over 1 MiB does not swallow the next; `worker --threads -1` is a short error.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <grp.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/bounded_json.h"
#include "common/system.h"
#include "dashboard/api.h"
#include "report/campaign.h"
#include "report/trial_detail.h"
#include "tests/campaign_fixture.h"

using namespace hpctune;
using namespace hpctune::testing;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

bool contains(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

unsigned mode_of(const std::string& path) {
  struct stat st {};
  REQUIRE_MESSAGE(::stat(path.c_str(), &st) == 0, path);
  return st.st_mode & 07777;
}

// Runs `fn` in a child as user `nobody` (uid/gid 65534) when this test runs as root, else as
// ourselves; true when it returned true.
bool as_nobody(const std::function<bool()>& fn) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (::geteuid() == 0 && (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(2);
    ::_exit(fn() ? 0 : 1);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

struct Ran {
  launch::ExitStatus status;
  std::string out;  // stdout and stderr together
};

Ran hpctune_cmd(const TempDir& dir, const std::vector<std::string>& args, std::chrono::milliseconds limit = 60s) {
  static int n = 0;
  const std::string log = dir.file("cmd-" + std::to_string(++n) + ".log");
  Ran r;
  r.status = run_hpctune(args, log, limit);
  r.out = read_file(log);
  return r;
}

// A finished three-trial campaign of the sleep trainer in dir/<name>.db.
std::string finished_campaign(const TempDir& dir, const std::string& name, const std::string& access = "") {
  const std::string cfg = dir.write(name + ".yaml", access + sleep_config(name, 3, 0.01, 1, 1));
  const std::string db = dir.file(name + ".db");
  auto r = hpctune_cmd(dir, {"run", cfg, "--db", db});
  REQUIRE_MESSAGE(r.status.success(), r.out);
  return db;
}

void sql(const std::string& db, const std::string& statement) {
  sqlite3* h = nullptr;
  REQUIRE(sqlite3_open(db.c_str(), &h) == SQLITE_OK);
  char* msg = nullptr;
  const int rc = sqlite3_exec(h, statement.c_str(), nullptr, nullptr, &msg);
  const std::string text = msg ? msg : "";
  sqlite3_free(msg);
  sqlite3_close(h);
  REQUIRE_MESSAGE(rc == SQLITE_OK, text);
}

// The first column of the first row of `query`, as text.
std::string sql_text(const std::string& db, const std::string& query) {
  sqlite3* h = nullptr;
  REQUIRE(sqlite3_open(db.c_str(), &h) == SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  REQUIRE(sqlite3_prepare_v2(h, query.c_str(), -1, &s, nullptr) == SQLITE_OK);
  std::string out;
  if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0) != nullptr) {
    out = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
  }
  sqlite3_finalize(s);
  sqlite3_close(h);
  return out;
}

}  // namespace

// --- finding 3: a planted <db>.trials --------------------------------------------------------

TEST_CASE("a <db>.trials link planted by another user is not followed by `hpctune trial` or the dashboard") {
  TempDir dir;
  REQUIRE(::chmod(dir.path.c_str(), 0755) == 0);  // reachable by nobody
  const std::string db0 = finished_campaign(dir, "real");
  const int64_t id = read_trials(db0).front().id;
  // The victim's private files: what a link in the shared folder points to.
  const std::string victim = dir.file("victim");
  fs::create_directories(victim + "/" + std::to_string(id));
  REQUIRE(::chmod(victim.c_str(), 0700) == 0);
  const std::string secret = "PRIVATE-KEY-MATERIAL-0123";
  dir.write("victim/" + std::to_string(id) + "/stdout.log", secret + "\n");
  dir.write("victim/key", secret + "\n");
  // A folder others can write (group-shared), where `nobody` plants x.db and x.db.trials.
  const std::string shared = dir.file("shared");
  REQUIRE(::mkdir(shared.c_str(), 0777) == 0);
  REQUIRE(::chmod(shared.c_str(), 0777) == 0);
  const std::string db = shared + "/x.db";
  fs::copy_file(db0, db);
  // The planted database names a log in the planted folder, as a worker's message would have.
  sql(db, "INSERT INTO artifacts (trial_id, attempt, kind, path, bytes, created_at) VALUES (" + std::to_string(id) +
              ", 1, 'log', '" + shared + "/x.db.trials/key', 10, 0)");
  REQUIRE(::chown(db.c_str(), 65534, 65534) == 0);
  REQUIRE(as_nobody([&] { return ::symlink(victim.c_str(), (shared + "/x.db.trials").c_str()) == 0; }));

  // The CLI: no tail of the victim's file, in either format.
  for (const char* format : {"table", "json"}) {
    CAPTURE(format);
    auto r = hpctune_cmd(dir, {"trial", db, std::to_string(id), "--format", format});
    CHECK_FALSE(r.status.signaled);
    CHECK_MESSAGE(!contains(r.out, secret), r.out);
  }
  // The report functions the dashboard calls, and the dashboard's own answer.
  auto view = report::open_campaign(db);
  REQUIRE(view.ok());
  auto detail = report::load_trial(*view, id);
  REQUIRE(detail.ok());
  CHECK(detail->logs.empty());
  std::vector<store::ArtifactRow> planted(2);
  planted[0].kind = planted[1].kind = "log";
  planted[0].path = shared + "/x.db.trials/key";
  planted[1].path = shared + "/x.db.trials/" + std::to_string(id) + "/stdout.log";
  CHECK(report::trial_logs(db, id, planted).empty());
  CHECK(report::tail_lines(db, planted[0].path, 5).empty());
  CHECK_FALSE(report::open_trial_file(db, planted[1].path).ok());
  dashboard::Api api({db});
  auto answer = api.get("/api/campaigns/0/trials/" + std::to_string(id), {});
  CHECK_MESSAGE(!contains(answer.body.dump(), secret), answer.body.dump());

  // The user's own trial directory still shows its logs; a link inside it to a file elsewhere not.
  fs::create_directories(db0 + ".trials/" + std::to_string(id));
  dir.write("real.db.trials/" + std::to_string(id) + "/stdout.log", "line one\nline two\n");
  fs::create_symlink(victim + "/key", db0 + ".trials/" + std::to_string(id) + "/stderr.log");
  auto own = report::trial_logs(db0, id, {});
  REQUIRE(own.size() == 1);
  CHECK(report::tail_lines(db0, own[0], 1) == "line two");
  // A recorded path with a NUL byte: not the file before the NUL (before, it was opened and listed
  // under the longer name).
  std::vector<store::ArtifactRow> cut(1);
  cut[0].kind = "log";
  cut[0].path = own[0] + std::string("\0.bak", 5);
  CHECK_FALSE(report::open_trial_file(db0, cut[0].path).ok());
  CHECK(report::tail_lines(db0, cut[0].path, 1).empty());
  auto listed = report::trial_logs(db0, id, cut);
  REQUIRE(listed.size() == 1);
  CHECK(listed[0] == own[0]);
  auto r = hpctune_cmd(dir, {"trial", db0, std::to_string(id)});
  CHECK(contains(r.out, "line two"));
  CHECK_FALSE(contains(r.out, secret));
}

TEST_CASE("a campaign does not write its trials through a <db>.trials link another user planted") {
  TempDir dir;
  REQUIRE(::chmod(dir.path.c_str(), 0755) == 0);  // reachable by nobody
  const std::string shared = dir.file("shared");
  REQUIRE(::mkdir(shared.c_str(), 0777) == 0);
  REQUIRE(::chmod(shared.c_str(), 0777) == 0);
  // nobody's folder, readable by nobody: where the trials' files would land.
  const std::string drop = shared + "/drop";
  REQUIRE(as_nobody([&] { return ::mkdir(drop.c_str(), 0777) == 0 && ::chmod(drop.c_str(), 0777) == 0; }));
  REQUIRE(as_nobody([&] { return ::symlink(drop.c_str(), (shared + "/x.db.trials").c_str()) == 0; }));
  const std::string cfg = dir.write("c.yaml", sleep_config("planted", 2, 0.01, 1, 1));
  auto r = hpctune_cmd(dir, {"run", cfg, "--db", shared + "/x.db"});
  CHECK(r.status.code != 0);
  CHECK_MESSAGE(contains(r.out, "x.db.trials exists and is not a directory of this user's own"), r.out);
  CHECK(fs::is_empty(drop));
}

TEST_CASE("resume: links and FIFOs planted in the trial directories are neither written through nor waited on") {
  // A campaign unpacked from someone else's archive and resumed. Before, the command trainer
  // appended its output to the file a planted stdout.log linked to, and a FIFO stderr.log (or a
  // FIFO group log) hung the worker (the master) for good; a trial directory that was a link
  // received the trial's files.
  TempDir dir;
  const std::string script = dir.write("t.sh", "echo \"hpctune-report {\\\"step\\\": 1, \\\"loss\\\": $1}\"\necho out\n");
  const std::string cfg = dir.write("c.yaml", "name: planted\nseed: 1\nobjective: {metric: loss, mode: min}\n"
                                              "search: {algorithm: random, max_trials: 2}\n"
                                              "space: {x: {type: float, low: 0.1, high: 0.9}}\n"
                                              "trainer: {kind: command, command: \"/bin/sh " + script + " {x}\"}\n"
                                              "resources: {groups: 1}\n");
  const std::string db = dir.file("c.db");
  auto r = hpctune_cmd(dir, {"run", cfg, "--db", db});
  REQUIRE_MESSAGE(r.status.success(), r.out);
  const std::string trials = db + ".trials";
  const std::string victim = dir.write("victim.txt", "victim\n");
  const std::string elsewhere = dir.file("elsewhere");
  fs::create_directories(elsewhere);
  fs::create_directories(trials + "/3/attempt-1");
  fs::create_symlink(victim, trials + "/3/attempt-1/stdout.log");
  fs::create_directories(trials + "/4/attempt-1");
  REQUIRE(::mkfifo((trials + "/4/attempt-1/stderr.log").c_str(), 0600) == 0);
  fs::create_directory_symlink(elsewhere, trials + "/5");
  r = hpctune_cmd(dir, {"resume", db, "--max-trials", "5"}, 60s);
  CHECK_MESSAGE(r.status.code == 0, r.out);  // the campaign completes: two trials done before
  CHECK_MESSAGE(contains(r.out, "trial 3 failed: " + trials + "/3/attempt-1/stdout.log is a symbolic link: not written through"),
                r.out);
  CHECK_MESSAGE(contains(r.out, "trial 4 failed: " + trials + "/4/attempt-1/stderr.log is a FIFO: not written to"), r.out);
  CHECK_MESSAGE(contains(r.out, "trial 5 failed: trainer threw: " + trials + "/5 is a symbolic link: not followed"), r.out);
  CHECK(read_file(victim) == "victim\n");
  CHECK(fs::is_empty(elsewhere));
  // The group's log: a FIFO or a link there is refused at the group's start, exit 2.
  for (const bool fifo : {true, false}) {
    CAPTURE(fifo);
    const std::string log = trials + "/logs/group-0.log";
    fs::remove(log);
    if (fifo) REQUIRE(::mkfifo(log.c_str(), 0600) == 0);
    else fs::create_symlink(victim, log);
    r = hpctune_cmd(dir, {"resume", db, "--max-trials", "6"}, 60s);
    CHECK_MESSAGE(r.status.code == 2, r.out);
    CHECK_MESSAGE(contains(r.out, log + (fifo ? " is a FIFO: not written to" : " is a symbolic link: not written through")),
                  r.out);
    CHECK(read_file(victim) == "victim\n");
  }
}

// --- finding 6: JSON nested too deep in the store ---------------------------------------------

TEST_CASE("JSON nested 300,000 deep in a trial: status, trials, export, trial and the dashboard say so, no crash") {
  TempDir dir;
  const std::string db = finished_campaign(dir, "deep");
  const int64_t id = read_trials(db).front().id;
  const std::string deep = std::string(300000, '[') + std::string(300000, ']');
  sql(db, "UPDATE trials SET params = '" + deep + "' WHERE id = " + std::to_string(id));
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"status", db}, {"status", db, "--format", "json"}, {"trials", db},
        {"trials", db, "--format", "csv"}, {"trials", db, "--format", "json"}, {"export", db, "--format", "json"},
        {"export", db, "--format", "csv"}, {"trial", db, std::to_string(id)}}) {
    CAPTURE(args[0] + " " + args.back());
    auto r = hpctune_cmd(dir, args);
    CHECK_FALSE(r.status.signaled);
    CHECK(r.status.code == 1);
    CHECK_MESSAGE(contains(r.out, "column trials.params holds JSON nested more than 64 levels deep"), r.out);
    CHECK(contains(r.out, "while reading trial " + std::to_string(id)));
  }
  // The dashboard's snapshot load (what `hpctune dashboard` does before it serves).
  dashboard::Api api({db});
  auto loaded = api.load();
  REQUIRE_FALSE(loaded.ok());
  CHECK(contains(loaded.error().to_string(), "trials.params"));
  auto r = hpctune_cmd(dir, {"dashboard", db, "--port", "0"}, 30s);
  CHECK_FALSE(r.status.signaled);
  CHECK(r.status.code != 0);
  CHECK_MESSAGE(contains(r.out, "trials.params"), r.out);

  // The limits themselves: 64 levels pass, 65 do not; brackets in strings do not count; size.
  CHECK(parse_bounded_json(std::string(64, '[') + std::string(64, ']'), "x").ok());
  CHECK_FALSE(parse_bounded_json(std::string(65, '[') + std::string(65, ']'), "x").ok());
  CHECK(parse_bounded_json("[\"" + std::string(100, '[') + "\\\"{\"]", "x").ok());
  auto big = parse_bounded_json("\"" + std::string(static_cast<std::size_t>(kMaxStoredJsonBytes), 'a') + "\"", "x");
  REQUIRE_FALSE(big.ok());
  CHECK(big.error().code() == Errc::kIo);
}

// --- finding 9: export -o ----------------------------------------------------------------------

TEST_CASE("export -o refuses the running campaign's own database by any name; the campaign completes intact") {
  TempDir dir;
  const std::string cfg = dir.write("c.yaml", sleep_config("live", 12, 0.3, 2, 1));
  const std::string db = dir.file("c.db");
  auto master = start_hpctune({"run", cfg, "--db", db}, dir.file("run.log"));
  REQUIRE_MESSAGE(wait_for_running_trial(db, 30s), read_file(dir.file("run.log")));
  fs::create_symlink("c.db", dir.file("link.db"));
  fs::create_directories(dir.file("sub"));
  REQUIRE(::link(db.c_str(), dir.file("hard.db").c_str()) == 0);
  for (const std::string& out : {db, dir.file("sub/../c.db"), dir.file("./c.db"), dir.file("link.db"),
                                 dir.file("hard.db"), db + "-wal", db + "-shm", db + "-journal"}) {
    CAPTURE(out);
    auto r = hpctune_cmd(dir, {"export", db, "--format", "json", "-o", out});
    CHECK(r.status.code == 2);
    CHECK_MESSAGE(contains(r.out, "is the database"), r.out);
  }
  auto done = master.wait_for(120s);
  REQUIRE(done.has_value());
  CHECK_MESSAGE(done->success(), read_file(dir.file("run.log")));
  const auto trials = read_trials(db);
  CHECK(trials.size() == 12);
  for (const auto& t : trials) CHECK(t.state == store::TrialState::kDone);
  auto st = hpctune_cmd(dir, {"status", db});
  CHECK(st.status.success());
  CHECK(contains(st.out, "completed"));
  CHECK_FALSE(fs::exists(db + "-journal"));
}

TEST_CASE("export -o: a FIFO is refused at once, a link in a folder others can write is not followed, the mode is the database's") {
  TempDir dir;
  REQUIRE(::chmod(dir.path.c_str(), 0755) == 0);  // reachable by nobody
  const mode_t old = ::umask(022);
  const std::string db = finished_campaign(dir, "owner");
  const std::string group = finished_campaign(dir, "group", "storage_access: group\n");
  ::umask(old);
  REQUIRE(mode_of(db) == 0600);

  // A FIFO: refused without waiting for a reader.
  const std::string fifo = dir.file("fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = hpctune_cmd(dir, {"export", db, "--format", "csv", "-o", fifo}, 20s);
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  CHECK(r.status.code == 2);
  CHECK_MESSAGE(contains(r.out, "is not a regular file (a FIFO)"), r.out);
  for (const std::string& out : {std::string("/dev/null"), dir.path}) {
    auto d = hpctune_cmd(dir, {"export", db, "--format", "csv", "-o", out});
    CHECK(d.status.code == 2);
  }

  // A link planted by another user in a folder others can write (sticky, as /tmp): not followed.
  const std::string shared = dir.file("shared");
  REQUIRE(::mkdir(shared.c_str(), 0777) == 0);
  REQUIRE(::chmod(shared.c_str(), 01777) == 0);
  const std::string precious = dir.write("precious.txt", "keep me\n");
  REQUIRE(as_nobody([&] { return ::symlink(precious.c_str(), (shared + "/out.json").c_str()) == 0; }));
  r = hpctune_cmd(dir, {"export", db, "-o", shared + "/out.json"});
  CHECK(r.status.code != 0);
  CHECK_MESSAGE(contains(r.out, "symbolic link in a directory that others can write"), r.out);
  CHECK(read_file(precious) == "keep me\n");
  CHECK(fs::is_symlink(shared + "/out.json"));
  // A new file there is fine, and a link of the user's own in their own folder is followed.
  r = hpctune_cmd(dir, {"export", db, "-o", shared + "/mine.json"});
  CHECK_MESSAGE(r.status.success(), r.out);
  fs::create_symlink(dir.file("target.csv"), dir.file("mylink.csv"));
  r = hpctune_cmd(dir, {"export", db, "-o", dir.file("mylink.csv")});
  CHECK_MESSAGE(r.status.success(), r.out);
  CHECK(fs::is_symlink(dir.file("mylink.csv")));
  CHECK(contains(read_file(dir.file("target.csv")), "trial,"));

  // The database's mode, whatever the umask and whatever the file had.
  dir.write("out.json", "old\n");
  REQUIRE(::chmod(dir.file("out.json").c_str(), 0666) == 0);
  for (const auto& [source, want] : std::vector<std::pair<std::string, unsigned>>{{db, 0600}, {group, 0640}}) {
    CAPTURE(source);
    r = hpctune_cmd(dir, {"export", source, "-o", dir.file("out.json")});
    REQUIRE_MESSAGE(r.status.success(), r.out);
    CHECK(mode_of(dir.file("out.json")) == want);
    CHECK(mode_of(shared + "/mine.json") == 0600);
  }
}

// --- finding 14 ---------------------------------------------------------------------------------

TEST_CASE("--db of a directory, a device or a FIFO is refused and leaves no lock or journal beside it") {
  TempDir dir;
  const std::string cfg = dir.write("c.yaml", sleep_config("nowhere", 1, 0.01, 1, 1));
  const std::string folder = dir.file("folder");
  fs::create_directories(folder);
  const std::string fifo = dir.file("fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  for (const std::string& db : {std::string("/tmp"), std::string("/dev/null"), folder, fifo}) {
    CAPTURE(db);
    for (const char* suffix : {"-master.lock", "-journal", "-wal", "-shm"}) {
      if (db.rfind(dir.path, 0) != 0) ::unlink((db + suffix).c_str());  // what an earlier hpctune left
    }
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"run", cfg, "--db", db}, {"resume", db}, {"status", db}, {"trials", db}}) {
      CAPTURE(args[0]);
      auto r = hpctune_cmd(dir, args, 20s);
      CHECK(r.status.code != 0);
      CHECK_FALSE(r.status.signaled);
      CHECK_MESSAGE(contains(r.out, "not a database file"), r.out);
    }
    for (const char* suffix : {"-master.lock", "-journal", "-wal", "-shm", ".trials"}) {
      CHECK_MESSAGE(!fs::exists(db + suffix), (db + suffix));
    }
  }
}

TEST_CASE("a line over 1 MiB in a trainer's output is followed by the next line on a line of its own") {
  TempDir dir;
  const std::string script = dir.write(
      "long.sh",
      "head -c 1500000 /dev/zero | tr '\\0' x\necho\necho short line\n"
      "echo \"hpctune-report {\\\"step\\\": 1, \\\"val_accuracy\\\": 0.5}\"\n");
  const std::string cfg = dir.write(
      "c.yaml", "name: long\nseed: 1\nobjective: {metric: val_accuracy, mode: max}\n"
                "search: {algorithm: random, max_trials: 1}\nspace:\n  x: {type: float, low: 0.1, high: 0.9}\n"
                "trainer:\n  kind: command\n  command: \"/bin/sh " + script + "\"\n"
                "resources: {groups: 1, threads: 1}\n");
  const std::string db = dir.file("long.db");
  auto r = hpctune_cmd(dir, {"run", cfg, "--db", db});
  REQUIRE_MESSAGE(r.status.success(), r.out);
  const int64_t id = read_trials(db).front().id;
  const std::string log = read_file(db + ".trials/" + std::to_string(id) + "/attempt-1/stdout.log");
  std::vector<std::string> lines;
  for (std::size_t start = 0; start < log.size();) {
    const std::size_t nl = std::min(log.find('\n', start), log.size());
    lines.push_back(log.substr(start, nl - start));
    start = nl + 1;
  }
  // After the trainer's header line: the long line whole, then the short one on its own.
  const auto long_line = std::find(lines.begin(), lines.end(), std::string(1500000, 'x'));
  REQUIRE_MESSAGE(long_line != lines.end(), "no line of 1,500,000 x; " << lines.size() << " lines");
  REQUIRE(long_line + 1 != lines.end());
  CHECK(*(long_line + 1) == "short line");
}

TEST_CASE("worker --threads -1 is a short usage error") {
  TempDir dir;
  auto r = hpctune_cmd(dir, {"worker", "--master", "tcp://127.0.0.1:1", "--threads", "-1"});
  CHECK(r.status.code == 2);
  CHECK_MESSAGE(r.out.size() < 200, r.out);
  CHECK(contains(r.out, "--threads"));
  CHECK(contains(r.out, "1024"));
  r = hpctune_cmd(dir, {"worker", "--master", "tcp://127.0.0.1:1", "--collective-timeout", "-1"});
  CHECK(r.status.code == 2);
  CHECK_MESSAGE(r.out.size() < 200, r.out);
  // Before, CLI11 took "-2", "0x10" and " 5" as groups and clamped 2^64 to 2^63-1 (the next slot of
  // a pack then overflowed), and NaN passed the timeout's range check; each then said hello (or
  // waited) until the give-up deadline: 20 s here fails on that.
  const std::string credential = std::string(32, 'a') + "." + std::string(32, 'b');
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"--group", "-2"}, {"--group", "0x10"}, {"--group", " 5"},
        {"--group", "99999999999999999999"}, {"--group", "2147483647", "--slots", "2"},
        {"--group", "0", "--collective-timeout", "nan"}}) {
    CAPTURE(extra[1]);
    std::vector<std::string> args = {"worker", "--master", "tcp://127.0.0.1:1"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto w = start_hpctune(args, dir.file("group.log"), {{"HPCTUNE_SECRET", credential + "," + credential}});
    auto st = w.wait_for(20s);
    REQUIRE_MESSAGE(st.has_value(), read_file(dir.file("group.log")));
    const std::string out = read_file(dir.file("group.log"));
    CHECK_MESSAGE(st->code == 2, out);
    const std::string named = extra.back() == "nan" ? "--collective-timeout: " : "--group: ";
    CHECK_MESSAGE(contains(out, named), out);
  }
  // An address no worker can connect to: before, "garbage" and "tcp://127.0.0.1:*" exited 1 with
  // ZeroMQ's "Invalid argument", and port 0 or 99999, no host or inproc:// waited 10 minutes.
  for (const std::string master : {"garbage", "tcp://127.0.0.1:99999", "tcp://127.0.0.1:0", "tcp://:5555", "tcp://*:5555",
                                   "tcp://127.0.0.1:*", "tcp://127.0.0.1", "inproc://x", "ipc://*", "tcp://h:5\x1b[2J"}) {
    CAPTURE(master);
    auto w = start_hpctune({"worker", "--master", master, "--group", "0"}, dir.file("master.log"),
                           {{"HPCTUNE_SECRET", credential}});
    auto st = w.wait_for(20s);
    REQUIRE_MESSAGE(st.has_value(), read_file(dir.file("master.log")));
    const std::string out = read_file(dir.file("master.log"));
    CHECK_MESSAGE(st->code == 2, out);
    CHECK_MESSAGE(contains(out, "--master: "), out);
    CHECK_MESSAGE(contains(out, "expected tcp://HOST:PORT (PORT 1..65535) or ipc://PATH"), out);
  }
  // The environment's timeout is checked as the flag is ("nan" was NaN, "abc" 0).
  auto w = start_hpctune({"worker", "--master", "tcp://127.0.0.1:1", "--group", "0", "--ranks-data", "2",
                          "--trainer-starts-ranks"},
                         dir.file("env.log"), {{"HPCTUNE_SECRET", credential}, {"HPCTUNE_COLLECTIVE_TIMEOUT_S", "nan"}});
  auto st = w.wait_for(20s);
  REQUIRE_MESSAGE(st.has_value(), read_file(dir.file("env.log")));
  CHECK(st->code == 2);
  CHECK_MESSAGE(contains(read_file(dir.file("env.log")), "HPCTUNE_COLLECTIVE_TIMEOUT_S: 'nan' is not a number"),
                read_file(dir.file("env.log")));
}

TEST_CASE("a worker started by hand without HPCTUNE_SECRET exits 2 at once naming the variable") {
  // Before, it said hello without a credential (which the master ignores) and retried until its
  // give-up deadline (10 minutes); the 30 s limit below fails on that.
  TempDir dir;
  REQUIRE(std::getenv("HPCTUNE_SECRET") == nullptr);
  auto w = start_hpctune({"worker", "--master", "tcp://127.0.0.1:1", "--group", "0"}, dir.file("w.log"));
  auto st = w.wait_for(30s);
  REQUIRE_MESSAGE(st.has_value(), read_file(dir.file("w.log")));
  std::string out = read_file(dir.file("w.log"));
  CHECK_MESSAGE(st->code == 2, out);
  CHECK_MESSAGE(contains(out, "no launch credential: the environment variable HPCTUNE_SECRET is not set"), out);
  CHECK_MESSAGE(!contains(out, "no answer from the master"), out);
  // A packed worker (--slots 2) given one credential: the slot without one is named.
  auto p = start_hpctune({"worker", "--master", "tcp://127.0.0.1:1", "--group", "4", "--slots", "2"},
                         dir.file("p.log"), {{"HPCTUNE_SECRET", std::string(32, 'a') + "." + std::string(32, 'b')}});
  st = p.wait_for(30s);
  REQUIRE_MESSAGE(st.has_value(), read_file(dir.file("p.log")));
  out = read_file(dir.file("p.log"));
  CHECK_MESSAGE(st->code == 2, out);
  CHECK_MESSAGE(contains(out, "no launch credential for slot 1 (group 5) of --slots 2"), out);
}

TEST_CASE("a worker given a malformed HPCTUNE_SECRET exits 2 at once naming the variable and its form") {
  // Before, a non-empty credential of any form was sent in hello (which the master ignores) and the
  // worker retried until its give-up deadline (10 minutes); the 30 s limit below fails on that.
  TempDir dir;
  const std::string a32(32, 'a'), b32(32, 'b');
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--group", "0"}, "x"},
      {{"--group", "0"}, a32 + b32},                   // no dot
      {{"--group", "0"}, a32 + "." + std::string(31, 'b')},
      {{"--group", "0"}, std::string(32, 'A') + "." + b32},  // the master writes lower-case hex
      {{"--group", "0"}, a32 + "." + std::string(31, 'b') + "g"},
      {{"--group", "0"}, a32 + "." + b32 + "," + a32 + "." + b32},  // a pack's list, for one slot
      {{"--group", "4", "--slots", "2"}, a32 + "." + b32 + ",secret-2"},
  };
  int n = 0;
  for (const auto& [flags, secret] : cases) {
    CAPTURE(secret);
    std::string name = "w";  // appended, not "w" + ...: GCC 12 warns falsely (-Wrestrict, PR 105329)
    name.append(std::to_string(++n)).append(".log");
    const std::string log = dir.file(name);
    std::vector<std::string> args = {"worker", "--master", "tcp://127.0.0.1:1"};
    args.insert(args.end(), flags.begin(), flags.end());
    auto w = start_hpctune(args, log, {{"HPCTUNE_SECRET", secret}});
    auto st = w.wait_for(30s);
    REQUIRE_MESSAGE(st.has_value(), read_file(log));
    const std::string out = read_file(log);
    CHECK_MESSAGE(st->code == 2, out);
    CHECK_MESSAGE(contains(out, "malformed launch credential: the environment variable HPCTUNE_SECRET"), out);
    CHECK_MESSAGE(contains(out, "'<campaign secret>.<launch token>', 32 lower-case hex digits each"), out);
    CHECK_MESSAGE(!contains(out, "no answer from the master"), out);
    if (secret.size() >= 32) CHECK_MESSAGE(!contains(out, secret), out);  // a secret, even a wrong one, is not printed
  }
}

// --- issue 35, R4 and R8: a store of huge JSON values; text that is not UTF-8 ------------------

TEST_CASE("four 60 MB JSON arrays: status, trials, export and trial refuse naming the trial and column, never abort") {
  TempDir dir;
  const std::string db = dir.file("big.db");
  {
    const std::string cfg = dir.write("big.yaml", sleep_config("big", 4, 0.01, 1, 1));
    auto r = hpctune_cmd(dir, {"run", cfg, "--db", db});
    REQUIRE_MESSAGE(r.status.success(), r.out);
  }
  // Each value within the per-value limit (64 MiB): 30 million ones, 60 MB of text.
  sql(db, "UPDATE trials SET metrics = '[' || substr(replace(hex(zeroblob(30000000)), '00', '1,'), 1, 59999999) || ']'");
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"status", db}, {"trials", db, "--format", "json"}, {"export", db, "--format", "json"},
        {"trial", db, "2"}}) {
    CAPTURE(args[0]);
    auto r = hpctune_cmd(dir, args, 120s);
    CHECK_FALSE(r.status.signaled);
    CHECK((r.status.code == 1 || r.status.code == 2));
    CHECK_MESSAGE(contains(r.out, "while reading trial "), r.out.substr(0, 2000));
    CHECK(contains(r.out, "trials.metrics"));
    CHECK_FALSE(contains(r.out, "internal error"));
  }
}

TEST_CASE("text that is not UTF-8 in a crafted store is printed as U+FFFD by every JSON output") {
  TempDir dir;
  const std::string db = finished_campaign(dir, "bytes");
  const int64_t id = read_trials(db).front().id;
  sql(db, "UPDATE trials SET state = 'failed', error = CAST(X'6261642062797465733a20FFFE2E' AS TEXT) WHERE id = " +
              std::to_string(id));
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"status", db, "--format", "json"}, {"trials", db, "--format", "json"},
        {"export", db, "--format", "json"}, {"trial", db, std::to_string(id), "--format", "json"}, {"trials", db}}) {
    CAPTURE(args[0]);
    auto r = hpctune_cmd(dir, args);
    CHECK_MESSAGE(r.status.code == 0, r.out);
    CHECK_FALSE(contains(r.out, "internal error"));
  }
  auto r = hpctune_cmd(dir, {"trial", db, std::to_string(id), "--format", "json"});
  CHECK_MESSAGE((contains(r.out, "bad bytes: \xEF\xBF\xBD\xEF\xBF\xBD.") || contains(r.out, "bad bytes: \\ufffd\\ufffd.")),
                r.out);
}

// --- audit: campaigns.config_json of the wrong shape (the keys readers take a type for) ---------

TEST_CASE("campaigns.config_json of another shape: every reader names the key, none reports an internal error") {
  TempDir dir;
  const std::string good = finished_campaign(dir, "shape");
  struct Case {
    const char* set;     // the crafted config_json, as SQL
    const char* expect;  // what the error names
  };
  const Case cases[] = {
      // Before: every command "internal error: type must be string, but is number"; the dashboard did not start.
      {"json_set(config_json, '$.objectives[0].metric', 5)", "config_json at objectives[0].metric: expected a string"},
      // Before: the dashboard's params and importance routes answered 500 "internal error".
      {"json_set(config_json, '$.space.value.log', 'yes')", "config_json at space.value.log: expected true or false"},
      // Before: `resume` stopped with "internal error: cannot use operator[] with a string argument with number".
      {"'7'", "column campaigns.config_json: expected a map of settings, got number"},
      {"json_set(config_json, '$.stages', json('[{\"name\": 5, \"search\": {}}]'))", "config_json at stages[0].name"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.set);
    const std::string db = dir.file("shape-" + std::to_string(&c - cases) + ".db");
    fs::copy_file(good, db);
    sql(db, std::string("UPDATE campaigns SET config_json = ") + c.set);
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"status", db}, {"status", db, "--format", "json"}, {"trials", db},
          {"export", db, "--format", "csv"}, {"trial", db, "1"}, {"resume", db, "--max-trials", "5"}}) {
      CAPTURE(args[0]);
      auto r = hpctune_cmd(dir, args);
      CHECK_FALSE(r.status.signaled);
      CHECK(r.status.code == 1);
      CHECK_MESSAGE(contains(r.out, c.expect), r.out);
      CHECK_FALSE(contains(r.out, "internal error"));
    }
    dashboard::Api api({db});
    auto loaded = api.load();
    REQUIRE_FALSE(loaded.ok());
    CHECK(contains(loaded.error().to_string(), c.expect));
    // Nothing recorded was lost or changed: the trials are all there, the campaign still completed.
    CHECK(sql_text(db, "SELECT count(*) || ' ' || (SELECT state FROM campaigns) FROM trials WHERE state = 'done'") ==
          "3 completed");
  }
}

TEST_CASE("resume: the groups and budget campaigns.config_json keeps are checked against their bounds") {
  TempDir dir;
  const std::string good = finished_campaign(dir, "bounds");
  struct Case {
    const char* set;
    const char* expect;
  };
  const Case cases[] = {
      // Before: accepted unchecked: resume would start 100000 trainer groups (a process each).
      {"json_set(config_json, '$.resources.groups', 100000)", "resources.groups: 100000 is above the maximum 4096"},
      // Before: "0 trainer group(s)", then the error "every trainer group has exited and none may be restarted".
      {"json_set(config_json, '$.resources.groups', 0)", "resources.groups: 0 is below the minimum 1"},
      {"json_set(config_json, '$.resources.groups', -1)", "resources.groups: -1 is below the minimum 1"},
      {"json_set(config_json, '$.search.max_trials', -5)", "search.max_trials: -5 is below the minimum 1"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.set);
    const std::string db = dir.file("bounds-" + std::to_string(&c - cases) + ".db");
    fs::copy_file(good, db);
    sql(db, std::string("UPDATE campaigns SET config_json = ") + c.set);
    auto r = hpctune_cmd(dir, {"resume", db, "--max-trials", "5"});
    CHECK_FALSE(r.status.signaled);
    CHECK(r.status.code == 1);
    CHECK_MESSAGE(contains(r.out, std::string("column campaigns.config_json at ") + c.expect), r.out);
    CHECK(sql_text(db, "SELECT count(*) || ' ' || (SELECT state FROM campaigns) FROM trials") == "3 completed");
  }
}

TEST_CASE("trials.attempt out of its range (a count near 2^63): every reader and resume name the column") {
  TempDir dir;
  const std::string good = finished_campaign(dir, "attempt");
  int n = 0;
  for (const char* value : {"9223372036854775807", "1099511627777"}) {  // 2^63 - 1, 2^40 + 1
    CAPTURE(value);
    const std::string db = dir.file("attempt-" + std::to_string(++n) + ".db");
    fs::copy_file(good, db);
    // Before: resume numbered the next attempt by overflowing (undefined behaviour), then failed with
    // "cannot assign trial 2 attempt -9223372036854775808".
    sql(db, std::string("UPDATE trials SET state = 'queued', attempt = ") + value + " WHERE id = 2");
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"status", db}, {"trials", db, "--format", "json"}, {"resume", db, "--max-trials", "5"}}) {
      CAPTURE(args[0]);
      auto r = hpctune_cmd(dir, args);
      CHECK_FALSE(r.status.signaled);
      CHECK(r.status.code == 1);
      CHECK_MESSAGE(contains(r.out, std::string("column trials.attempt: ") + value + " is out of 0.."), r.out);
      CHECK(contains(r.out, "while reading trial 2"));
      CHECK_FALSE(contains(r.out, "internal error"));
    }
    CHECK(sql_text(db, "SELECT attempt FROM trials WHERE id = 2") == value);  // nothing recorded changed
  }
}

TEST_CASE("campaigns.master_pid past a pid's range names no process: a running campaign without heartbeat is interrupted") {
  // Before, 4294967295 became kill(-1, 0) (some process answers: "alive") and 4294967296 kill(0, 0)
  // (our own group), so status showed the dead master's campaign as running.
  TempDir dir;
  const std::string good = finished_campaign(dir, "pid");
  int n = 0;
  for (const std::string pid : {"4294967295", "4294967296", "9223372036854775807"}) {
    CAPTURE(pid);
    const std::string db = dir.file("pid-" + std::to_string(++n) + ".db");
    fs::copy_file(good, db);
    sql(db, std::string("UPDATE campaigns SET state = 'running', finished_at = NULL, heartbeat_at = NULL, master_host = '") +
                host_name() + "', master_pid = " + pid);
    auto r = hpctune_cmd(dir, {"status", db, "--format", "json"});
    REQUIRE_MESSAGE(r.status.code == 0, r.out);
    const auto j = nlohmann::json::parse(r.out);
    CHECK_MESSAGE(j["campaign"]["state"] == "interrupted", r.out);
    CHECK(j["campaign"]["master"]["alive"] == false);
  }
}

TEST_CASE("a master that died and was not reaped yet (a zombie) is gone: its campaign is interrupted at once") {
  // Before, kill(pid, 0) answered for the zombie and its heartbeat was fresh, so status said running
  // until the heartbeat aged (30 s), or for good under a parent that never reaps.
  TempDir dir;
  const std::string db = finished_campaign(dir, "zombie");
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) ::_exit(0);
  // Wait until it is a zombie (exited, not reaped: we do not wait for it yet).
  std::string stat;
  for (int i = 0; i < 500; ++i) {
    std::ifstream f("/proc/" + std::to_string(child) + "/stat");
    std::getline(f, stat);
    if (stat.find(") Z") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE_MESSAGE(stat.find(") Z") != std::string::npos, stat);
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  sql(db, std::string("UPDATE campaigns SET state = 'running', finished_at = NULL, heartbeat_at = ") + std::to_string(now) +
              ", master_host = '" + host_name() + "', master_pid = " + std::to_string(child));
  auto r = hpctune_cmd(dir, {"status", db, "--format", "json"});
  ::waitpid(child, nullptr, 0);
  REQUIRE_MESSAGE(r.status.code == 0, r.out);
  const auto j = nlohmann::json::parse(r.out);
  CHECK_MESSAGE(j["campaign"]["state"] == "interrupted", r.out);
  CHECK(j["campaign"]["master"]["alive"] == false);
}

TEST_CASE("a database without a column of its schema: every command exits 1 naming it; the dashboard too") {
  // Before: `status` and `trials` ran, `trial` failed with SQLite's "no such column: sync_mode", the
  // dashboard started and its trial route answered 500 with that message.
  TempDir dir;
  const std::string good = finished_campaign(dir, "loose");
  const std::string db = dir.file("dropped.db");
  fs::copy_file(good, db);
  sql(db, "ALTER TABLE trials DROP COLUMN sync_mode");
  const std::string expect = "lacks column trials.sync_mode of its schema version";
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"status", db}, {"trials", db}, {"trial", db, "1"}, {"export", db, "--format", "csv"},
        {"resume", db, "--max-trials", "5"}}) {
    CAPTURE(args[0]);
    auto r = hpctune_cmd(dir, args);
    CHECK_MESSAGE(r.status.code == 1, r.out);
    CHECK_MESSAGE(contains(r.out, expect), r.out);
    CHECK_FALSE(contains(r.out, "no such column"));
  }
  auto r = hpctune_cmd(dir, {"dashboard", db, "--port", "0"}, 30s);
  CHECK(r.status.code == 1);
  CHECK_MESSAGE(contains(r.out, expect), r.out);
  // A column dropped while the dashboard serves the file: the trial route says the same.
  const std::string live = dir.file("live.db");
  fs::copy_file(good, live);
  dashboard::Api api({live});
  REQUIRE(api.load().ok());
  CHECK(api.get("/api/campaigns/0/trials/1", {}).status == 200);
  sql(live, "ALTER TABLE trials DROP COLUMN sync_mode");
  auto answer = api.get("/api/campaigns/0/trials/2", {});
  CHECK(answer.status == 500);
  CHECK_MESSAGE(contains(answer.body.dump(), expect), answer.body.dump());
  CHECK_FALSE(contains(answer.body.dump(), "no such column"));
}

TEST_CASE("an objective or a metric stored as text: every command exits 1 naming the column and the row") {
  // Before, SQLite read the text as 0: `status` and `resume` named trial 2 the best (value = 0).
  TempDir dir;
  const std::string good = finished_campaign(dir, "texty");
  for (const auto& [name, change] : {std::pair<std::string, std::string>{"objective", "UPDATE trials SET objective = 'nan' WHERE id = 2"},
                                     {"metric", "UPDATE metrics SET value = 'abc' WHERE trial_id = 2"}}) {
    CAPTURE(name);
    const std::string db = dir.file(name + ".db");
    fs::copy_file(good, db);
    sql(db, change);
    // Refused on open, naming the table, the column and the row (the metric's by its key).
    const std::string expect = name == "objective"
                                   ? "column trials.objective of the row with id 2 holds text where a number belongs"
                                   : "column metrics.value of the row with trial_id 2, attempt 1, step ";
    std::vector<std::vector<std::string>> commands = {{"trial", db, "2"}, {"export", db, "--format", "json"}};
    if (name == "objective") {
      commands.push_back({"status", db});
      commands.push_back({"trials", db});
      commands.push_back({"resume", db, "--max-trials", "6"});
    }
    for (const auto& args : commands) {
      CAPTURE(args[0]);
      auto r = hpctune_cmd(dir, args);
      CHECK_MESSAGE(r.status.code == 1, r.out);
      CHECK_MESSAGE(contains(r.out, expect), r.out);
      CHECK_MESSAGE(contains(r.out, "holds text where a number belongs (the file was edited, damaged or crafted)"), r.out);
    }
  }
}

TEST_CASE("a database with a view in place of a table: every command exits 1 naming it; the dashboard too") {
  // Before, the schema check compared column names only: a view of the same columns passed it, and
  // `status`, `export` and the dashboard showed the view's rows (`resume` failed later in SQLite).
  TempDir dir;
  const std::string good = finished_campaign(dir, "viewed");
  const std::string db = dir.file("crafted.db");
  fs::copy_file(good, db);
  sql(db, "ALTER TABLE metrics RENAME TO metric_rows; CREATE VIEW metrics AS SELECT * FROM metric_rows");
  const std::string expect = "differs from its schema version " + std::to_string(store::Store::latest_version()) +
                             ": metrics is a view, not a table";
  for (const std::vector<std::string>& args : {std::vector<std::string>{"status", db}, {"export", db, "--format", "csv"},
                                               {"resume", db, "--max-trials", "5"}, {"dashboard", db, "--port", "0"}}) {
    CAPTURE(args[0]);
    auto r = hpctune_cmd(dir, args, 30s);
    CHECK_MESSAGE(r.status.code == 1, r.out);
    CHECK_MESSAGE(contains(r.out, expect), r.out);
  }
}

TEST_CASE("trials.meta with a role or lineage relation that is not text: an error naming the trial and key") {
  TempDir dir;
  const std::string good = finished_campaign(dir, "meta");
  const std::pair<const char*, const char*> cases[] = {
      // Before: the dashboard's stages route of a transfer stage answered 500 "internal error: type must be string".
      {"json_object('role', 5)", "column trials.meta at role: expected a string, got number"},
      // Before: resuming an ensemble or transfer stage ended in "internal error" reading the relation.
      {"json_object('lineage', json_array(json_object('relation', 5, 'trial', 1)))",
       "column trials.meta at lineage[0].relation: expected a string, got number"},
  };
  int n = 0;
  for (const auto& [set, expect] : cases) {
    CAPTURE(set);
    const std::string db = dir.file("meta-" + std::to_string(++n) + ".db");
    fs::copy_file(good, db);
    sql(db, "UPDATE stages SET kind = 'transfer'");
    sql(db, std::string("UPDATE trials SET meta = ") + set + " WHERE id = 2");
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"status", db}, {"trials", db, "--format", "json"}, {"trial", db, "1"}}) {
      CAPTURE(args[0]);
      auto r = hpctune_cmd(dir, args);
      CHECK(r.status.code == 1);
      CHECK_MESSAGE(contains(r.out, expect), r.out);
      CHECK(contains(r.out, "while reading trial 2"));
      CHECK_FALSE(contains(r.out, "internal error"));
    }
    dashboard::Api api({db});
    auto loaded = api.load();
    REQUIRE_FALSE(loaded.ok());
    CHECK(contains(loaded.error().to_string(), expect));
  }
}
