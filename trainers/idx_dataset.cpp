#include "trainers/idx_dataset.h"
#include "trainers/idx_header.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <thread>
#include <utility>

namespace hpctune::trainers {
namespace {

constexpr uint8_t kTypeUbyte = 0x08;
// Bounds that reject corrupted headers before they turn into huge allocations.
constexpr uint64_t kMaxDim = 1u << 30;
constexpr uint64_t kMaxBytes = uint64_t{1} << 34;  // 16 GiB
constexpr unsigned kReadChunk = 16u << 20;

Error io_error(const std::string& path, gzFile f, const char* what) {
  int code = Z_OK;
  const char* message = f != nullptr ? gzerror(f, &code) : nullptr;
  std::string text = "'" + path + "': " + what;
  if (code == Z_ERRNO) text += std::string(": ") + std::strerror(errno);
  else if (message != nullptr && *message != '\0') text += std::string(": ") + message;
  return err(Errc::kIo, std::move(text));
}

Result<GzFile> open_file(const std::string& path) {
  HPCTUNE_ASSIGN(GzFile f, open_idx_file(path));
  gzbuffer(f.get(), 1u << 17);
  return f;
}

// Reads exactly n bytes, or fails: kIo for a zlib/read error, kInvalidArgument for a clean EOF.
Status read_exact(const std::string& path, gzFile f, uint8_t* out, uint64_t n, const char* what) {
  uint64_t done = 0;
  while (done < n) {
    const unsigned want = static_cast<unsigned>(std::min<uint64_t>(kReadChunk, n - done));
    const int got = gzread(f, out + done, want);
    if (got < 0) return io_error(path, f, "read failed");
    if (got == 0) {
      int code = Z_OK;
      gzerror(f, &code);
      if (code != Z_OK) return io_error(path, f, "read failed");
      return err(Errc::kInvalidArgument, "'" + path + "': truncated: expected " + std::to_string(n) + " bytes of " +
                                             what + ", got " + std::to_string(done));
    }
    done += static_cast<uint64_t>(got);
  }
  return Status::Ok();
}

// After the payload: the stream must end here. Reading past the end also makes zlib check the
// gzip CRC and length trailer, which catches corruption that inflated without error.
Status expect_eof(const std::string& path, gzFile f) {
  uint8_t extra = 0;
  const int got = gzread(f, &extra, 1);
  if (got < 0) return io_error(path, f, "read failed");
  if (got > 0) return err(Errc::kInvalidArgument, "'" + path + "': trailing bytes after the data the header declares");
  int code = Z_OK;
  gzerror(f, &code);
  if (code != Z_OK) return io_error(path, f, "read failed");
  return Status::Ok();
}

uint32_t be32(const uint8_t* p) noexcept {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// Reads and checks the header; returns the dimension sizes.
Result<std::vector<uint64_t>> read_header(const std::string& path, gzFile f, int expected_dims, const char* kind) {
  std::array<uint8_t, 4> magic{};
  HPCTUNE_TRY(read_exact(path, f, magic.data(), 4, "header"));
  if (magic[0] != 0 || magic[1] != 0 || magic[2] != kTypeUbyte || magic[3] != expected_dims) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "0x%02x%02x%02x%02x", magic[0], magic[1], magic[2], magic[3]);
    char want[16];
    std::snprintf(want, sizeof want, "0x0000%02x%02x", kTypeUbyte, expected_dims);
    return err(Errc::kInvalidArgument,
               "'" + path + "': bad magic number " + hex + " (expected " + want + ", an IDX " + kind + " file)");
  }
  std::vector<uint64_t> dims(static_cast<size_t>(expected_dims));
  for (auto& d : dims) {
    std::array<uint8_t, 4> b{};
    HPCTUNE_TRY(read_exact(path, f, b.data(), 4, "header"));
    d = be32(b.data());
    if (d == 0 || d > kMaxDim) {
      return err(Errc::kInvalidArgument, "'" + path + "': bad dimension " + std::to_string(d) + " in the header");
    }
  }
  return dims;
}

}  // namespace

