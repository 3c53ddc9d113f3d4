#include "nn/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace hpctune::nn {
namespace {

constexpr char kMagic[8] = {'H', 'P', 'T', 'C', 'K', 'P', 'T', '1'};
constexpr size_t kHeaderBytes = 8 + 4 + 4 + 8 + 8 + 4 + 4;

class Writer {
 public:
  template <class T>
  void put(const T& v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof(T));
  }
  void floats(const std::vector<float>& v) {
    put<uint64_t>(v.size());
    const auto* p = reinterpret_cast<const uint8_t*>(v.data());
    out.insert(out.end(), p, p + v.size() * sizeof(float));
  }
  std::vector<uint8_t> out;
};

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  template <class T>
  bool get(T& v) {
    if (static_cast<size_t>(end_ - p_) < sizeof(T)) return false;
    std::memcpy(&v, p_, sizeof(T));
    p_ += sizeof(T);
    return true;
  }
  bool floats(std::vector<float>& v) {
    uint64_t n = 0;
    if (!get(n) || n > static_cast<uint64_t>(end_ - p_) / sizeof(float)) return false;
    v.resize(n);
    std::memcpy(v.data(), p_, n * sizeof(float));
    p_ += n * sizeof(float);
    return true;
  }
  bool bytes(std::string& s) {
    uint64_t n = 0;
    if (!get(n) || n > static_cast<uint64_t>(end_ - p_)) return false;
    s.assign(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return true;
  }
  bool done() const { return p_ == end_; }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

uint32_t crc(const std::vector<uint8_t>& bytes, size_t from) {
  uLong c = crc32(0L, Z_NULL, 0);
  return static_cast<uint32_t>(crc32_z(c, bytes.data() + from, bytes.size() - from));
}

Error io_error(const std::string& what, const std::string& path) {
  return err(Errc::kIo, "checkpoint: cannot " + what + " " + path + ": " + std::strerror(errno));
}

Error malformed(const std::string& path, const std::string& why) {
  return err(Errc::kInvalidArgument, "checkpoint " + path + " is unusable: " + why);
}

}  // namespace

uint64_t fnv1a64(const std::string& text) noexcept {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

std::string checkpoint_path(const std::string& trial_dir, int model_rank) {
  return (std::filesystem::path(trial_dir) / ("checkpoint-stage" + std::to_string(model_rank) + ".bin")).string();
}

Status write_checkpoint(const std::string& path, const Checkpoint& c) {
  Writer w;
  w.out.reserve(kHeaderBytes + (c.params.size() * (1 + c.optimizer.buffers.size())) * sizeof(float) + 1024);
  w.out.resize(8);
  std::memcpy(w.out.data(), kMagic, 8);
  w.put<uint32_t>(kCheckpointVersion);
  w.put<uint32_t>(0);
  w.put<uint64_t>(c.config_hash);
  w.put<uint64_t>(0);  // payload bytes, patched below
  w.put<uint32_t>(0);  // CRC, patched below
  w.put<uint32_t>(0);
  w.put<int64_t>(c.epoch);
  w.put<int64_t>(c.step);
  w.put<int64_t>(c.optimizer.steps);
  w.put<uint32_t>(static_cast<uint32_t>(c.optimizer.buffers.size()));
  w.put<uint32_t>(static_cast<uint32_t>(c.rngs.size()));
  w.floats(c.params);
  for (const auto& b : c.optimizer.buffers) w.floats(b);
  for (const auto& r : c.rngs) {
    for (uint64_t word : r.words) w.put<uint64_t>(word);
    w.put<double>(r.spare);
    w.put<uint8_t>(r.has_spare ? 1 : 0);
  }
  const std::string meta = c.meta.dump();
  w.put<uint64_t>(meta.size());
  w.out.insert(w.out.end(), meta.begin(), meta.end());
  const uint64_t payload = w.out.size() - kHeaderBytes;
  const uint32_t sum = crc(w.out, kHeaderBytes);
  std::memcpy(w.out.data() + 24, &payload, sizeof payload);
  std::memcpy(w.out.data() + 32, &sum, sizeof sum);

  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("create", tmp);
  size_t done = 0;
  while (done < w.out.size()) {
    const ssize_t n = ::write(fd, w.out.data() + done, w.out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Error e = io_error("write", tmp);
      ::close(fd);
      ::unlink(tmp.c_str());
      return e;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    Error e = io_error("fsync", tmp);
    ::close(fd);
    ::unlink(tmp.c_str());
    return e;
  }
  if (::close(fd) != 0) return io_error("close", tmp);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return io_error("rename onto", path);
  // The rename is durable only once the directory entry is.
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return io_error("open directory", dir);
  const int rc = ::fsync(dfd);
  ::close(dfd);
  if (rc != 0) return io_error("fsync directory", dir);
  return Status::Ok();
}

Result<Checkpoint> read_checkpoint(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return err(Errc::kNotFound, "no checkpoint at " + path);
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error("open", path);
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  in.seekg(0, std::ios::beg);
  if (size < 0) return io_error("read", path);
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  if (!in.read(reinterpret_cast<char*>(bytes.data()), size)) return io_error("read", path);
  if (bytes.size() < kHeaderBytes) return malformed(path, "shorter than its header");
  if (std::memcmp(bytes.data(), kMagic, 8) != 0) return malformed(path, "not a checkpoint (bad magic)");
  Reader h(bytes.data() + 8, kHeaderBytes - 8);
  uint32_t version = 0, pad = 0, sum = 0, pad2 = 0;
  uint64_t hash = 0, payload = 0;
  h.get(version), h.get(pad), h.get(hash), h.get(payload), h.get(sum), h.get(pad2);
  if (version != kCheckpointVersion) {
    return malformed(path, "format version " + std::to_string(version) + ", this build reads " +
                               std::to_string(kCheckpointVersion));
  }
  if (payload != bytes.size() - kHeaderBytes) {
    return malformed(path, "truncated or padded (" + std::to_string(bytes.size() - kHeaderBytes) +
                               " payload bytes, header says " + std::to_string(payload) + ")");
  }
  if (crc(bytes, kHeaderBytes) != sum) return malformed(path, "checksum mismatch");

  Checkpoint c;
  c.config_hash = hash;
  Reader r(bytes.data() + kHeaderBytes, payload);
  uint32_t buffers = 0, rngs = 0;
  bool ok = r.get(c.epoch) && r.get(c.step) && r.get(c.optimizer.steps) && r.get(buffers) && r.get(rngs) &&
            r.floats(c.params);
  if (ok && buffers > 16) ok = false;
  for (uint32_t i = 0; ok && i < buffers; ++i) ok = r.floats(c.optimizer.buffers.emplace_back());
  if (ok && rngs > 1024) ok = false;
  for (uint32_t i = 0; ok && i < rngs; ++i) {
    Rng::State s;
    uint8_t spare = 0;
    for (auto& word : s.words) ok = ok && r.get(word);
    ok = ok && r.get(s.spare) && r.get(spare);
    s.has_spare = spare != 0;
    c.rngs.push_back(s);
  }
  std::string meta;
  ok = ok && r.bytes(meta) && r.done();
  if (!ok) return malformed(path, "malformed payload");
  c.meta = nlohmann::json::parse(meta, nullptr, false);
  if (c.meta.is_discarded()) return malformed(path, "malformed metadata");
  if (c.epoch < 0 || c.step < 0) return malformed(path, "negative epoch or step");
  return c;
}

}  // namespace hpctune::nn
