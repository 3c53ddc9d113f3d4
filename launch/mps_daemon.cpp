#include "launch/mps_daemon.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>

#include "common/safe_open.h"
#include "launch/child_process.h"

namespace hpctune::launch {
namespace {

// Room after the base for the directory, "/pipe/" and the sockets the daemon makes there
// (control, control_privileged, the server's): a Unix socket's path takes at most 107 bytes.
constexpr std::size_t kSocketRoom = 64;
constexpr const char* kPrefix = "hpctune-mps-";
constexpr std::size_t kTagChars = 12;  // hex digits of the campaign's tag
constexpr std::size_t kNameRoom = 1 + std::char_traits<char>::length(kPrefix) + kTagChars + 1 + 6;  // "/" prefix tag "-" XXXXXX

// A stable tag of the campaign's identity: the first 12 hex digits of its FNV-1a-64 (the same in
// every build, so that a master of a newer hpctune still finds an older one's daemon).
std::string campaign_tag(const std::string& campaign) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : campaign) h = (h ^ c) * 1099511628211ull;
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < kTagChars; ++i) out += hex[(h >> (60 - 4 * i)) & 0xF];
  return out;
}

// The checks the master's private socket directory passes (protocol/transport_zmq.cpp): a
// directory, not a symbolic link, this user's, no access for group or others.
Status check_private(const std::string& dir) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return err(Errc::kIo, "cannot stat " + dir + ": " + std::strerror(errno));
  if (S_ISLNK(st.st_mode)) return err(Errc::kIo, dir + " is a symbolic link");
  if (!S_ISDIR(st.st_mode)) return err(Errc::kIo, dir + " is not a directory");
  if (st.st_uid != ::geteuid()) return err(Errc::kIo, dir + " belongs to another user (uid " + std::to_string(st.st_uid) + ")");
  if ((st.st_mode & 077) != 0) return err(Errc::kIo, dir + " is open to other users (mode 0" + std::to_string(st.st_mode & 0777) + ")");
  return Status::Ok();
}

// Runs `argv` with `env` added, its output to `out`, waiting at most `deadline`; kFailed naming
// `what` when it cannot start, fails or outlives the deadline (then killed), with its output's tail.
Status run_with_deadline(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                         const std::string& out, bool own_group, std::chrono::milliseconds deadline,
                         const std::string& what) {
  SpawnOptions spawn;
  spawn.argv = argv;
  spawn.env = env;
  spawn.stdout_path = out;
  spawn.stderr_path = "=stdout";
  // `-d` forks the daemon and returns: the daemon must outlive this child's group and this process.
  spawn.new_process_group = own_group;
  spawn.die_with_parent = own_group;
  auto child = ChildProcess::spawn(spawn);
  if (!child.ok()) return err(Errc::kFailed, what + ": " + child.error().message());
  auto status = child->wait_for(deadline);
  std::string tail = tail_file(out, 10);
  while (!tail.empty() && tail.back() == '\n') tail.pop_back();
  const std::string said = tail.empty() ? "" : " (it said: " + tail + ")";
  if (!status) {
    child->terminate(std::chrono::milliseconds(200));
    return err(Errc::kFailed, what + " did not return within " + std::to_string(deadline.count()) + " ms" + said);
  }
  if (!status->success()) return err(Errc::kFailed, what + ": " + status->describe() + said);
  return Status::Ok();
}

// The two variables that reach the daemon of the private directory `dir`.
std::map<std::string, std::string> environment_of(const std::string& dir) {
  return {{kMpsPipeEnv, dir + "/pipe"}, {kMpsLogEnv, dir + "/log"}};
}

// `echo quit | <control>` (the control program reads its commands from stdin) to the daemon of `dir`,
// in its own process group, within `deadline`; its output in dir/log/hpctune-quit.out.
Status send_quit(const std::string& control, const std::string& dir, std::chrono::milliseconds deadline) {
  return run_with_deadline({"/bin/sh", "-c", "echo quit | \"$0\"", control}, environment_of(dir),
                           dir + "/log/hpctune-quit.out", /*own_group=*/true, deadline, "echo quit | " + control);
}

}  // namespace

