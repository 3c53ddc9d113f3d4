// GPU device lists as the launchers hand them to a trainer group: "0,2,3", the form of
// CUDA_VISIBLE_DEVICES. Header-only: the local launcher writes them, the worker ranks and the
// command trainer's rank script (trainers/rank_environment.cpp, the same rule in sh) read them.
//
// A group of R ranks with g GPUs per rank gets R x g devices, listed in HPCTUNE_GPUS, with g in
// HPCTUNE_GPUS_PER_RANK; local rank r sees devices [r*g, (r+1)*g) of that list as its
// CUDA_VISIBLE_DEVICES. A group of one rank sees the whole list.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hpctune {

// The group's devices (the local launcher sets it; a program may read it too).
inline constexpr const char* kGpusEnv = "HPCTUNE_GPUS";
// GPUs per rank of the group (resources.gpus_per_rank).
inline constexpr const char* kGpusPerRankEnv = "HPCTUNE_GPUS_PER_RANK";

// "0,2,3" for {0, 2, 3}; "" for none.
inline std::string format_device_list(const std::vector<int>& devices) {
  std::string out;
  for (int d : devices) {
    if (!out.empty()) out += ',';
    out += std::to_string(d);
  }
  return out;
}

// {0, 2, 3} for "0,2,3"; nullopt for anything but comma-separated ids 0..65535 (at most 1024).
inline std::optional<std::vector<int>> parse_device_list(std::string_view text) {
  std::vector<int> out;
  if (text.empty()) return out;
  std::size_t i = 0;
  while (i <= text.size()) {
    const std::size_t end = std::min(text.find(',', i), text.size());
    if (end == i || end - i > 5 || out.size() >= 1024) return std::nullopt;
    int value = 0;
    for (std::size_t k = i; k < end; ++k) {
      if (text[k] < '0' || text[k] > '9') return std::nullopt;
      value = value * 10 + (text[k] - '0');
    }
    if (value > 65535) return std::nullopt;
    out.push_back(value);
    i = end + 1;
  }
  return out;
}

// The devices of local rank `rank` when each rank has `per_rank` of `group`: [rank*per_rank,
// (rank+1)*per_rank); empty when the group has too few (or per_rank < 1).
inline std::vector<int> rank_devices(const std::vector<int>& group, int64_t per_rank, int64_t rank) {
  if (per_rank < 1 || rank < 0) return {};
  const auto first = static_cast<std::size_t>(rank * per_rank);
  if (first + static_cast<std::size_t>(per_rank) > group.size()) return {};
  return std::vector<int>(group.begin() + static_cast<std::ptrdiff_t>(first),
                          group.begin() + static_cast<std::ptrdiff_t>(first + static_cast<std::size_t>(per_rank)));
}

// In a rank of a multi-rank group (before anything may initialise CUDA): CUDA_VISIBLE_DEVICES
// becomes this rank's slice of HPCTUNE_GPUS, by `local_rank`. Nothing when the group has no
// devices. Returns the slice set ("" when none).
inline std::string narrow_visible_devices_to_rank(int64_t local_rank) {
  const char* list = std::getenv(kGpusEnv);
  const char* per = std::getenv(kGpusPerRankEnv);
  if (list == nullptr || per == nullptr || *list == '\0') return "";
  const auto group = parse_device_list(list);
  const auto per_rank = parse_device_list(per);  // one number
  if (!group || !per_rank || per_rank->size() != 1) return "";
  const std::string mine = format_device_list(rank_devices(*group, (*per_rank)[0], local_rank));
  if (!mine.empty()) ::setenv("CUDA_VISIBLE_DEVICES", mine.c_str(), 1);
  return mine;
}

}  // namespace hpctune
