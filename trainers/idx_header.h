// The shape of an IDX data set (idx_dataset.h) read from its headers and its label files, without its
// images: what `hpctune validate` judges a classifier's settings against (the image size a cnn's
// layers shrink, the labels `classes` names) on the master's side, which does not link the trainers'
// code (this file is in the trainer catalog: common/ and zlib only). Bounded: the 16 bytes of each
// image file's header, and the labels of a file of at most kMaxShapeLabels of them (Fashion-MNIST's
// training file has 60,000); a larger one is not counted (`classes` 0: not known).
#pragma once

#include <zlib.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"

namespace hpctune::trainers {

// A gzFile that closes itself; gzread passes plain files through.
class GzFile {
 public:
  explicit GzFile(gzFile f) noexcept : f_(f) {}
  GzFile(GzFile&& other) noexcept : f_(std::exchange(other.f_, nullptr)) {}
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;
  GzFile& operator=(GzFile&&) = delete;
  ~GzFile() {
    if (f_ != nullptr) gzclose(f_);
  }
  gzFile get() const noexcept { return f_; }

 private:
  gzFile f_;
};

// Opens one file of an IDX data set (gzipped or not) for reading: kNotFound when it is not there;
// kIo for a directory, anything that is not a regular file (a FIFO or a device would block the open
// or never end: neither validate nor a trial waits on one), or an open that fails. Names the path.
Result<GzFile> open_idx_file(const std::string& path);

// The file `base` ("train-images-idx3-ubyte") of the IDX directory `dir`, as load_idx_dataset reads
// it: `dir`/<base>.gz when that exists, else `dir`/<base> when that does, else the .gz name.
std::string idx_file(const std::string& dir, const std::string& base);

inline constexpr int64_t kMaxShapeLabels = int64_t{1} << 24;

struct IdxSetShape {
  int64_t rows = 0;  // of every image, training and test
  int64_t cols = 0;
  // 1 + the largest label of either set (ImageClassificationData::num_classes); 0 when a label file
  // holds more than kMaxShapeLabels labels and was not read.
  int64_t classes = 0;
  std::vector<int64_t> train_per_class;  // training images of each label 0..classes-1
};

// The shape of the IDX directory `dir` as load_idx_dataset would find it, the images' pixels unread:
// kNotFound when `dir` is not a directory or a file is missing; kInvalidArgument for a file that is
// not what the format says (bad magic, zero or absurd dimensions, labels short of what the header
// declares, image and label counts that differ, training and test images of different sizes); kIo
// when a file cannot be read. Every message names the file. A directory read before is not read
// again while its four files keep their sizes and modification times (validate asks once per stage).
Result<IdxSetShape> read_idx_set_shape(const std::string& dir);

}  // namespace hpctune::trainers
