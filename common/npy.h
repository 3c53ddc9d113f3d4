// NumPy .npy files (format 1.0 written; 1.0, 2.0 and 3.0 read): the trials' saved predictions
// (val_probs.npy, test_probs.npy: float32 (rows, classes)) and row lists (val_indices.npy,
// val_labels.npy, test_labels.npy: int64 (rows,)), written by the classifier trainers
// (trainers/classifier_training.h) or by a user's program (NumPy's defaults, float64 and int64, and
// any other little-endian float or integer width: read_npy_real, read_npy_int) and read by the master's ensemble stage, which links no trainer
// code: hence header-only here, on the standard library alone.
//
// Reading is safe against hostile or damaged files, since a trial directory is written by another
// process: the magic, the version, a bounded header length, the dtype (exactly one the reader accepts),
// fortran_order False, a 1-D or 2-D shape of plain decimal sizes, at most kNpyMaxElements
// elements, and a file size of exactly the header plus rows * cols * itemsize. Every error is
// kInvalidArgument (kNotFound when the file does not exist, kIo when it cannot be read) and names
// the path. A reader that opened the file itself (without following links: the ensemble stage,
// workflow/trial_files.h) hands the descriptor to the fd overloads, which read it with pread and
// never open a name; the path readers open with O_NONBLOCK and refuse what is not a regular file.
//
// Writing goes through <path>.tmp renamed onto <path>, so a reader never sees half a file.
#pragma once

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <vector>

#include "common/result.h"
#include "common/safe_open.h"

