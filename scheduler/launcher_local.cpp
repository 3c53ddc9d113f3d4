#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <map>

#include "scheduler/child_process.h"
#include "scheduler/launcher.h"

namespace hpctune::scheduler {
namespace {

std::string self_exe() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "hpctune" : p.string();
}

class LocalLauncher final : public Launcher {
 public:
  explicit LocalLauncher(LocalLauncherOptions options) : opt_(std::move(options)) {
    if (opt_.program.empty()) opt_.program = self_exe();
  }
  ~LocalLauncher() override { stop_all(std::chrono::milliseconds(2000)); }

  std::string name() const override { return "local"; }

  Status start(int64_t group) override {
    SpawnOptions spawn;
    spawn.argv = {opt_.program, "worker", "--master", opt_.master_endpoint, "--group", std::to_string(group)};
    if (opt_.resources.threads > 0) {
      spawn.argv.push_back("--threads");
      spawn.argv.push_back(std::to_string(opt_.resources.threads));
    }
    for (const auto& a : opt_.extra_args) spawn.argv.push_back(a);
    if (!opt_.log_dir.empty()) {
      spawn.stdout_path = log_path(group);
      spawn.stderr_path = "=stdout";
    }
    HPCTUNE_ASSIGN(ChildProcess child, ChildProcess::spawn(spawn));
    children_[group] = std::move(child);
    return {};
  }

  std::vector<GroupExit> poll_exits() override {
    std::vector<GroupExit> exits;
    for (auto it = children_.begin(); it != children_.end();) {
      if (auto status = it->second.poll()) {
        GroupExit e;
        e.group = it->first;
        e.how = status->describe();
        e.success = status->success();
        if (!opt_.log_dir.empty()) e.log_tail = tail_file(log_path(it->first), 20);
        exits.push_back(std::move(e));
        it = children_.erase(it);
      } else {
        ++it;
      }
    }
    return exits;
  }

  void stop_all(std::chrono::milliseconds grace) override {
    for (auto& [group, child] : children_) child.signal(SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + grace;
    for (auto& [group, child] : children_) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (!child.wait_for(std::max(left, std::chrono::milliseconds(0)))) child.terminate(std::chrono::milliseconds(0));
    }
    children_.clear();
  }

  std::vector<int64_t> pids() const override {
    std::vector<int64_t> out;
    for (const auto& [group, child] : children_) out.push_back(child.pid());
    return out;
  }

 private:
  std::string log_path(int64_t group) const { return opt_.log_dir + "/group-" + std::to_string(group) + ".log"; }

  LocalLauncherOptions opt_;
  std::map<int64_t, ChildProcess> children_;
};

}  // namespace

std::unique_ptr<Launcher> make_local_launcher(LocalLauncherOptions options) {
  return std::make_unique<LocalLauncher>(std::move(options));
}

}  // namespace hpctune::scheduler
