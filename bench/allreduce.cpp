// bench_allreduce: bus bandwidth of every `trainer.allreduce` implementation against MPI_Allreduce
// and against the bandwidth-optimal bound, on however many ranks mpirun starts (bench/run-allreduce
// uses 2). Writes <out-dir>/allreduce.json and <out-dir>/allreduce.md.
//
// Definitions (those of nccl-tests, doc/PERFORMANCE.md):
//   algbw = S / t                  for a buffer of S bytes reduced in t seconds
//   busbw = algbw * 2(n-1)/n       the bytes each rank must move per second; comparable across n
//   bound = link bandwidth         an allreduce must move 2(n-1)/n * S bytes through each rank's
//                                  link, so t >= 2(n-1)/n * S / link, i.e. busbw <= link.
// The link bandwidth is measured in the same run by a ping-pong of large messages between ranks 0
// and 1 (one direction at a time, S / (round trip / 2)), before and after the allreduce sweep; the
// best median over the message sizes and the two windows is the bound.
//
// Timing: per size, warm-up calls first (they also size the repetition count), then repetitions
// that run every algorithm once, in turn (background load hits all alike). One timed call is:
// refill the buffer, barrier, time the call; its time is the slowest rank's, and the median over
// repetitions is reported. Every result is checked: rank r contributes
// r + 1, so each element must equal n(n+1)/2 exactly.
//
// Data-parallel scaling of the CNN (the `cnn` trainer's default layers on 1 x 28 x 28 inputs, 10
// classes): training images per second of one rank (LocalEngine, the others wait without using a
// core) and of two ranks (the data-parallel engine over an MpiTrainerGroup, `ring`), one compute
// thread per rank, the same global batch, each step a train_batch() plus an SGD update on
// synthetic data. The two are measured in alternation, `--cnn-rounds` times, and the medians count;
// a step's time is the slowest rank's.
//
//   mpirun -np 2 bench_allreduce [--out-dir DIR] [--min-bytes B] [--max-bytes B]
//                                [--segment-bytes B] [--seconds-per-size S]
//                                [--cnn-batch N] [--cnn-steps N] [--cnn-rounds N] [--cnn-only 1]
#include <cblas.h>
#include <mpi.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/rng.h"
#include "nn/blas.h"
#include "collectives/collectives.h"
#include "trainers/gradient_engine.h"
#include "nn/layers.h"
#include "nn/network.h"
#include "collectives/trainer_group_mpi.h"

namespace {

using hpctune::collectives::AllreduceAlgorithm;
using hpctune::collectives::AllreduceOptions;
using hpctune::collectives::Allreducer;
using hpctune::collectives::Communicator;

struct Args {
  std::string out_dir = HPCTUNE_SOURCE_DIR "/bench/results";
  size_t min_bytes = 4 << 10;
  size_t max_bytes = 64 << 20;
  size_t segment_bytes = AllreduceOptions{}.segment_bytes;
  double seconds_per_size = 0.4;
  int64_t cnn_batch = 128;
  int cnn_steps = 24;
  int cnn_rounds = 15;
  bool cnn_only = false;  // skip the allreduce sweep (keeps the previous results' tables out)
};

size_t parse_bytes(const std::string& text) {
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  const std::string unit(end);
  if (unit == "K" || unit == "k") value *= 1 << 10;
  if (unit == "M" || unit == "m") value *= 1 << 20;
  if (unit == "G" || unit == "g") value *= 1 << 30;
  return static_cast<size_t>(value);
}

bool parse_args(int argc, char** argv, Args& args) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "bench_allreduce: %s needs a value\n", flag.c_str());
      return false;
    }
    const std::string value = argv[++i];
    if (flag == "--out-dir") {
      args.out_dir = value;
    } else if (flag == "--min-bytes") {
      args.min_bytes = parse_bytes(value);
    } else if (flag == "--max-bytes") {
      args.max_bytes = parse_bytes(value);
    } else if (flag == "--segment-bytes") {
      args.segment_bytes = parse_bytes(value);
    } else if (flag == "--seconds-per-size") {
      args.seconds_per_size = std::stod(value);
    } else if (flag == "--cnn-batch") {
      args.cnn_batch = std::stoll(value);
    } else if (flag == "--cnn-steps") {
      args.cnn_steps = std::stoi(value);
    } else if (flag == "--cnn-rounds") {
      args.cnn_rounds = std::stoi(value);
    } else if (flag == "--cnn-only") {
      args.cnn_only = value == "1";
    } else {
      std::fprintf(stderr, "bench_allreduce: unknown flag %s\n", flag.c_str());
      return false;
    }
  }
  return args.min_bytes >= sizeof(float) && args.max_bytes >= args.min_bytes;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// Per-repetition times, each replaced by the slowest rank's.