namespace hpctune {

static_assert(std::endian::native == std::endian::little, "the .npy files here are little-endian");

// The most elements a read accepts (1 GiB of float32): far above any prediction matrix here.
inline constexpr int64_t kNpyMaxElements = int64_t{1} << 28;
// The longest header a read accepts (numpy writes well under 200 bytes).
inline constexpr uint32_t kNpyMaxHeader = 64 * 1024;

namespace npy_detail {

// Writes a C-order .npy of element type `descr` ('<f4', '<i8') and shape `shape` ("(3, 10)",
// "(3,)"), through a temporary file renamed onto `path`.
inline Status write(const std::string& path, const char* descr, const std::string& shape, const void* data,
                    size_t bytes) {
  std::string header = "{'descr': '";  // appended, not "..." + ...: GCC 12 warns falsely (-Wrestrict, PR 105329)
  header.append(descr).append("', 'fortran_order': False, 'shape': ").append(shape).append(", }");
  // magic (6) + version (2) + length (2) + header + '\n', padded with spaces to a multiple of 64.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  const std::string tmp = path + ".tmp";
  {
    // A link or a FIFO planted at the temporary name is refused (common/safe_open.h): before, the
    // link's target was emptied and written, and a FIFO hung here.
    HPCTUNE_ASSIGN(UniqueFd fd, open_own_for_writing(tmp, /*truncate=*/true));
    const uint16_t len = static_cast<uint16_t>(header.size());
    std::string head = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0, static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
    head += header;
    for (const auto& [from, size] : {std::pair{static_cast<const char*>(head.data()), head.size()},
                                     std::pair{static_cast<const char*>(data), bytes}}) {
      for (size_t done = 0; done < size;) {
        const ssize_t n = ::write(fd.get(), from + done, size - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return err(Errc::kIo, "cannot write " + tmp + ": " + std::strerror(errno));
        done += static_cast<size_t>(n);
      }
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return err(Errc::kIo, "cannot rename " + tmp + " onto " + path + ": " + ec.message());
  return Status::Ok();
}

// The value text of `key` in a header dict ("'shape': (3, 10)" -> "(3, 10)"), up to the comma or
// brace that ends it; "" when absent.
inline std::string field(const std::string& header, const std::string& key) {
  const std::string quoted = "'" + key + "':";
  const size_t at = header.find(quoted);
  if (at == std::string::npos) return "";
  size_t i = at + quoted.size();
  while (i < header.size() && header[i] == ' ') ++i;
  size_t end = i;
  if (end < header.size() && header[end] == '(') end = header.find(')', end);
  else end = header.find_first_of(",}", end);
  if (end == std::string::npos) return "";
  return header.substr(i, end - i + (header[end] == ')' ? 1 : 0));
}

// Parses "(3, 10)", "(3,)" or "()" into dims: plain decimal sizes only, each at most
// kNpyMaxElements; false on anything else.
inline bool parse_shape(const std::string& text, std::vector<int64_t>& dims) {
  dims.clear();
  if (text.size() < 2 || text.front() != '(' || text.back() != ')') return false;
  size_t i = 1;
  const size_t end = text.size() - 1;
  auto skip_spaces = [&] {
    while (i < end && text[i] == ' ') ++i;
  };
  skip_spaces();
  while (i < end) {
    if (text[i] < '0' || text[i] > '9') return false;
    int64_t v = 0;
    while (i < end && text[i] >= '0' && text[i] <= '9') {
      v = v * 10 + (text[i] - '0');
      if (v > kNpyMaxElements) return false;
      ++i;
    }
    dims.push_back(v);
    skip_spaces();
    if (i < end) {
      if (text[i] != ',') return false;
      ++i;
      skip_spaces();
    }
    if (dims.size() > 2) return false;
  }
  return true;
}

// Reads exactly `n` bytes at `offset` of `fd`; false on an error or a short file.
inline bool pread_exact(int fd, void* into, size_t n, uint64_t offset) {
  char* p = static_cast<char*>(into);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got, n -= static_cast<size_t>(got), offset += static_cast<uint64_t>(got);
  }
  return true;
}

// An element type a reader accepts: its dtype ('<f4') and size in bytes.
struct Dtype {
  const char* descr;
  size_t itemsize;
};

// Reads the whole array of the open regular file `fd` (named `path` in messages) whose dtype is one
// of `accepted` (`which` gets its index), checking everything listed at the top; `dims` gets the shape.
inline Result<std::vector<char>> read_fd_any(int fd, const std::string& path, std::initializer_list<Dtype> accepted,
                                             size_t& which, std::vector<int64_t>& dims) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return err(Errc::kIo, "cannot read " + path + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return err(Errc::kInvalidArgument, path + ": not a regular file");
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  auto bad = [&](const std::string& what) { return err(Errc::kInvalidArgument, path + ": " + what); };
  unsigned char start[8];
  if (!pread_exact(fd, start, 8, 0) || std::memcmp(start, "\x93NUMPY", 6) != 0)
    return bad("not a .npy file (no \\x93NUMPY magic)");
  const int major = start[6];
  uint64_t header_len = 0;
  uint64_t prefix = 0;
  if (major == 1) {
    unsigned char b[2];
    if (!pread_exact(fd, b, 2, 8)) return bad("truncated header");
    header_len = b[0] | (static_cast<uint64_t>(b[1]) << 8);
    prefix = 10;
  } else if (major == 2 || major == 3) {
    unsigned char b[4];
    if (!pread_exact(fd, b, 4, 8)) return bad("truncated header");
    header_len = b[0] | (static_cast<uint64_t>(b[1]) << 8) | (static_cast<uint64_t>(b[2]) << 16) |
                 (static_cast<uint64_t>(b[3]) << 24);
    prefix = 12;
  } else {
    return bad("unsupported .npy version " + std::to_string(major) + "." + std::to_string(start[7]));
  }
  if (header_len > kNpyMaxHeader) return bad("header of " + std::to_string(header_len) + " bytes is too long");
  if (prefix + header_len > file_size) return bad("truncated header");
  std::string header(static_cast<size_t>(header_len), '\0');
  if (!pread_exact(fd, header.data(), header.size(), prefix)) return bad("truncated header");
  const std::string found_descr = field(header, "descr");
  which = accepted.size();
  std::string expected;
  for (const Dtype& d : accepted) {
    if (found_descr == std::string("'") + d.descr + "'") which = static_cast<size_t>(&d - accepted.begin());
    expected.append(expected.empty() ? "'" : " or '").append(d.descr).append("'");
  }
  if (which == accepted.size())
    return bad("dtype " + (found_descr.empty() ? std::string("(none)") : found_descr) + ", expected " + expected);
  const size_t itemsize = accepted.begin()[which].itemsize;
  if (field(header, "fortran_order") != "False") return bad("not in C order (fortran_order is not False)");
  if (!parse_shape(field(header, "shape"), dims) || dims.empty())
    return bad("shape " + field(header, "shape") + " is not a 1-D or 2-D array of sizes up to " +
               std::to_string(kNpyMaxElements));
  int64_t count = 1;
  for (int64_t d : dims) {
    if (d != 0 && count > kNpyMaxElements / d) return bad("more than " + std::to_string(kNpyMaxElements) + " elements");
    count *= d;
  }
  if (count > kNpyMaxElements) return bad("more than " + std::to_string(kNpyMaxElements) + " elements");
  const uint64_t data_bytes = static_cast<uint64_t>(count) * itemsize;
  if (file_size != prefix + header_len + data_bytes)
    return bad("file of " + std::to_string(file_size) + " bytes, expected " +
               std::to_string(prefix + header_len + data_bytes) + " for its shape");
  std::vector<char> bytes(static_cast<size_t>(data_bytes));
  if (data_bytes > 0 && !pread_exact(fd, bytes.data(), bytes.size(), prefix + header_len)) return bad("truncated data");
  return bytes;
}

// read_fd_any() of exactly one dtype `descr` of element size `itemsize`.
inline Result<std::vector<char>> read_fd(int fd, const std::string& path, const char* descr, size_t itemsize,
                                         std::vector<int64_t>& dims) {
  size_t which = 0;
  return read_fd_any(fd, path, {Dtype{descr, itemsize}}, which, dims);
}

// read_fd() of the file at `path`, opened without waiting on a FIFO.
inline Result<std::vector<char>> read(const std::string& path, const char* descr, size_t itemsize,
                                      std::vector<int64_t>& dims) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT) return err(Errc::kNotFound, path + ": no such file");
    return err(Errc::kIo, "cannot open " + path + ": " + std::strerror(e));
  }
  auto out = read_fd(fd, path, descr, itemsize, dims);
  ::close(fd);
  return out;
}

template <typename T>
std::vector<T> as_values(const std::vector<char>& bytes) {
  std::vector<T> values(bytes.size() / sizeof(T));
  if (!values.empty()) std::memcpy(values.data(), bytes.data(), values.size() * sizeof(T));
  return values;
}

}  // namespace npy_detail