namespace {

// Streams an IDX3 image file: `on_header(count, rows, cols)` once, then `on_chunk(offset, bytes, n)`
// over the pixel data in order. Nothing is allocated from the header's word alone, so a corrupted
// header cannot trigger a huge allocation before the data proves it exists.
template <typename OnHeader, typename OnChunk>
Status stream_idx_images(const std::string& path, OnHeader&& on_header, OnChunk&& on_chunk) {
  HPCTUNE_ASSIGN(GzFile f, open_file(path));
  HPCTUNE_ASSIGN(auto dims, read_header(path, f.get(), 3, "image (idx3-ubyte)"));
  const uint64_t bytes = dims[0] * dims[1] * dims[2];
  if (bytes > kMaxBytes) return err(Errc::kInvalidArgument, "'" + path + "': header declares " + std::to_string(bytes) + " bytes");
  HPCTUNE_TRY(on_header(static_cast<int64_t>(dims[0]), static_cast<int64_t>(dims[1]), static_cast<int64_t>(dims[2])));
  std::vector<uint8_t> buffer(static_cast<size_t>(std::min<uint64_t>(bytes, 1u << 20)));
  uint64_t done = 0;
  while (done < bytes) {
    const uint64_t n = std::min<uint64_t>(bytes - done, buffer.size());
    auto st = read_exact(path, f.get(), buffer.data(), n, "pixel data");
    if (!st.ok()) {
      Error e = std::move(st).error();
      if (e.code() == Errc::kInvalidArgument) {
        return err(Errc::kInvalidArgument, "'" + path + "': truncated: the header declares " + std::to_string(dims[0]) +
                                               " images of " + std::to_string(dims[1]) + "x" + std::to_string(dims[2]));
      }
      return e;
    }
    on_chunk(done, buffer.data(), static_cast<size_t>(n));
    done += n;
  }
  return expect_eof(path, f.get());
}

// Up-front capacity for a payload the header declares: exact for sane sizes, so that loading does
// not copy while growing; capped so that a corrupted header cannot reserve absurd amounts.
size_t reserve_for(int64_t elements) { return static_cast<size_t>(std::min<int64_t>(elements, int64_t{1} << 28)); }

// The images of an IDX3 file as floats p / 255, with a histogram of the raw pixel values.
struct FloatImages {
  int64_t count = 0, rows = 0, cols = 0;
  std::vector<float> values;
  std::array<uint64_t, 256> histogram{};
};

Result<FloatImages> read_idx_images_as_floats(const std::string& path) {
  std::array<float, 256> lut{};
  for (int p = 0; p < 256; ++p) lut[static_cast<size_t>(p)] = static_cast<float>(p) / 255.0f;
  FloatImages out;
  auto on_header = [&](int64_t count, int64_t rows, int64_t cols) -> Status {
    out.count = count, out.rows = rows, out.cols = cols;
    out.values.reserve(reserve_for(count * rows * cols));
    return Status::Ok();
  };
  auto on_chunk = [&](uint64_t offset, const uint8_t* src, size_t n) {
    out.values.resize(static_cast<size_t>(offset) + n);
    float* dst = out.values.data() + offset;
    for (size_t i = 0; i < n; ++i) {
      dst[i] = lut[src[i]];
      ++out.histogram[src[i]];
    }
  };
  HPCTUNE_TRY(stream_idx_images(path, on_header, on_chunk));
  return out;
}

}  // namespace

Result<IdxImages> read_idx_images(const std::string& path) {
  IdxImages out;
  auto on_header = [&](int64_t count, int64_t rows, int64_t cols) -> Status {
    out.count = count, out.rows = rows, out.cols = cols;
    out.pixels.reserve(reserve_for(count * rows * cols));
    return Status::Ok();
  };
  auto on_chunk = [&](uint64_t offset, const uint8_t* src, size_t n) {
    out.pixels.resize(static_cast<size_t>(offset) + n);
    std::memcpy(out.pixels.data() + offset, src, n);
  };
  HPCTUNE_TRY(stream_idx_images(path, on_header, on_chunk));
  return out;
}

Result<std::vector<uint8_t>> read_idx_labels(const std::string& path) {
  HPCTUNE_ASSIGN(GzFile f, open_file(path));
  HPCTUNE_ASSIGN(auto dims, read_header(path, f.get(), 1, "label (idx1-ubyte)"));
  std::vector<uint8_t> labels(dims[0]);
  auto st = read_exact(path, f.get(), labels.data(), dims[0], "labels");
  if (!st.ok()) {
    Error e = std::move(st).error();
    if (e.code() == Errc::kInvalidArgument) {
      return err(Errc::kInvalidArgument, "'" + path + "': truncated: the header declares " + std::to_string(dims[0]) + " labels");
    }
    return e;
  }
  HPCTUNE_TRY(expect_eof(path, f.get()));
  return labels;
}

namespace {

Dataset to_dataset(FloatImages&& images, const std::vector<uint8_t>& labels) {
  Dataset d;
  d.count = images.count;
  d.rows = images.rows;
  d.cols = images.cols;
  d.images = std::move(images.values);
  d.labels.assign(labels.begin(), labels.end());
  return d;
}

Status check_counts(const std::string& images_path, int64_t images, const std::string& labels_path, size_t labels) {
  if (static_cast<int64_t>(labels) != images) {
    return err(Errc::kInvalidArgument, "'" + images_path + "' has " + std::to_string(images) + " images but '" + labels_path +
                                           "' has " + std::to_string(labels) + " labels");
  }
  return Status::Ok();
}

// Maps every p / 255 value through lut[p]. p is recovered exactly: p / 255.0f * 255 rounds to p.
void remap(std::vector<float>& values, const std::array<float, 256>& lut) noexcept {
  for (float& v : values) v = lut[static_cast<size_t>(std::lrint(v * 255.0f))];
}

}  // namespace

