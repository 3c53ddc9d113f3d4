// The shape of an IDX data set from its headers and label files (idx_header.h).
#include "trainers/idx_header.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <system_error>
#include <utility>

namespace hpctune::trainers {

Result<GzFile> open_idx_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return err(Errc::kNotFound, "'" + path + "': no such file");
  if (std::filesystem::is_directory(path, ec)) return err(Errc::kIo, "'" + path + "': is a directory");
  if (!std::filesystem::is_regular_file(path, ec)) return err(Errc::kIo, "'" + path + "': is not a regular file");
  errno = 0;
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr)
    return err(Errc::kIo, "'" + path + "': cannot open: " + std::string(errno != 0 ? std::strerror(errno) : "out of memory"));
  return GzFile(f);
}

namespace {

constexpr uint8_t kTypeUbyte = 0x08;
constexpr uint64_t kMaxDim = 1u << 30;  // as idx_dataset.cpp bounds a header

// Up to n bytes; fewer only at the end of the file. kIo when zlib cannot read on.
Result<uint64_t> read_some(const std::string& path, gzFile f, uint8_t* out, unsigned n) {
  const int got = gzread(f, out, n);
  int code = Z_OK;
  const char* message = gzerror(f, &code);
  if (got < 0 || code != Z_OK) {
    std::string text = "'" + path + "': read failed";
    if (code == Z_ERRNO) text += std::string(": ") + std::strerror(errno);
    else if (message != nullptr && *message != '\0') text += std::string(": ") + message;
    return err(Errc::kIo, std::move(text));
  }
  return static_cast<uint64_t>(got);
}

uint32_t be32(const uint8_t* p) noexcept {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// The header of an IDX ubyte file of `dims` dimensions: their sizes.
Result<std::vector<uint64_t>> read_dims(const std::string& path, gzFile f, int dims, const char* kind) {
  std::array<uint8_t, 16> head{};
  const unsigned want = 4u * static_cast<unsigned>(1 + dims);
  HPCTUNE_ASSIGN(const uint64_t got, read_some(path, f, head.data(), want));
  if (got < 4 || head[0] != 0 || head[1] != 0 || head[2] != kTypeUbyte || head[3] != dims) {
    char hex[16] = "(none)";
    if (got >= 4) std::snprintf(hex, sizeof hex, "0x%02x%02x%02x%02x", head[0], head[1], head[2], head[3]);
    char expected[16];
    std::snprintf(expected, sizeof expected, "0x0000%02x%02x", kTypeUbyte, dims);
    return err(Errc::kInvalidArgument, "'" + path + "': bad magic number " + hex + " (expected " + expected + ", an IDX " +
                                           kind + " file)");
  }
  if (got < want) return err(Errc::kInvalidArgument, "'" + path + "': truncated: the header ends early");
  std::vector<uint64_t> out;
  for (int d = 0; d < dims; ++d) {
    const uint64_t size = be32(head.data() + 4 * (d + 1));
    if (size == 0 || size > kMaxDim)
      return err(Errc::kInvalidArgument, "'" + path + "': bad dimension " + std::to_string(size) + " in the header");
    out.push_back(size);
  }
  return out;
}

struct Images {
  uint64_t count = 0, rows = 0, cols = 0;
};

Result<Images> read_images_header(const std::string& path) {
  HPCTUNE_ASSIGN(GzFile f, open_idx_file(path));
  HPCTUNE_ASSIGN(auto dims, read_dims(path, f.get(), 3, "image (idx3-ubyte)"));
  return Images{dims[0], dims[1], dims[2]};
}

// The labels of an IDX1 file counted by value into `per_label` (256 entries), when the file holds at
// most kMaxShapeLabels of them; returns their count, read or not.
Result<uint64_t> count_labels(const std::string& path, std::array<int64_t, 256>& per_label, bool& counted) {
  HPCTUNE_ASSIGN(GzFile f, open_idx_file(path));
  HPCTUNE_ASSIGN(auto dims, read_dims(path, f.get(), 1, "label (idx1-ubyte)"));
  counted = dims[0] <= static_cast<uint64_t>(kMaxShapeLabels);
  if (!counted) return dims[0];
  std::vector<uint8_t> buffer(64u << 10);
  uint64_t done = 0;
  while (done < dims[0]) {
    const unsigned want = static_cast<unsigned>(std::min<uint64_t>(buffer.size(), dims[0] - done));
    HPCTUNE_ASSIGN(const uint64_t got, read_some(path, f.get(), buffer.data(), want));
    if (got == 0)
      return err(Errc::kInvalidArgument, "'" + path + "': truncated: the header declares " + std::to_string(dims[0]) +
                                             " labels, the file holds " + std::to_string(done));
    for (uint64_t i = 0; i < got; ++i) ++per_label[buffer[i]];
    done += got;
  }
  return dims[0];
}

Status same_count(const std::string& images_path, uint64_t images, const std::string& labels_path, uint64_t labels) {
  if (images == labels) return Status::Ok();
  return err(Errc::kInvalidArgument, "'" + images_path + "' has " + std::to_string(images) + " images but '" +
                                         labels_path + "' has " + std::to_string(labels) + " labels");
}

}  // namespace

std::string idx_file(const std::string& dir, const std::string& base) {
  const std::string gz = dir + "/" + base + ".gz";
  std::error_code ec;
  if (std::filesystem::exists(gz, ec)) return gz;
  if (std::filesystem::exists(dir + "/" + base, ec)) return dir + "/" + base;
  return gz;  // reported as missing
}

namespace {

// What identifies the four files as read: each one's path, size and modification time.
std::string files_stamp(const std::vector<std::string>& paths) {
  std::string stamp;
  for (const auto& path : paths) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    const auto time = std::filesystem::last_write_time(path, ec);
    stamp += path + '\0' + std::to_string(ec ? 0 : size) + '\0' +
             std::to_string(ec ? 0 : time.time_since_epoch().count()) + '\0';
  }
  return stamp;
}

Result<IdxSetShape> read_shape(const std::string& train_images, const std::string& train_labels,
                               const std::string& test_images, const std::string& test_labels) {
  HPCTUNE_ASSIGN(const Images train, read_images_header(train_images));
  HPCTUNE_ASSIGN(const Images test, read_images_header(test_images));
  std::array<int64_t, 256> train_per_label{}, test_per_label{};
  bool train_counted = false, test_counted = false;
  HPCTUNE_ASSIGN(const uint64_t train_count, count_labels(train_labels, train_per_label, train_counted));
  HPCTUNE_ASSIGN(const uint64_t test_count, count_labels(test_labels, test_per_label, test_counted));
  HPCTUNE_TRY(same_count(train_images, train.count, train_labels, train_count));
  HPCTUNE_TRY(same_count(test_images, test.count, test_labels, test_count));
  if (train.rows != test.rows || train.cols != test.cols)
    return err(Errc::kInvalidArgument, "'" + test_images + "' has " + std::to_string(test.rows) + "x" +
                                           std::to_string(test.cols) + " images but '" + train_images + "' has " +
                                           std::to_string(train.rows) + "x" + std::to_string(train.cols));
  IdxSetShape shape;
  shape.rows = static_cast<int64_t>(train.rows);
  shape.cols = static_cast<int64_t>(train.cols);
  if (!train_counted || !test_counted) return shape;
  for (int label = 0; label < 256; ++label)
    if (train_per_label[static_cast<size_t>(label)] > 0 || test_per_label[static_cast<size_t>(label)] > 0)
      shape.classes = label + 1;
  shape.train_per_class.assign(train_per_label.begin(), train_per_label.begin() + shape.classes);
  return shape;
}

}  // namespace

Result<IdxSetShape> read_idx_set_shape(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return err(Errc::kNotFound, "dataset directory '" + dir + "' does not exist");
  const std::vector<std::string> files = {
      idx_file(dir, "train-images-idx3-ubyte"), idx_file(dir, "train-labels-idx1-ubyte"),
      idx_file(dir, "t10k-images-idx3-ubyte"), idx_file(dir, "t10k-labels-idx1-ubyte")};
  // `validate` asks once per stage that trains on the directory (thousands, in a large workflow): a
  // shape read is kept while its files are the same (stamp), at most kKept directories.
  constexpr std::size_t kKept = 64;
  static std::mutex mutex;
  static std::map<std::string, std::pair<std::string, Result<IdxSetShape>>> kept;
  const std::string stamp = files_stamp(files);
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = kept.find(dir); it != kept.end() && it->second.first == stamp) return it->second.second;
  }
  Result<IdxSetShape> shape = read_shape(files[0], files[1], files[2], files[3]);
  std::lock_guard<std::mutex> lock(mutex);
  if (kept.size() >= kKept) kept.clear();
  kept.insert_or_assign(dir, std::make_pair(stamp, shape));
  return shape;
}

}  // namespace hpctune::trainers
