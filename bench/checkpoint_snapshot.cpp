// bench_checkpoint_snapshot: the time of a PBT snapshot of a program's checkpoint directory
// (workflow::snapshot_trial_checkpoint: the tree copied into <trial>/pbt/<name>, made read-only,
// the checkpoint directory emptied), beside `cp -r` of the same tree (coreutils: its own reflink
// and copy_file_range), for bench/run-checkpoint-snapshot.
//
//   bench_checkpoint_snapshot --dir DIR [--mib 1024] [--files 4] [--repeats 5]
//
// DIR (made, then removed) must be on the file system measured. Each repeat writes the checkpoint
// files again (random bytes, then fsync'd; the page cache holds them, as a trainer's just-written
// checkpoint), then times one snapshot and one `cp -r`, in turns. Prints one JSON object: every
// time, their medians and the file system's type.
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/rng.h"
#include "workflow/checkpoint_snapshot.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void write_checkpoint(const fs::path& dir, int files, int64_t mib, hpctune::Rng& rng) {
  fs::create_directories(dir);
  std::vector<uint64_t> block(1 << 17);  // 1 MiB
  for (int f = 0; f < files; ++f) {
    const fs::path p = dir / ("shard-" + std::to_string(f) + ".pt");
    std::ofstream out(p, std::ios::binary);
    for (int64_t m = 0; m < mib / files; ++m) {
      for (auto& w : block) w = rng.next();
      out.write(reinterpret_cast<const char*>(block.data()), static_cast<std::streamsize>(block.size() * 8));
    }
  }
  ::sync();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  int64_t mib = 1024;
  int files = 4, repeats = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--dir") dir = argv[i + 1];
    else if (a == "--mib") mib = std::atoll(argv[i + 1]);
    else if (a == "--files") files = std::atoi(argv[i + 1]);
    else if (a == "--repeats") repeats = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "bench_checkpoint_snapshot: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (dir.empty() || mib < files || files < 1 || repeats < 1) {
    std::fprintf(stderr, "usage: bench_checkpoint_snapshot --dir DIR [--mib N >= files] [--files N] [--repeats N]\n");
    return 2;
  }
  const fs::path run = fs::path(dir) / "bench.db.trials", trial = run / "1";
  hpctune::Rng rng(1);
  std::vector<double> snap, cp;
  for (int r = 0; r < repeats; ++r) {
    fs::remove_all(dir);
    write_checkpoint(trial / "checkpoint", files, mib, rng);
    auto t0 = std::chrono::steady_clock::now();
    auto st = hpctune::workflow::snapshot_trial_checkpoint(trial.string(), "checkpoint", (trial / "pbt" / "000-step-2").string(), "bench: ");
    snap.push_back(seconds_since(t0));
    if (!st.ok()) {
      std::fprintf(stderr, "bench_checkpoint_snapshot: %s\n", st.error().message().c_str());
      return 1;
    }
    // The peer: cp -r of the same tree (written again: the snapshot emptied it).
    fs::remove_all(trial / "checkpoint");
    write_checkpoint(trial / "checkpoint", files, mib, rng);
    t0 = std::chrono::steady_clock::now();
    const std::string cmd = "cp -r '" + (trial / "checkpoint").string() + "' '" + (trial / "copy").string() + "'";
    if (std::system(cmd.c_str()) != 0) return 1;
    cp.push_back(seconds_since(t0));
  }
  struct statfs sf {};
  ::statfs(dir.c_str(), &sf);
  (void)hpctune::workflow::remove_snapshot_tree((trial / "pbt").string());
  fs::remove_all(dir);
  json out = {{"mib", mib}, {"files", files}, {"repeats", repeats}, {"fs_magic", static_cast<uint64_t>(sf.f_type)},
              {"snapshot_s", snap}, {"cp_s", cp}, {"snapshot_median_s", median(snap)}, {"cp_median_s", median(cp)}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