Result<Dataset> load_idx_pair(const std::string& images_path, const std::string& labels_path) {
  HPCTUNE_ASSIGN(auto images, read_idx_images_as_floats(images_path));
  HPCTUNE_ASSIGN(auto labels, read_idx_labels(labels_path));
  HPCTUNE_TRY(check_counts(images_path, images.count, labels_path, labels.size()));
  return to_dataset(std::move(images), labels);
}

Result<std::shared_ptr<const ImageClassificationData>> load_idx_dataset(const std::string& dir, const DatasetOptions& options) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return err(Errc::kNotFound, "dataset directory '" + dir + "' does not exist");
  }
  const std::string train_images = idx_file(dir, "train-images-idx3-ubyte");
  const std::string train_labels = idx_file(dir, "train-labels-idx1-ubyte");
  const std::string test_images = idx_file(dir, "t10k-images-idx3-ubyte");
  const std::string test_labels = idx_file(dir, "t10k-labels-idx1-ubyte");

  // Inflating the training images dominates (~47 MB); the other files decode on a second thread.
  Result<FloatImages> test_img = err(Errc::kInternal, "not read");
  Result<std::vector<uint8_t>> test_lab = err(Errc::kInternal, "not read");
  Result<std::vector<uint8_t>> train_lab = err(Errc::kInternal, "not read");
  auto read_side = [&] {
    test_img = read_idx_images_as_floats(test_images);
    test_lab = read_idx_labels(test_labels);
    train_lab = read_idx_labels(train_labels);
  };
  std::thread side;
  try {
    side = std::thread(read_side);
  } catch (const std::system_error&) {
    read_side();  // no thread to be had: read serially
  }
  Result<FloatImages> train_img = read_idx_images_as_floats(train_images);
  if (side.joinable()) side.join();
  if (!train_img.ok()) return std::move(train_img).error();
  if (!train_lab.ok()) return std::move(train_lab).error();
  if (!test_img.ok()) return std::move(test_img).error();
  if (!test_lab.ok()) return std::move(test_lab).error();
  HPCTUNE_TRY(check_counts(train_images, train_img->count, train_labels, train_lab->size()));
  HPCTUNE_TRY(check_counts(test_images, test_img->count, test_labels, test_lab->size()));
  if (train_img->rows != test_img->rows || train_img->cols != test_img->cols) {
    return err(Errc::kInvalidArgument, "'" + test_images + "' has " + std::to_string(test_img->rows) + "x" +
                                           std::to_string(test_img->cols) + " images but '" + train_images + "' has " +
                                           std::to_string(train_img->rows) + "x" + std::to_string(train_img->cols));
  }

  auto data = std::make_shared<ImageClassificationData>();
  data->dir = dir;
  if (options.standardize) {
    // Mean and standard deviation over every training pixel, from the histogram: exact and fast.
    double n = 0.0, sum = 0.0, sum_sq = 0.0;
    for (int p = 0; p < 256; ++p) {
      const double c = static_cast<double>(train_img->histogram[static_cast<size_t>(p)]);
      const double x = p / 255.0;
      n += c, sum += c * x, sum_sq += c * x * x;
    }
    data->mean = n > 0 ? sum / n : 0.0;
    const double var = n > 0 ? sum_sq / n - data->mean * data->mean : 0.0;
    data->stddev = var > 1e-12 ? std::sqrt(var) : 1.0;
    data->standardized = true;
    std::array<float, 256> lut{};
    for (int p = 0; p < 256; ++p) lut[static_cast<size_t>(p)] = static_cast<float>((p / 255.0 - data->mean) / data->stddev);
    remap(train_img->values, lut);
    remap(test_img->values, lut);
  }
  data->train = to_dataset(std::move(*train_img), *train_lab);
  data->test = to_dataset(std::move(*test_img), *test_lab);
  int max_label = 0;
  for (uint8_t l : *train_lab) max_label = std::max<int>(max_label, l);
  for (uint8_t l : *test_lab) max_label = std::max<int>(max_label, l);
  data->num_classes = max_label + 1;
  return std::shared_ptr<const ImageClassificationData>(std::move(data));
}

Result<std::shared_ptr<const ImageClassificationData>> DatasetCache::get(const std::string& dir, const DatasetOptions& options) {
  std::error_code ec;
  auto canonical = std::filesystem::weakly_canonical(dir, ec);
  const std::string key_dir = ec ? dir : canonical.string();
  std::lock_guard<std::mutex> lock(mutex_);
  auto key = std::make_pair(key_dir, options.standardize);
  auto it = entries_.find(key);
  if (it != entries_.end()) return it->second;
  HPCTUNE_ASSIGN(auto data, load_idx_dataset(dir, options));
  ++loads_;
  entries_.emplace(std::move(key), data);
  return data;
}

size_t DatasetCache::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

int64_t DatasetCache::loads() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return loads_;
}

void DatasetCache::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  entries_.clear();
}

}  // namespace hpctune::trainers