Result<std::unique_ptr<MpsDaemon>> MpsDaemon::start(const Options& options) {
  std::unique_ptr<MpsDaemon> d(new MpsDaemon(options));
  if (Status made = d->make_directories(); !made.ok()) {
    d->remove_directories();
    return made.error();
  }
  Status started = run_with_deadline({options.control, "-d"}, d->env_, d->dir_ + "/log/hpctune-start.out",
                                     /*own_group=*/false, options.deadline, options.control + " -d");
  if (!started.ok()) {
    // It may have started a daemon before it failed: asked to quit. When quit fails too, the
    // directory is kept (it is what reaches such a daemon) and the message says so.
    d->running_ = true;
    Status quit = d->stop();
    if (quit.ok()) return started.error();
    return err(Errc::kFailed, started.error().message() + "; then " + quit.error().message());
  }
  d->running_ = true;
  return d;
}

MpsDaemon::~MpsDaemon() { (void)stop(); }

Status MpsDaemon::make_directories() {
  std::string base = opt_.base;
  if (base.empty()) {
    HPCTUNE_ASSIGN(base, private_socket_base(kSocketRoom + kNameRoom, "the MPS daemon's pipe directory"));
  }
  const std::string prefix = opt_.campaign.empty() ? kPrefix : kPrefix + campaign_tag(opt_.campaign) + "-";
  if (!opt_.campaign.empty()) stop_leftovers(base, prefix);
  std::string templ = base + "/" + prefix + "XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) {
    return err(Errc::kIo, "cannot make a private directory for the MPS daemon (" + templ + "): " + std::strerror(errno));
  }
  dir_ = templ;
  HPCTUNE_TRY(check_private(dir_));
  for (const char* sub : {"pipe", "log"}) {
    const std::string path = dir_ + "/" + sub;
    if (::mkdir(path.c_str(), 0700) != 0)
      return err(Errc::kIo, "cannot make the MPS daemon's directory " + path + ": " + std::strerror(errno));
    HPCTUNE_TRY(check_private(path));
  }
  env_ = environment_of(dir_);
  return Status::Ok();
}

Status MpsDaemon::stop() {
  if (!running_) {
    remove_directories();
    return Status::Ok();
  }
  running_ = false;
  Status quit = send_quit(opt_.control, dir_, opt_.deadline);
  if (!quit.ok()) {
    // Its pipe directory is what reaches it: kept, so that it can still be stopped by hand.
    const std::string dir = std::exchange(dir_, "");
    return err(Errc::kFailed, quit.error().message() + "; the MPS daemon may still run: stop it with `echo quit | " +
                                  kMpsPipeEnv + "=" + dir + "/pipe " + kMpsControlProgram + "`, then remove " + dir);
  }
  remove_directories();
  return Status::Ok();
}

void MpsDaemon::stop_leftovers(const std::string& base, const std::string& prefix) const {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(base, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() != prefix.size() + 6 || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string dir = entry.path().string();
    // Only a directory of this user's that nobody else can reach: never one planted by another user.
    if (!check_private(dir).ok() || !check_private(dir + "/pipe").ok() || !check_private(dir + "/log").ok()) {
      if (opt_.log) opt_.log("MPS: left alone " + dir + " (not a private directory of this user's)");
      continue;
    }
    Status quit = send_quit(opt_.control, dir, opt_.deadline);
    struct stat st {};
    const bool socket = ::lstat((dir + "/pipe/control").c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
    if (!quit.ok() && socket) {
      if (opt_.log) opt_.log("warning: MPS: a daemon an earlier master of this campaign left in " + dir + " did not quit (" +
                             quit.error().message() + "); its directory is kept");
      continue;
    }
    std::filesystem::remove_all(dir, ec);
    if (opt_.log) opt_.log(quit.ok() ? "MPS: stopped the daemon an earlier master of this campaign left (" + dir + ")"
                                     : "MPS: removed " + dir + ", left by an earlier master of this campaign (no daemon there)");
  }
}

void MpsDaemon::remove_directories() noexcept {
  if (dir_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
  dir_.clear();
}

}  // namespace hpctune::launch