// Writes a float32 .npy of shape (rows, cols); kIo naming the path.
inline Status write_npy_f32(const std::string& path, const float* values, int64_t rows, int64_t cols) {
  std::string shape = "(";
  shape.append(std::to_string(rows)).append(", ").append(std::to_string(cols)).append(")");
  return npy_detail::write(path, "<f4", shape, values, static_cast<size_t>(rows * cols) * sizeof(float));
}

// Writes an int64 1-D .npy of `count` values.
inline Status write_npy_i64(const std::string& path, const int64_t* values, int64_t count) {
  std::string shape = "(";
  shape.append(std::to_string(count)).append(",)");
  return npy_detail::write(path, "<i8", shape, values, static_cast<size_t>(count) * sizeof(int64_t));
}

// Reads a float32 2-D .npy: its values row-major, and its shape in rows and cols.
inline Result<std::vector<float>> read_npy_f32(const std::string& path, int64_t& rows, int64_t& cols) {
  std::vector<int64_t> dims;
  HPCTUNE_ASSIGN(const std::vector<char> bytes, npy_detail::read(path, "<f4", sizeof(float), dims));
  if (dims.size() != 2) return err(Errc::kInvalidArgument, path + ": not a 2-D array");
  rows = dims[0], cols = dims[1];
  return npy_detail::as_values<float>(bytes);
}

// Reads an int64 1-D .npy.
inline Result<std::vector<int64_t>> read_npy_i64(const std::string& path) {
  std::vector<int64_t> dims;
  HPCTUNE_ASSIGN(const std::vector<char> bytes, npy_detail::read(path, "<i8", sizeof(int64_t), dims));
  if (dims.size() != 1) return err(Errc::kInvalidArgument, path + ": not a 1-D array");
  return npy_detail::as_values<int64_t>(bytes);
}

// The same two from a file already open (`fd`, a regular file, read from offset 0 with pread; not
// closed), named `shown` in messages: for files opened without following links
// (common/safe_open.h), read without opening their name again.
inline Result<std::vector<float>> read_npy_f32(int fd, const std::string& shown, int64_t& rows, int64_t& cols) {
  std::vector<int64_t> dims;
  HPCTUNE_ASSIGN(const std::vector<char> bytes, npy_detail::read_fd(fd, shown, "<f4", sizeof(float), dims));
  if (dims.size() != 2) return err(Errc::kInvalidArgument, shown + ": not a 2-D array");
  rows = dims[0], cols = dims[1];
  return npy_detail::as_values<float>(bytes);
}

inline Result<std::vector<int64_t>> read_npy_i64(int fd, const std::string& shown) {
  std::vector<int64_t> dims;
  HPCTUNE_ASSIGN(const std::vector<char> bytes, npy_detail::read_fd(fd, shown, "<i8", sizeof(int64_t), dims));
  if (dims.size() != 1) return err(Errc::kInvalidArgument, shown + ": not a 1-D array");
  return npy_detail::as_values<int64_t>(bytes);
}

