// DeviceAllocator: which GPUs each trainer group holds, on one node (the local backend).
//
// A group (a long-lived worker process; one trial at a time) needs `per_group` = gpus_per_rank x
// ranks devices, all distinct, for as long as it lives. A device holds at most `per_device`
// (resources.trials_per_gpu) groups at once. acquire() gives a group the `per_group` least-loaded
// devices that have room (the lowest ids among equals, so 4 groups over [0, 1, 2, 3] get one each);
// when fewer have room it gives nothing and the group waits (the launcher defers its start) until
// release() frees devices of a group that ended or was lost. Nothing waits forever: while any
// group waits, some group holds devices (when none does, every device is free, and a satisfiable
// allocator gives the first waiting group its devices), and those are freed when that group ends.
// satisfiable() says, before anything starts, whether a group can ever be placed.
//
// Pure bookkeeping: no processes, no clocks. detect_gpus() is resources.gpus: auto.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"

namespace hpctune::launch {

class DeviceAllocator {
 public:
  DeviceAllocator() = default;
  // `devices`: the node's device ids (distinct); `per_device` >= 1; `per_group` >= 0 (0: groups
  // hold no device, and acquire() always gives the empty list).
  DeviceAllocator(std::vector<int> devices, int64_t per_device, int64_t per_group);

  // kConfig when a group needs more devices than the node has (it would wait forever).
  Status satisfiable() const;
  // The devices of `group` (those it already holds, when it does); nullopt when too few have room.
  std::optional<std::vector<int>> acquire(int64_t group);
  // Frees what `group` holds; nothing when it holds nothing.
  void release(int64_t group);
  // What `group` holds (empty when nothing).
  std::vector<int> held(int64_t group) const;
  // Groups on `device` now.
  int64_t load(int device) const;
  int64_t per_group() const noexcept { return per_group_; }

 private:
  std::vector<int> devices_;
  int64_t per_device_ = 1;
  int64_t per_group_ = 0;
  std::map<int, int64_t> load_;
  std::map<int64_t, std::vector<int>> held_;
};

// resources.gpus: auto: the device indices `program --query-gpu=index --format=csv,noheader`
// lists (program: nvidia-smi, found in PATH). None when the program is absent, fails, prints
// anything but one index per line, or runs past `deadline` (then it is killed); `*why` (when
// given) then says which.
std::vector<int> detect_gpus(std::chrono::milliseconds deadline, std::string* why = nullptr,
                             const std::string& program = "nvidia-smi");

}  // namespace hpctune::launch