std::vector<double> slowest_rank(std::vector<double> times, MPI_Comm comm) {
  MPI_Allreduce(MPI_IN_PLACE, times.data(), static_cast<int>(times.size()), MPI_DOUBLE, MPI_MAX,
                comm);
  return times;
}

int repetitions_for(double seconds_per_call, double budget, MPI_Comm comm) {
  MPI_Allreduce(MPI_IN_PLACE, &seconds_per_call, 1, MPI_DOUBLE, MPI_MAX, comm);  // agree on it
  const double wanted = budget / std::max(seconds_per_call, 1e-7);
  return static_cast<int>(std::clamp(wanted, 5.0, 300.0));
}

struct PingPong {
  size_t bytes = 0;
  int repetitions = 0;
  double one_way_seconds = 0;  // median
  double bandwidth = 0;        // bytes / one_way_seconds
};

// Ranks 0 and 1 bounce `bytes` back and forth; the other ranks only join the barriers.
PingPong ping_pong(const Communicator& comm, size_t bytes, double budget) {
  std::vector<char> buffer(bytes, 1);
  const int rank = comm.rank();
  const int count = static_cast<int>(bytes);
  auto round_trip = [&] {
    if (rank == 0) {
      MPI_Send(buffer.data(), count, MPI_BYTE, 1, 7, comm.handle());
      MPI_Recv(buffer.data(), count, MPI_BYTE, 1, 7, comm.handle(), MPI_STATUS_IGNORE);
    } else if (rank == 1) {
      MPI_Recv(buffer.data(), count, MPI_BYTE, 0, 7, comm.handle(), MPI_STATUS_IGNORE);
      MPI_Send(buffer.data(), count, MPI_BYTE, 0, 7, comm.handle());
    }
  };
  double warm = 0;
  for (int i = 0; i < 3; ++i) {
    MPI_Barrier(comm.handle());
    const double start = MPI_Wtime();
    round_trip();
    warm = MPI_Wtime() - start;
  }
  PingPong result;
  result.bytes = bytes;
  result.repetitions = repetitions_for(warm, budget, comm.handle());
  std::vector<double> times;
  for (int i = 0; i < result.repetitions; ++i) {
    MPI_Barrier(comm.handle());
    const double start = MPI_Wtime();
    round_trip();
    times.push_back((MPI_Wtime() - start) / 2);
  }
  result.one_way_seconds = median(slowest_rank(times, comm.handle()));
  result.bandwidth = static_cast<double>(bytes) / result.one_way_seconds;
  return result;
}

struct Sample {
  std::string algorithm;
  size_t bytes = 0;
  int repetitions = 0;
  double seconds = 0;  // median
  double algbw = 0;
  double busbw = 0;
  bool correct = true;
};

