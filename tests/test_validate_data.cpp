// `hpctune validate` against the data set the built-in classifiers read (mlp, cnn: TrainerCapabilities::
// data_rules, trainers/idx_header.h): a `data` that is not an IDX directory, `classes` the data lacks,
// and a cnn whose layers shrink the images below a kernel or a pooling window are refused with their
// place, from the headers and label files alone. Before, each passed validate and failed every trial.
// The data sets are small IDX directories written here (plain and gzipped files).
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "config/config.h"
#include "tests/temp_dir.h"

using hpctune::testing::TempDir;
namespace config = hpctune::config;

namespace {

void put_be32(std::vector<uint8_t>& out, uint32_t v) {
  for (int shift : {24, 16, 8, 0}) out.push_back(static_cast<uint8_t>(v >> shift));
}

std::vector<uint8_t> images_bytes(uint32_t count, uint32_t rows, uint32_t cols) {
  std::vector<uint8_t> out{0, 0, 0x08, 3};
  put_be32(out, count);
  put_be32(out, rows);
  put_be32(out, cols);
  out.resize(out.size() + static_cast<size_t>(count) * rows * cols, 7);
  return out;
}

std::vector<uint8_t> labels_bytes(const std::vector<uint8_t>& labels) {
  std::vector<uint8_t> out{0, 0, 0x08, 1};
  put_be32(out, static_cast<uint32_t>(labels.size()));
  out.insert(out.end(), labels.begin(), labels.end());
  return out;
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes, bool gzip) {
  if (gzip) {
    gzFile f = gzopen((path + ".gz").c_str(), "wb");
    REQUIRE(f != nullptr);
    REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
    REQUIRE(gzclose(f) == Z_OK);
    return;
  }
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(f.good());
}

// An IDX directory `name` under `dir`: side x side images, the training labels `train` (the test
// file has labels 0 and 1), gzipped or plain.
std::string idx_dir(const TempDir& dir, const std::string& name, uint32_t side, const std::vector<uint8_t>& train,
                    bool gzip = false) {
  const std::string d = dir.file(name);
  std::filesystem::create_directories(d);
  write_bytes(d + "/train-images-idx3-ubyte", images_bytes(static_cast<uint32_t>(train.size()), side, side), gzip);
  write_bytes(d + "/train-labels-idx1-ubyte", labels_bytes(train), gzip);
  write_bytes(d + "/t10k-images-idx3-ubyte", images_bytes(2, side, side), gzip);
  write_bytes(d + "/t10k-labels-idx1-ubyte", labels_bytes({0, 1}), gzip);
  return d;
}

const std::string kHead = "name: t\nobjective: {metric: val_accuracy}\nsearch: {max_trials: 2}\n";

std::string error_of(const std::string& text) {
  auto parsed = config::parse_config(text, "test.yaml");
  REQUIRE_MESSAGE(!parsed.ok(), "parsed although it should not:\n" << text);
  CHECK(parsed.error().code() == hpctune::Errc::kConfig);
  CHECK(parsed.error().message().find("internal error") == std::string::npos);
  return parsed.error().message();
}

bool accepted(const std::string& text) {
  auto parsed = config::parse_config(text, "test.yaml");
  if (!parsed.ok()) MESSAGE(parsed.error().message());
  return parsed.ok();
}

bool starts(const std::string& text, const std::string& head) { return text.rfind(head, 0) == 0; }
bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("validate: a classifier's data that is not an IDX directory is refused at trainer.data") {
  TempDir dir;
  const std::string good = idx_dir(dir, "good", 6, {0, 1, 2, 3, 0, 1});
  CHECK(accepted(kHead + "trainer: {kind: mlp, data: " + good + "}\n"));
  CHECK(accepted(kHead + "trainer: {kind: cnn, data: " + idx_dir(dir, "gz", 6, {0, 1, 1}, true) +
                 ", layers: [{kind: conv, filters: 2, kernel: 3}]}\n"));

  const std::string missing = error_of(kHead + "trainer: {kind: mlp, data: " + dir.file("nowhere") + "}\n");
  CHECK(starts(missing, "test.yaml:4:22: trainer.data: dataset directory '" + dir.file("nowhere") + "' does not exist"));
  CHECK(has(missing, "every trial would fail"));
  std::filesystem::create_directories(dir.file("empty"));
  CHECK(has(error_of(kHead + "trainer: {kind: mlp, data: " + dir.file("empty") + "}\n"),
            "trainer.data: '" + dir.file("empty") + "/train-images-idx3-ubyte.gz': no such file"));

  // Not IDX: text where the images should be, a label file short of its header's count, counts that
  // differ, training and test images of different sizes, labels of a single class.
  const std::string text = idx_dir(dir, "text", 6, {0, 1});
  dir.write("text/train-images-idx3-ubyte", "this is not an IDX file\n");
  CHECK(has(error_of(kHead + "trainer: {kind: mlp, data: " + text + "}\n"), "bad magic number 0x74686973"));
  const std::string short_labels = idx_dir(dir, "short", 6, {0, 1});
  std::vector<uint8_t> truncated = labels_bytes({0, 1, 1});
  truncated.pop_back();
  write_bytes(short_labels + "/train-labels-idx1-ubyte", truncated, false);
  CHECK(has(error_of(kHead + "trainer: {kind: mlp, data: " + short_labels + "}\n"),
            "the header declares 3 labels, the file holds 2"));
  const std::string counts = idx_dir(dir, "counts", 6, {0, 1});
  write_bytes(counts + "/train-labels-idx1-ubyte", labels_bytes({0, 1, 1}), false);
  CHECK(has(error_of(kHead + "trainer: {kind: mlp, data: " + counts + "}\n"), "has 2 images but"));
  const std::string sizes = idx_dir(dir, "sizes", 6, {0, 1});
  write_bytes(sizes + "/t10k-images-idx3-ubyte", images_bytes(2, 5, 6), false);
  CHECK(has(error_of(kHead + "trainer: {kind: mlp, data: " + sizes + "}\n"), "has 5x6 images but"));
  const std::string one = idx_dir(dir, "one", 6, {0, 0});
  write_bytes(one + "/t10k-labels-idx1-ubyte", labels_bytes({0, 0}), false);
  CHECK(has(error_of(kHead + "trainer: {kind: mlp, data: " + one + "}\n"),
            "trainer.data: the labels of '" + one + "' are all 0: a classifier needs at least 2 classes"));

  // A FIFO where a file should be is refused, not waited on.
  const std::string fifo = idx_dir(dir, "fifo", 6, {0, 1});
  std::filesystem::remove(fifo + "/t10k-images-idx3-ubyte");
  REQUIRE(::mkfifo((fifo + "/t10k-images-idx3-ubyte").c_str(), 0600) == 0);
  CHECK(has(error_of(kHead + "trainer: {kind: mlp, data: " + fifo + "}\n"),
            "'" + fifo + "/t10k-images-idx3-ubyte': is not a regular file"));

  // A space that searches the data leaves it to each trial.
  CHECK(accepted(kHead + "space: {data: {type: choice, values: [" + good + ", " + dir.file("nowhere") +
                 "]}}\ntrainer: {kind: mlp}\n"));
}

TEST_CASE("validate: classes the data has no image of are refused at their place, the trainer's and a transfer's") {
  TempDir dir;
  const std::string data = idx_dir(dir, "d", 6, {0, 1, 3, 3, 0});  // classes 0..3, none of class 2
  const std::string trainer = "trainer: {kind: mlp, data: " + data + ", classes: ";
  CHECK(accepted(kHead + trainer + "[3, 0]}\n"));
  // The data set changes: it is read again (validate keeps a shape only while its files are the same).
  const std::string changed = idx_dir(dir, "changed", 6, {0, 1, 3});
  CHECK(accepted(kHead + "trainer: {kind: mlp, data: " + changed + ", classes: [3, 0]}\n"));
  idx_dir(dir, "changed", 6, {0, 1, 1, 0});
  CHECK(has(error_of(kHead + "trainer: {kind: mlp, data: " + changed + ", classes: [3, 0]}\n"),
            "trainer.classes[0]: class 3 is not in the data"));
  const std::string beyond = error_of(kHead + trainer + "[0, 4]}\n");
  CHECK(starts(beyond, "test.yaml:4:"));
  CHECK(has(beyond, ": trainer.classes[1]: class 4 is not in the data: the training file of '" + data +
                        "' has classes 0..3; every trial would fail"));
  CHECK(has(error_of(kHead + trainer + "[2, 1]}\n"),
            "trainer.classes[0]: class 2 is not in the data: the training file of '" + data +
                "' has classes 0..3, but no image of class 2"));
  // Searched classes are left to each trial.
  CHECK(accepted(kHead + "space: {classes: {type: choice, values: [[0, 1], [0, 9]]}}\ntrainer: {kind: mlp, data: " +
                 data + "}\n"));

  // A transfer stage's classes are its trials'.
  const std::string workflow = "name: w\nobjective: {metric: val_accuracy}\ntrainer: {kind: mlp, data: " + data +
                               "}\nstages:\n"
                               "  - {name: s, kind: search, search: {max_trials: 2}, space: {lr: {type: float, low: "
                               "0.01, high: 0.1}}}\n";
  CHECK(accepted(workflow + "  - {name: t, kind: transfer, from: s, classes: [1, 3]}\n"));
  CHECK(has(error_of(workflow + "  - {name: t, kind: transfer, from: s, classes: [1, 7]}\n"),
            "stages[1].classes[1]: class 7 is not in the data"));
}

TEST_CASE("validate: a cnn whose layers shrink the data's images below a kernel or a window is refused there") {
  TempDir dir;
  const std::string data = idx_dir(dir, "d", 8, {0, 1, 0, 1});
  const std::string cnn = "trainer:\n  kind: cnn\n  data: " + data + "\n";
  // 8x8: a 3x3 kernel fits, a 9x9 does not.
  CHECK(accepted(kHead + cnn + "  layers: [{kind: conv, filters: 2, kernel: 3}, {kind: maxpool, size: 2}]\n"));
  CHECK(error_of(kHead + cnn + "  layers: [{kind: conv, filters: 2, kernel: 9}]\n") ==
        "test.yaml:7:12: trainer.layers[0].kernel: kernel 9 is larger than the 8x8 image it gets (the 8x8 images of '" +
            data + "'); every trial would fail");
  // Each pooling halves the image: 8, 4, 2, 1; a fourth window of 2 has a 1x1 image.
  const std::string pools = error_of(kHead + cnn + "  layers: [{kind: maxpool, size: 2}, {kind: maxpool, size: 2}, "
                                                   "{kind: maxpool, size: 2}, {kind: maxpool, size: 2}]\n");
  CHECK(has(pools, "trainer.layers[3].size: window 2 is larger than the 1x1 image it gets (the 8x8 images of '" + data +
                       "' after the layers before it)"));
  // A valid-padding conv shrinks by its kernel, a strided one by its stride.
  CHECK(has(error_of(kHead + cnn + "  layers: [{kind: conv, filters: 2, kernel: 5, padding: valid}, "
                                   "{kind: conv, filters: 2, kernel: 5}]\n"),
            "trainer.layers[1].kernel: kernel 5 is larger than the 4x4 image it gets"));
  CHECK(has(error_of(kHead + cnn + "  layers: [{kind: conv, filters: 2, kernel: 3, stride: 4}, {kind: maxpool, size: 3}]\n"),
            "trainer.layers[1].size: window 3 is larger than the 2x2 image it gets"));
  // In a block, at the block's entry; a block beyond `blocks` adds no layers.
  CHECK(has(error_of(kHead + cnn + "  layers: [{kind: maxpool, size: 2}, block1]\n  block1: [{kind: conv, filters: 2, kernel: 5}]\n"),
            "trainer.block1[0].kernel: kernel 5 is larger than the 4x4 image it gets"));
  CHECK(accepted(kHead + cnn + "  blocks: 1\n  layers: [block1, block2]\n  block1: [{kind: maxpool, size: 2}]\n"
                               "  block2: [{kind: conv, filters: 2, kernel: 7}]\n"));
  // A searched network is left to each trial; a fixed value in the space counts.
  CHECK(accepted(kHead + "space:\n  block1: {type: choice, values: [[{kind: conv, filters: 2, kernel: 9}], [{kind: maxpool, size: 2}]]}\n" + cnn +
                 "  layers: [block1]\n"));
  CHECK(has(error_of(kHead + "space:\n  layers: {type: fixed, value: [{kind: conv, filters: 2, kernel: 9}]}\n" + cnn),
            "trainer.layers[0].kernel: kernel 9 is larger than the 8x8 image"));
}

TEST_CASE("validate: an init_from that names no checkpoint is refused at trainer.init_from, unless a transfer sets it") {
  // Before, validate took it and every trial failed when it loaded "no such checkpoint file or directory".
  TempDir dir;
  const std::string data = idx_dir(dir, "d", 6, {0, 1, 0, 1});
  const std::string trainer = "trainer: {kind: mlp, data: " + data + ", init_from: ";
  const std::string missing = error_of(kHead + trainer + dir.file("none.bin") + "}\n");
  CHECK(has(missing, ": trainer.init_from: '" + dir.file("none.bin") + "': no such checkpoint file or directory; every "
                     "trial would fail"));
  std::filesystem::create_directories(dir.file("trial"));
  CHECK(has(error_of(kHead + trainer + dir.file("trial") + "}\n"),
            "trainer.init_from: the directory '" + dir.file("trial") + "' holds no checkpoint-stage0.bin"));
  // A file, or a trial directory with its checkpoint: what the trainer reads is its own to judge.
  dir.write("trial/checkpoint-stage0.bin", "weights");
  CHECK(accepted(kHead + trainer + dir.file("trial") + "}\n"));
  CHECK(accepted(kHead + trainer + dir.file("trial/checkpoint-stage0.bin") + "}\n"));
  // A transfer gives each of its trials its source's checkpoint through init_from.
  const std::string workflow = "name: w\nobjective: {metric: val_accuracy}\ntrainer: {kind: cnn, data: " + data +
                               ", layers: [{kind: dense, units: 4}]}\nstages:\n"
                               "  - {name: s, kind: search, search: {max_trials: 2}, space: {lr: {type: float, low: "
                               "0.01, high: 0.1}}}\n";
  CHECK(accepted(workflow + "  - {name: t, kind: transfer, from: s, trainer: {init_from: " + dir.file("none.bin") + "}}\n"));
  CHECK(has(error_of(workflow + "  - {name: u, kind: search, search: {max_trials: 2}, space: {lr: {type: float, low: "
                                "0.01, high: 0.1}}, trainer: {init_from: " + dir.file("none.bin") + "}}\n"),
            "stages[1].trainer.init_from: '" + dir.file("none.bin") + "': no such checkpoint file or directory"));
}

TEST_CASE("the files a trial reads are judged only where its trials run: not for a SLURM backend, slurm submit or simulate") {
  TempDir dir;
  const std::string missing = dir.file("nowhere");
  const std::string local = kHead + "trainer: {kind: mlp, data: " + missing + ", init_from: " + dir.file("none.bin") + "}\n";
  CHECK(has(error_of(local), "trainer.init_from"));
  // Trials on the allocation's nodes (the scratch file system a login node may not mount).
  CHECK(accepted(local + "resources: {backend: slurm}\n"));
  // `hpctune slurm` and `simulate` read the config where no trial runs (ParseOptions::local_files).
  auto elsewhere = config::parse_config(local, "test.yaml", {.local_files = false});
  CHECK_MESSAGE(elsewhere.ok(), elsewhere.error().message());
  const std::string workflow = "name: t\nobjective: {metric: val_accuracy}\ntrainer: {kind: mlp, data: " + missing +
                               "}\nstages:\n  - {name: s, kind: search, search: {max_trials: 2}}\n"
                               "  - {name: m, kind: transfer, from: s, classes: [0, 1], checkpoint: " + dir.file("gone.bin") + "}\n";
  CHECK(has(error_of(workflow), "stages[1].checkpoint: '" + dir.file("gone.bin") + "' does not exist"));
  auto workflow_elsewhere = config::parse_config(workflow, "test.yaml", {.local_files = false});
  CHECK_MESSAGE(workflow_elsewhere.ok(), workflow_elsewhere.error().message());
  CHECK(accepted(workflow + "resources: {backend: slurm}\n"));
}
