// The GPU bookkeeping of the local backend (device_allocator.h).
#include "launch/device_allocator.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "common/device_list.h"
#include "common/system.h"
#include "launch/child_process.h"

namespace hpctune::launch {

DeviceAllocator::DeviceAllocator(std::vector<int> devices, int64_t per_device, int64_t per_group)
    : devices_(std::move(devices)), per_device_(std::max<int64_t>(1, per_device)), per_group_(std::max<int64_t>(0, per_group)) {
  std::sort(devices_.begin(), devices_.end());
  devices_.erase(std::unique(devices_.begin(), devices_.end()), devices_.end());
}

Status DeviceAllocator::satisfiable() const {
  if (per_group_ <= static_cast<int64_t>(devices_.size())) return Status::Ok();
  return err(Errc::kConfig, "a trainer group needs " + std::to_string(per_group_) + " GPUs (resources.gpus_per_rank x ranks), " +
                                "but the node has " + std::to_string(devices_.size()) +
                                (devices_.empty() ? "" : " (" + format_device_list(devices_) + ")"));
}

std::optional<std::vector<int>> DeviceAllocator::acquire(int64_t group) {
  if (auto it = held_.find(group); it != held_.end()) return it->second;
  if (per_group_ == 0) return std::vector<int>{};
  std::vector<int> free;
  for (int d : devices_)
    if (load(d) < per_device_) free.push_back(d);
  if (static_cast<int64_t>(free.size()) < per_group_) return std::nullopt;
  // The least-loaded first; among equals the lowest id (stable sort over the sorted ids).
  std::stable_sort(free.begin(), free.end(), [&](int a, int b) { return load(a) < load(b); });
  free.resize(static_cast<std::size_t>(per_group_));
  std::sort(free.begin(), free.end());
  for (int d : free) ++load_[d];
  held_[group] = free;
  return free;
}

void DeviceAllocator::release(int64_t group) {
  auto it = held_.find(group);
  if (it == held_.end()) return;
  for (int d : it->second)
    if (--load_[d] <= 0) load_.erase(d);
  held_.erase(it);
}

std::vector<int> DeviceAllocator::held(int64_t group) const {
  auto it = held_.find(group);
  return it == held_.end() ? std::vector<int>{} : it->second;
}

int64_t DeviceAllocator::load(int device) const {
  auto it = load_.find(device);
  return it == load_.end() ? 0 : it->second;
}

std::vector<int> detect_gpus(std::chrono::milliseconds deadline, std::string* why, const std::string& program) {
  auto say = [&](std::string text) {
    if (why) *why = std::move(text);
    return std::vector<int>{};
  };
  const std::string found = find_in_path(program);
  if (found.empty()) return say(program + " not found in PATH");
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return say(std::string("no pipe for ") + program);
  SpawnOptions spawn;
  spawn.argv = {found, "--query-gpu=index", "--format=csv,noheader"};
  spawn.stdout_fd = fds[1];
  spawn.stderr_path = "/dev/null";
  auto child = ChildProcess::spawn(spawn);
  ::close(fds[1]);
  if (!child.ok()) {
    ::close(fds[0]);
    return say(program + " could not be started: " + child.error().message());
  }
  // Read until end of file or the deadline; at most 64 KiB (an index per line).
  std::string out;
  const auto until = std::chrono::steady_clock::now() + deadline;
  bool late = false;
  while (out.size() < (64u << 10)) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      late = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  if (late) {
    child->terminate(std::chrono::milliseconds(0));
    return say(program + " did not answer within " + std::to_string(deadline.count()) + " ms");
  }
  const auto status = child->wait_for(std::max(std::chrono::milliseconds(100), deadline));
  if (!status) {
    child->terminate(std::chrono::milliseconds(0));
    return say(program + " did not exit within " + std::to_string(deadline.count()) + " ms");
  }
  if (!status->success()) return say(program + " failed (" + status->describe() + ")");
  std::string list;
  std::size_t start = 0;
  while (start < out.size()) {
    std::size_t end = out.find('\n', start);
    if (end == std::string::npos) end = out.size();
    std::string line = out.substr(start, end - start);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    while (!line.empty() && line.front() == ' ') line.erase(0, 1);
    if (line.empty()) {
      start = end + 1;
      continue;
    }
    if (!list.empty()) list += ',';
    list += line;
    start = end + 1;
  }
  auto devices = parse_device_list(list);
  if (!devices) return say(program + " printed something other than device indices");
  if (devices->empty()) return say(program + " lists no GPU");
  return *devices;
}

}  // namespace hpctune::launch
