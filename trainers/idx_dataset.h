// IDX datasets (MNIST, Fashion-MNIST): reading, validating, converting, and a per-process cache.
//
// The IDX format: a big-endian header (magic 0x0000 <type> <ndims>, then ndims uint32 sizes) and
// the raw data. Images are type 0x08 (ubyte) with 3 dims (count, rows, cols); labels are 0x08 with
// 1 dim (count). Files may be gzipped (`*.gz`, read through zlib) or plain: zlib's gzread passes
// plain files through unchanged, so both go through the same path.
//
// Errors: a file that cannot be opened or decompressed is kIo; a file whose contents are not what
// the header promises (bad magic, zero or absurd dimensions, too short, trailing bytes, image and
// label counts that differ, train and test images of different shapes) is kInvalidArgument; a
// file or directory that does not exist is kNotFound. Every message names the file.
//
// Caching: a worker runs many trials in one process, and decoding 60,000 images for each would
// cost more than small trials. load_idx_dataset() returns a shared_ptr<const> that trainers keep;
// a DatasetCache, owned by the worker and handed to trainers, shares one copy between trials.
// There is deliberately no process-wide cache: two workers in one test process stay independent.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"
#include "trainers/trainer_settings.h"  // kDefaultDataDir

namespace hpctune::trainers {

// The contents of an IDX image file.
struct IdxImages {
  int64_t count = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<uint8_t> pixels;  // count * rows * cols, row-major
};

// Reads an IDX3 ubyte image file (gzipped or plain).
Result<IdxImages> read_idx_images(const std::string& path);
// Reads an IDX1 ubyte label file (gzipped or plain).
Result<std::vector<uint8_t>> read_idx_labels(const std::string& path);

// A labelled set of images as the model consumes them: one contiguous row-major float matrix.
struct Dataset {
  int64_t count = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<float> images;    // count x features(), row-major
  std::vector<int32_t> labels;  // count, each in [0, num_classes)

  int64_t features() const noexcept { return rows * cols; }
  const float* image(int64_t i) const noexcept { return images.data() + i * features(); }
};

// The standard train/test pair of an IDX directory.
struct ImageClassificationData {
  std::string dir;
  Dataset train;
  Dataset test;
  int num_classes = 0;  // 1 + the largest label in either set
  // Pixels are p / 255; with standardize, then (p/255 - mean) / stddev, with mean and stddev
  // taken over every pixel of the training file (so both sets get the same transform).
  bool standardized = false;
  double mean = 0.0;
  double stddev = 1.0;
};

struct DatasetOptions {
  bool standardize = false;
};

// Builds a Dataset from an image file and a label file; kInvalidArgument when the counts differ.
Result<Dataset> load_idx_pair(const std::string& images_path, const std::string& labels_path);

// Loads `dir`/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] (the .gz name is preferred).
// kNotFound when `dir` does not exist or a file is missing in it.
Result<std::shared_ptr<const ImageClassificationData>> load_idx_dataset(const std::string& dir,
                                                                        const DatasetOptions& options = {});

// Keeps loaded datasets for the lifetime of a worker process, keyed by (canonical dir, options).
// Thread-safe; a load runs under the cache's lock, so concurrent requests for the same directory
// decode it once. Failed loads are not cached.
class DatasetCache {
 public:
  Result<std::shared_ptr<const ImageClassificationData>> get(const std::string& dir, const DatasetOptions& options = {});
  size_t size() const;
  // Number of get() calls that decoded files (for tests and logs).
  int64_t loads() const;
  void clear();

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, bool>, std::shared_ptr<const ImageClassificationData>> entries_;
  int64_t loads_ = 0;
};

}  // namespace hpctune::trainers