// Measures every allreducer on `bytes`, interleaved: each repetition runs every algorithm once, so
// background load on a shared machine falls on all of them alike.
// `in_place[a]`: allreducer a sums a buffer in its own shared memory (Allreducer::shared_buffer,
// as the data-parallel engine does with its gradients) instead of ordinary memory.
std::vector<Sample> measure_size(std::vector<Allreducer>& allreducers,
                                 const std::vector<std::string>& names, const std::vector<bool>& in_place,
                                 size_t bytes, double budget, MPI_Comm comm) {
  const int n = allreducers.front().size();
  const size_t count = bytes / sizeof(float);
  std::vector<float> own(count);
  std::vector<std::span<float>> buffers(allreducers.size(), std::span<float>(own));
  std::vector<std::shared_ptr<void>> owners;
  for (size_t a = 0; a < allreducers.size(); ++a) {
    if (!in_place[a]) continue;
    auto shared = allreducers[a].shared_buffer(count);
    if (!shared.ok() || shared->data.empty()) {
      std::fprintf(stderr, "bench_allreduce: no shared buffer for %s (%s)\n", names[a].c_str(),
                   shared.ok() ? allreducers[a].shared_memory().c_str() : shared.error().to_string().c_str());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    buffers[a] = shared->data;
    owners.push_back(shared->owner);
  }
  const float contribution = static_cast<float>(allreducers.front().rank() + 1);
  const float expected = static_cast<float>(n * (n + 1) / 2);
  std::vector<Sample> samples(allreducers.size());

  auto one_call = [&](size_t a, bool check) -> double {
    const std::span<float> data = buffers[a];
    std::fill(data.begin(), data.end(), contribution);
    MPI_Barrier(comm);
    const double start = MPI_Wtime();
    const hpctune::Status status = allreducers[a].sum(data);
    const double seconds = MPI_Wtime() - start;
    if (!status.ok()) {
      std::fprintf(stderr, "bench_allreduce: %s\n", status.error().to_string().c_str());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (check) {
      bool& correct = samples[a].correct;
      for (float value : data) correct = correct && value == expected;
    }
    return seconds;
  };

  double round = 0;  // one call of every algorithm
  for (size_t a = 0; a < allreducers.size(); ++a) {
    double warm = 0;
    for (int i = 0; i < 3; ++i) warm = one_call(a, /*check=*/true);
    round += warm;
  }
  const int repetitions =
      repetitions_for(round, budget * static_cast<double>(allreducers.size()), comm);
  std::vector<std::vector<double>> times(allreducers.size());
  for (int i = 0; i < repetitions; ++i) {
    for (size_t a = 0; a < allreducers.size(); ++a) times[a].push_back(one_call(a, i == 0));
  }
  for (size_t a = 0; a < allreducers.size(); ++a) {
    Sample& sample = samples[a];
    sample.algorithm = names[a];
    sample.bytes = count * sizeof(float);
    sample.repetitions = repetitions;
    sample.seconds = median(slowest_rank(times[a], comm));
    int correct = sample.correct ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &correct, 1, MPI_INT, MPI_MIN, comm);
    sample.correct = correct == 1;
    sample.algbw = static_cast<double>(sample.bytes) / sample.seconds;
    sample.busbw = sample.algbw * 2.0 * (n - 1) / n;
  }
  return samples;
}

// Single-core SGEMM throughput (OpenBLAS, 512^3, one thread), GFLOP/s in each of `quarters`
// quarter seconds: how fast this core is right now. On a shared or virtual machine the cores' speed
// drifts, and a data-parallel step waits for the slower rank.
std::vector<double> sgemm_gflops(int quarters) {
  const int n = 512;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  std::vector<double> rates;
  while (static_cast<int>(rates.size()) < quarters) {
    const auto start = std::chrono::steady_clock::now();
    int calls = 0;
    double elapsed = 0;
    while (elapsed < 0.25) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
      ++calls;
      elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    rates.push_back(2.0 * n * n * n * calls / elapsed / 1e9);
  }
  return rates;
}

// Waits for every rank of `comm` without holding a core (a plain MPI_Barrier spins).
void idle_barrier(MPI_Comm comm) {
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Ibarrier(comm, &request);
  for (int done = 0; !done;) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (!done) usleep(200);
  }
}

// Seconds per training step of `engine` (train_batch + SGD), over `steps` steps after one warm-up
// step; the slowest rank of `comm` counts.
double time_steps(hpctune::trainers::GradientEngine& engine, const std::vector<float>& x,
                  const std::vector<int32_t>& y, int64_t batch, int steps, MPI_Comm comm) {
  hpctune::Rng rng(3);
  auto step = [&] {
    auto stats = engine.train_batch(x.data(), y.data(), batch, rng);
    if (!stats.ok()) {
      std::fprintf(stderr, "bench_allreduce: %s\n", stats.error().to_string().c_str());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    auto p = engine.params();
    auto g = engine.grads();
    for (size_t i = 0; i < p.size(); ++i) p[i] -= 0.01f * g[i];
  };
  step();
  idle_barrier(comm);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
  MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, comm);
  return seconds;
}