namespace npy_detail {

// IEEE 754 binary16 (NumPy's float16, a mixed-precision model's outputs) as a float.
inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1Fu, fraction = h & 0x3FFu;
  if (exponent == 0) return (sign ? -1.0f : 1.0f) * std::ldexp(static_cast<float>(fraction), -24);  // zero, subnormal
  const uint32_t bits = exponent == 0x1F ? sign | 0x7F800000u | (fraction << 13)                // inf, NaN
                                         : sign | ((exponent + 112) << 23) | (fraction << 13);
  return std::bit_cast<float>(bits);
}

// Every element of `bytes` read as `Stored`, as T.
template <typename T, typename Stored>
std::vector<T> converted(const std::vector<char>& bytes) {
  std::vector<T> out(bytes.size() / sizeof(Stored));
  for (size_t i = 0; i < out.size(); ++i) {
    Stored v;
    std::memcpy(&v, bytes.data() + i * sizeof v, sizeof v);
    if constexpr (std::is_same_v<Stored, uint16_t> && std::is_floating_point_v<T>) out[i] = static_cast<T>(half_to_float(v));
    else out[i] = static_cast<T>(v);
  }
  return out;
}

// `bytes` of the dtype `descr` (one of the tables below) as T; the type is chosen once.
template <typename T>
std::vector<T> as(const std::string& descr, const std::vector<char>& bytes) {
  if (descr == "<f2") return converted<T, uint16_t>(bytes);  // binary16, converted by half_to_float
  if (descr == "<f4") return converted<T, float>(bytes);
  if (descr == "<f8") return converted<T, double>(bytes);
  if (descr == "|b1" || descr == "|u1") return converted<T, uint8_t>(bytes);
  if (descr == "|i1") return converted<T, int8_t>(bytes);
  if (descr == "<i2") return converted<T, int16_t>(bytes);
  if (descr == "<u2") return converted<T, uint16_t>(bytes);
  if (descr == "<i4") return converted<T, int32_t>(bytes);
  if (descr == "<u4") return converted<T, uint32_t>(bytes);
  if (descr == "<u8") return converted<T, uint64_t>(bytes);  // above 2^63 - 1: refused by the caller
  return converted<T, int64_t>(bytes);                       // <i8
}

// What a user's program may write: every little-endian float for values, every integer (and bool)
// for class lists.
inline constexpr std::initializer_list<Dtype> kRealDtypes = {{"<f4", 4}, {"<f8", 8}, {"<f2", 2}};
inline constexpr std::initializer_list<Dtype> kIntDtypes = {{"<i8", 8}, {"<i4", 4}, {"<i2", 2}, {"|i1", 1}, {"<u8", 8},
                                                            {"<u4", 4}, {"<u2", 2}, {"|u1", 1}, {"|b1", 1}};

}  // namespace npy_detail

// The same for files a user's program wrote, with NumPy's defaults and any other width as well as
// the trainers' types: float16, float32 or float64 values as doubles (2-D; with `one_d_as_column` a
// 1-D array is one column), and integer or bool lists of any width (uint64 values up to 2^63 - 1).
inline Result<std::vector<double>> read_npy_real(int fd, const std::string& shown, int64_t& rows, int64_t& cols,
                                                 bool one_d_as_column = false) {
  std::vector<int64_t> dims;
  size_t which = 0;
  HPCTUNE_ASSIGN(const std::vector<char> bytes, npy_detail::read_fd_any(fd, shown, npy_detail::kRealDtypes, which, dims));
  if (dims.size() == 1 && one_d_as_column) dims.push_back(1);
  if (dims.size() != 2) return err(Errc::kInvalidArgument, shown + ": not a 2-D array");
  rows = dims[0], cols = dims[1];
  return npy_detail::as<double>(npy_detail::kRealDtypes.begin()[which].descr, bytes);
}

inline Result<std::vector<int64_t>> read_npy_int(int fd, const std::string& shown) {
  std::vector<int64_t> dims;
  size_t which = 0;
  HPCTUNE_ASSIGN(const std::vector<char> bytes, npy_detail::read_fd_any(fd, shown, npy_detail::kIntDtypes, which, dims));
  if (dims.size() != 1) return err(Errc::kInvalidArgument, shown + ": not a 1-D array");
  const std::string descr = npy_detail::kIntDtypes.begin()[which].descr;
  if (descr == "<u8") {
    const std::vector<uint64_t> wide = npy_detail::as<uint64_t>(descr, bytes);
    for (size_t i = 0; i < wide.size(); ++i)
      if (wide[i] > uint64_t{INT64_MAX}) return err(Errc::kInvalidArgument, shown + ": element " + std::to_string(i) + " is above 2^63 - 1");
  }
  return npy_detail::as<int64_t>(descr, bytes);
}

}  // namespace hpctune