// The CNN's data-parallel scaling from 1 to 2 ranks (see the top of this file). Collective over
// `world`; ranks beyond the second only wait.
nlohmann::json cnn_scaling(const Args& args, MPI_Comm world) {
  using namespace hpctune::trainers;
  using namespace hpctune::nn;
  using namespace hpctune::collectives;
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  blas_set_threads(1);
  dnnl_set_threads(1);
  const nlohmann::json layers = nlohmann::json::parse(R"([
    {"kind": "conv", "filters": 32, "kernel": 5}, {"kind": "maxpool", "size": 2},
    {"kind": "conv", "filters": 64, "kernel": 5}, {"kind": "maxpool", "size": 2},
    {"kind": "dense", "units": 1024}])");
  auto specs = parse_layer_specs(layers);
  auto net = specs.ok() ? Network::create(Shape{1, 28, 28}, *specs, 10) : hpctune::Result<Network>(specs.error());
  if (!net.ok()) {
    std::fprintf(stderr, "bench_allreduce: %s\n", net.error().to_string().c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  hpctune::Rng init(1);
  net->init(init);
  const int64_t batch = args.cnn_batch;
  std::vector<float> x(static_cast<size_t>(batch * 784));
  std::vector<int32_t> y(static_cast<size_t>(batch));
  hpctune::Rng data(2);
  for (auto& v : x) v = static_cast<float>(data.uniform());
  for (auto& v : y) v = static_cast<int32_t>(data.next() % 10);

  MPI_Comm pair = MPI_COMM_NULL, solo = MPI_COMM_NULL;
  MPI_Comm_split(world, rank < 2 ? 0 : MPI_UNDEFINED, rank, &pair);
  MPI_Comm_split(world, rank == 0 ? 0 : MPI_UNDEFINED, rank, &solo);
  std::unique_ptr<MpiTrainerGroup> group;
  std::unique_ptr<GradientEngine> engine2;
  if (pair != MPI_COMM_NULL) {
    MpiGroupOptions go;
    go.data = 2;
    auto g = MpiTrainerGroup::create(pair, go);
    if (!g.ok()) MPI_Abort(MPI_COMM_WORLD, 1);
    group = std::move(g).value();
    auto e = make_gradient_engine(*net, group.get());
    if (!e.ok()) MPI_Abort(MPI_COMM_WORLD, 1);
    engine2 = std::move(e).value();
  }
  LocalEngine engine1(*net);
  const std::string shared_memory = group ? group->shared_memory() : "";
  // The cores' speed before the rounds: rank 0 alone, then ranks 0 and 1 at once.
  constexpr int kQuarters = 8;
  std::vector<double> alone, together0, together1;
  if (rank == 0) alone = sgemm_gflops(kQuarters);
  idle_barrier(world);
  if (rank < 2) {
    const std::vector<double> mine = sgemm_gflops(kQuarters);
    std::vector<double> theirs(kQuarters);
    MPI_Sendrecv(mine.data(), kQuarters, MPI_DOUBLE, 1 - rank, 11, theirs.data(), kQuarters, MPI_DOUBLE, 1 - rank, 11,
                 pair, MPI_STATUS_IGNORE);
    together0 = rank == 0 ? mine : theirs;
    together1 = rank == 0 ? theirs : mine;
  }
  idle_barrier(world);
  std::vector<double> one, two;
  for (int round = 0; round < args.cnn_rounds; ++round) {
    if (solo != MPI_COMM_NULL) one.push_back(time_steps(engine1, x, y, batch, args.cnn_steps, solo));
    idle_barrier(world);
    if (pair != MPI_COMM_NULL) two.push_back(time_steps(*engine2, x, y, batch, args.cnn_steps, pair));
    idle_barrier(world);
  }
  group.reset();
  if (pair != MPI_COMM_NULL) MPI_Comm_free(&pair);
  if (solo != MPI_COMM_NULL) MPI_Comm_free(&solo);
  if (rank != 0) return nullptr;
  const double s1 = median(one), s2 = median(two);
  const double ips1 = static_cast<double>(batch) / s1, ips2 = static_cast<double>(batch) / s2;
  // Each round times 1 rank and then 2 ranks back to back, so a round's ratio compares the two
  // under the same machine conditions; the median of those ratios is robust to the machine's speed
  // drifting between rounds, which the ratio of the two medians is not.
  std::vector<double> ratios;
  for (size_t i = 0; i < std::min(one.size(), two.size()); ++i) ratios.push_back(one[i] / two[i]);
  const double paired = median(ratios);
  std::printf("cnn data parallel: 1 rank %.1f images/s, 2 ranks %.1f images/s, speed-up %.2fx (paired median %.2fx)\n",
              ips1, ips2, ips2 / ips1, paired);
  return nlohmann::json{{"network", net->describe()},
          {"params", net->num_params()},
          {"global_batch", batch},
          {"threads_per_rank", 1},
          {"sgemm_gflops_per_core", {{"rank0_alone", alone}, {"rank0_together", together0}, {"rank1_together", together1}}},
          {"allreduce", hpctune::collectives::allreduce_algorithm_name(MpiGroupOptions{}.algorithm)},
          {"shared_memory", shared_memory},
          {"steps_per_round", args.cnn_steps},
          {"rounds", args.cnn_rounds},
          {"seconds_per_step", {{"1", one}, {"2", two}}},
          {"images_per_second", {{"1", ips1}, {"2", ips2}}},
          {"speedup", ips2 / ips1},
          {"speedup_per_round", ratios},
          {"speedup_paired_median", paired},
          {"target_speedup", 1.7}};
}

std::string human_bytes(size_t bytes) {
  if (bytes >= (1 << 20) && bytes % (1 << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= (1 << 10) && bytes % (1 << 10) == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

std::string fixed(double value, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, value);
  return text;
}

std::string markdown(const nlohmann::json& report) {
  const auto& algorithms = report["algorithms"];
  const double link = report["link_bandwidth_GBps"].get<double>();
  std::ostringstream md;
  md << "# Allreduce bus bandwidth\n\n"
     << "Generated by `bench/run-allreduce` (bench/allreduce.cpp) on "
     << report["date"].get<std::string>() << ". Do not edit by hand; re-run the benchmark.\n\n"
     << "- Ranks: " << report["ranks"] << " on one machine (" << report["host"]["cpus"]
     << " CPUs online, load average " << report["host"]["loadavg_before"].get<std::string>()
     << " before the run, scheduling priority nice " << report["host"]["nice"] << " (autogroup "
     << report["host"]["autogroup_nice"] << ")"
     << "; the cores are shared with other work), " << report["mpi_library"].get<std::string>()
     << ", transports self + vader (shared memory).\n"
     << "- busbw = algbw × 2(n−1)/n (nccl-tests); the bound is the link bandwidth, measured in "
        "the same run by a ping-pong of large messages between ranks 0 and 1, before and after "
        "the sweep (the best median counts): **"
     << fixed(link, 2) << " GB/s**. GB = 10^9 bytes.\n"
     << "- Median over repetitions after 3 warm-up calls; the algorithms take turns within each "
        "repetition, and each call is timed on the slowest rank. Pipelining segment "
     << human_bytes(report["segment_bytes"].get<size_t>())
     << ". Every result was checked exactly (all correct: "
     << (report["all_correct"].get<bool>() ? "yes" : "NO") << ").\n\n";

  md << "## Link bandwidth (ping-pong, one way)\n\n"
        "| measured | message | median one-way time (µs) | GB/s |\n|---|---:|---:|---:|\n";
  for (const auto& p : report["ping_pong"]) {
    md << "| " << p["window"].get<std::string>() << " the sweep | "
       << human_bytes(p["bytes"].get<size_t>()) << " | "
       << fixed(p["one_way_seconds"].get<double>() * 1e6, 1) << " | "
       << fixed(p["bandwidth_GBps"].get<double>(), 2) << " |\n";
  }

  md << "\n## Bus bandwidth, GB/s (fraction of the bound)\n\n| size |";
  for (const auto& a : algorithms) md << " " << a.get<std::string>() << " |";
  md << " bound |\n|---:|";
  for (size_t i = 0; i <= algorithms.size(); ++i) md << "---:|";
  md << "\n";
  for (const auto& row : report["by_size"]) {
    md << "| " << human_bytes(row["bytes"].get<size_t>()) << " |";
    for (const auto& a : algorithms) {
      const double busbw = row["busbw_GBps"][a.get<std::string>()].get<double>();
      md << " " << fixed(busbw, 2) << " (" << fixed(100 * busbw / link, 0) << "%) |";
    }
    md << " " << fixed(link, 2) << " |\n";
  }

  // A table with a row per size and a column per algorithm, each cell from `cell(row, algorithm)`.
  const auto by_size_table = [&](const std::string& title, const auto& cell) {
    md << "\n## " << title << "\n\n| size |";
    for (const auto& a : algorithms) md << " " << a.get<std::string>() << " |";
    md << "\n|---:|";
    for (size_t i = 0; i < algorithms.size(); ++i) md << "---:|";
    md << "\n";
    for (const auto& row : report["by_size"]) {
      md << "| " << human_bytes(row["bytes"].get<size_t>()) << " |";
      for (const auto& a : algorithms) md << " " << cell(row, a.template get<std::string>()) << " |";
      md << "\n";
    }
  };
  by_size_table("Relative to MPI_Allreduce (busbw ratio; > 1 is faster)", [](const nlohmann::json& row, const std::string& a) {
    return fixed(row["busbw_GBps"][a].get<double>() / row["busbw_GBps"]["mpi"].get<double>(), 2);
  });
  by_size_table("Median time per call, µs", [](const nlohmann::json& row, const std::string& a) {
    return fixed(row["seconds"][a].get<double>() * 1e6, 1);
  });

  const auto& largest = report["by_size"].back();
  md << "\n## Summary\n\n";
  for (const auto& a : algorithms) {
    const std::string name = a.get<std::string>();
    const double busbw = largest["busbw_GBps"][name].get<double>();
    md << "- `" << name << "` at " << human_bytes(largest["bytes"].get<size_t>()) << ": "
       << fixed(busbw, 2) << " GB/s busbw, " << fixed(100 * busbw / link, 0) << "% of the bound, "
       << fixed(busbw / largest["busbw_GBps"]["mpi"].get<double>(), 2) << "x MPI_Allreduce.\n";
  }
  const auto& last_ping = report["ping_pong"].back();
  md << "- For comparison, the ping-pong of " << human_bytes(last_ping["bytes"].get<size_t>())
     << " messages reached " << fixed(last_ping["bandwidth_GBps"].get<double>(), 2)
     << " GB/s one way: copies of that size run at memory rather than cache speed.\n";
  md << "- Fastest per size:";
  for (const auto& row : report["by_size"]) {
    std::string best;
    double best_busbw = -1;
    for (const auto& a : algorithms) {
      const double busbw = row["busbw_GBps"][a.get<std::string>()].get<double>();
      if (busbw > best_busbw) {
        best_busbw = busbw;
        best = a.get<std::string>();
      }
    }
    md << (&row == &report["by_size"].front() ? " " : ", ")
       << human_bytes(row["bytes"].get<size_t>()) << " `" << best << "`";
  }
  md << ".";
  md << "\n\nReading the numbers: on one machine the link is a memory copy (Open MPI's vader\n"
     << "transport with its CMA single copy). The bound counts that copy alone, but an allreduce\n"
     << "must also add, and over shared memory the copy runs inside the receiver's progress call,\n"
     << "so copying and adding take turns on the same core. Small sizes are latency-bound. On a\n"
     << "machine whose cores are busy with other work, a rank that loses its core holds its peer\n"
     << "up for a scheduler time slice (milliseconds); see the priority recorded above.\n\n"
     << "`hierarchical` moves no messages inside a node: its ranks share memory, and each reduces its\n"
     << "part by reading that part of every rank's slot. Above, `hierarchical` sums an ordinary\n"
     << "buffer, which up to 128 KiB is copied into the slot and out again, and above goes by messages\n"
     << "(the ring inside the node); `hierarchical in place` sums a buffer that lives in the slot\n"
     << "(Allreducer::shared_buffer), as the data-parallel engine's gradients do.\n"
     << "The bound, a message's one-way copy, does not describe that path: in place, a rank reads\n"
     << "2(n-1)/n of the buffer from its peers and writes as much, with no copy in between.\n";

  md << "\n## Data-parallel scaling of the CNN, 1 → 2 ranks\n\n";
  const auto& cnn = report["cnn_data_parallel_scaling"];
  if (cnn.is_null()) {
    md << "Not measured in this run.\n";
    return md.str();
  }
  const double speedup = cnn["speedup"].get<double>();
  md << "The `cnn` trainer's default network (" << cnn["params"].get<int64_t>() << " parameters), global batch "
     << cnn["global_batch"].get<int64_t>() << ", one compute thread per rank, train_batch + SGD on synthetic data; "
     << "1 rank: LocalEngine; 2 ranks: the data-parallel engine with the default `trainer.allreduce` (`"
     << cnn["allreduce"].get<std::string>() << "`, shared memory " << cnn["shared_memory"].get<std::string>()
     << "). Median of " << cnn["rounds"].get<int>()
     << " alternating rounds of " << cnn["steps_per_round"].get<int>() << " steps.\n\n"
     << "| ranks | images/s | s/step (rounds) |\n|---:|---:|---|\n";
  for (const char* r : {"1", "2"}) {
    md << "| " << r << " | " << fixed(cnn["images_per_second"][r].get<double>(), 1) << " | ";
    for (const auto& t : cnn["seconds_per_step"][r]) md << fixed(t.get<double>(), 3) << " ";
    md << "|\n";
  }
  const double paired = cnn["speedup_paired_median"].get<double>();
  md << "\nSpeed-up, ratio of the medians above: **" << fixed(speedup, 2) << "x**. Per round (1-rank time / 2-rank "
     << "time of the same round): ";
  for (const auto& r : cnn["speedup_per_round"]) md << fixed(r.get<double>(), 2) << " ";
  md << "; their median: **" << fixed(paired, 2) << "x**. Target >= 1.7x: "
     << (speedup >= 1.7 && paired >= 1.7 ? "met by both" : (speedup >= 1.7 || paired >= 1.7 ? "met by one of the two only" : "NOT met"))
     << ".\n\nWith only 2 cores, both shared with other work (see the load average above), two ranks compete with "
     << "everything else on the machine, and its speed drifts between rounds; the number is only meaningful on idle "
     << "cores.\n";
  const auto& gemm = cnn["sgemm_gflops_per_core"];
  auto series = [&](const nlohmann::json& rates) {
    std::vector<double> v = rates.get<std::vector<double>>();
    if (v.empty()) return std::string("-");
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    return fixed(median(v), 1) + " (" + fixed(*lo, 1) + " to " + fixed(*hi, 1) + ")";
  };
  md << "\nHow fast the cores were just before the rounds: single-thread OpenBLAS SGEMM (512³), GFLOP/s per quarter "
     << "second, median (range): rank 0 alone " << series(gemm["rank0_alone"]) << "; both at once, rank 0 "
     << series(gemm["rank0_together"]) << " and rank 1 " << series(gemm["rank1_together"])
     << ". A data-parallel step waits for the slower rank, so cores whose speed drifts apart cost the 2-rank side "
     << "more than the 1-rank side.\n";
  return md.str();
}

std::string read_loadavg() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

// The scheduler autogroup's nice value ("/autogroup-13 nice -20" -> -20); 0 without autogroups.
int read_autogroup_nice() {
  std::ifstream in("/proc/self/autogroup");
  std::string group, word;
  int nice = 0;
  if (in >> group >> word >> nice) return nice;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  auto environment = hpctune::collectives::MpiEnvironment::init(&argc, &argv);
  if (!environment.ok()) {
    std::fprintf(stderr, "bench_allreduce: %s\n", environment.error().to_string().c_str());
    return 1;
  }
  Args args;
  if (!parse_args(argc, argv, args)) return 2;
  auto world = Communicator::duplicate(MPI_COMM_WORLD);
  if (!world.ok()) {
    std::fprintf(stderr, "bench_allreduce: %s\n", world.error().to_string().c_str());
    return 1;
  }
  const int rank = world->rank(), ranks = world->size();
  if (ranks < 2) {
    if (rank == 0) std::fprintf(stderr, "bench_allreduce: run it on at least 2 ranks\n");
    return 2;
  }
  const std::string loadavg = read_loadavg();
  if (args.cnn_only) {
    nlohmann::json cnn = cnn_scaling(args, world->handle());
    if (rank == 0) {
      std::filesystem::create_directories(args.out_dir);
      std::ofstream(args.out_dir + "/cnn_scaling.json") << nlohmann::json{{"loadavg_before", loadavg}, {"cnn", cnn}}.dump(2)
                                                        << "\n";
    }
    return 0;
  }

  std::vector<PingPong> pings;
  double link = 0;
  for (size_t bytes : {size_t{1} << 20, size_t{4} << 20, size_t{16} << 20, size_t{64} << 20}) {
    pings.push_back(ping_pong(*world, bytes, args.seconds_per_size));
    link = std::max(link, pings.back().bandwidth);
  }

  const size_t first_window = pings.size();

  std::vector<size_t> sizes;
  for (size_t bytes = args.min_bytes; bytes <= args.max_bytes; bytes *= 2) sizes.push_back(bytes);

  nlohmann::json by_size = nlohmann::json::array();
  for (size_t bytes : sizes) {
    by_size.push_back({{"bytes", bytes / sizeof(float) * sizeof(float)},
                       {"busbw_GBps", nlohmann::json::object()},
                       {"seconds", nlohmann::json::object()}});
  }
  nlohmann::json samples = nlohmann::json::array();
  nlohmann::json algorithms = nlohmann::json::array();
  bool all_correct = true;
  std::vector<Allreducer> allreducers;
  std::vector<std::string> names;
  std::vector<bool> in_place;
  std::vector<AllreduceAlgorithm> variants(std::begin(hpctune::collectives::kAllreduceAlgorithms),
                                           std::end(hpctune::collectives::kAllreduceAlgorithms));
  variants.push_back(AllreduceAlgorithm::kHierarchical);  // again, on its own shared memory
  for (AllreduceAlgorithm algorithm : variants) {
    in_place.push_back(names.size() >= std::size(hpctune::collectives::kAllreduceAlgorithms));
    names.push_back(std::string(hpctune::collectives::allreduce_algorithm_name(algorithm)) +
                    (in_place.back() ? " in place" : ""));
    algorithms.push_back(names.back());
    AllreduceOptions options;
    options.algorithm = algorithm;
    options.segment_bytes = args.segment_bytes;
    auto allreducer = Allreducer::create(world->handle(), options);
    if (!allreducer.ok()) {
      std::fprintf(stderr, "bench_allreduce: %s\n", allreducer.error().to_string().c_str());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    allreducers.push_back(std::move(allreducer).value());
  }
  std::vector<Sample> measured;
  for (size_t i = 0; i < sizes.size(); ++i) {
    for (const Sample& s :
         measure_size(allreducers, names, in_place, sizes[i], args.seconds_per_size, world->handle())) {
      measured.push_back(s);
      by_size[i]["busbw_GBps"][s.algorithm] = s.busbw / 1e9;
      by_size[i]["seconds"][s.algorithm] = s.seconds;
    }
  }

  const nlohmann::json cnn = cnn_scaling(args, world->handle());

  // The link is measured again after the sweep; the better of the two windows is the bound, so
  // that background load cannot make the bound look lower than the link really is.
  for (size_t bytes : {size_t{16} << 20, size_t{64} << 20}) {
    pings.push_back(ping_pong(*world, bytes, args.seconds_per_size));
    link = std::max(link, pings.back().bandwidth);
  }

  for (const Sample& s : measured) {
    all_correct = all_correct && s.correct;
    samples.push_back({{"algorithm", s.algorithm},
                       {"bytes", s.bytes},
                       {"repetitions", s.repetitions},
                       {"median_seconds", s.seconds},
                       {"algbw_GBps", s.algbw / 1e9},
                       {"busbw_GBps", s.busbw / 1e9},
                       {"bound_busbw_GBps", link / 1e9},
                       {"fraction_of_bound", s.busbw / link},
                       {"correct", s.correct}});
    if (rank == 0) {
      std::printf("%-18s %10zu B  %9.1f us  busbw %6.2f GB/s  (%3.0f%% of bound)%s\n",
                  s.algorithm.c_str(), s.bytes, s.seconds * 1e6, s.busbw / 1e9,
                  100 * s.busbw / link, s.correct ? "" : "  WRONG RESULT");
    }
  }
  // busbw relative to MPI_Allreduce of the same size.
  for (auto& sample : samples) {
    for (const auto& row : by_size) {
      if (row["bytes"] == sample["bytes"]) {
        sample["vs_mpi"] =
            sample["busbw_GBps"].get<double>() / row["busbw_GBps"]["mpi"].get<double>();
      }
    }
  }

  if (rank == 0) {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    char library[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int length = 0;
    MPI_Get_library_version(library, &length);
    std::string library_line(library, static_cast<size_t>(length));
    library_line = library_line.substr(0, library_line.find_first_of(",\n"));
    char date[32] = {};
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));

    nlohmann::json ping_json = nlohmann::json::array();
    for (size_t i = 0; i < pings.size(); ++i) {
      const PingPong& p = pings[i];
      ping_json.push_back({{"window", i < first_window ? "before" : "after"},
                           {"bytes", p.bytes},
                           {"repetitions", p.repetitions},
                           {"one_way_seconds", p.one_way_seconds},
                           {"bandwidth_GBps", p.bandwidth / 1e9}});
    }
    nlohmann::json report = {
        {"benchmark", "allreduce"},
        {"date", date},
        {"ranks", ranks},
        {"host",
         {{"name", host},
          {"cpus", sysconf(_SC_NPROCESSORS_ONLN)},
          {"loadavg_before", loadavg},
          {"nice", getpriority(PRIO_PROCESS, 0)},
          {"autogroup_nice", read_autogroup_nice()}}},
        {"mpi_library", library_line},
        {"segment_bytes", args.segment_bytes},
        {"link_bandwidth_GBps", link / 1e9},
        {"ping_pong", ping_json},
        {"algorithms", algorithms},
        {"all_correct", all_correct},
        {"samples", samples},
        {"by_size", by_size},
        {"cnn_data_parallel_scaling", cnn},
    };
    std::error_code mkdir_error;
    std::filesystem::create_directories(args.out_dir, mkdir_error);
    const std::string json_path = args.out_dir + "/allreduce.json";
    const std::string md_path = args.out_dir + "/allreduce.md";
    std::ofstream json_file(json_path), md_file(md_path);
    json_file << report.dump(2) << "\n";
    md_file << markdown(report);
    if (!json_file.flush() || !md_file.flush()) {
      std::fprintf(stderr, "bench_allreduce: cannot write %s or %s\n", json_path.c_str(),
                   md_path.c_str());
      return 1;
    }
    std::printf("wrote %s and %s\n", json_path.c_str(), md_path.c_str());
  }
  return all_correct ? 0 : 1;
}
