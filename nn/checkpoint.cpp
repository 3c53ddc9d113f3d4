// Checkpoints (checkpoint.h): the file format, manifests and model identity, joining and cutting
// by layer, and loading layers into a network.
#include "nn/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/safe_open.h"
#include "common/text.h"

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

std::string shape_text(const std::vector<int64_t>& dims) {
  std::vector<std::string> parts;
  for (int64_t d : dims) parts.push_back(std::to_string(d));
  return join(parts, "x");
}

// "[64x32, 32]": a layer's parameter shapes, for messages.
std::string shapes_text(const LayerEntry& l) {
  if (l.shapes.empty()) return "no parameters";
  std::vector<std::string> parts;
  for (const auto& s : l.shapes) parts.push_back(shape_text(s));
  return "[" + join(parts, ", ") + "]";
}

std::string input_text(const Shape& s) {
  return std::to_string(s.c) + "x" + std::to_string(s.h) + "x" + std::to_string(s.w);
}

nlohmann::json manifest_json(const Checkpoint& c) {
  if (c.manifest.empty()) return nlohmann::json::object();
  nlohmann::json layers = nlohmann::json::array();
  for (const LayerEntry& l : c.manifest.layers) {
    layers.push_back({{"kind", l.kind}, {"name", l.name}, {"shapes", l.shapes}});
  }
  const Shape& in = c.manifest.input;
  return {{"input", {in.c, in.h, in.w}}, {"layers", layers}, {"first", c.first_layer}, {"last", c.last_layer}};
}

// The manifest from its JSON (untrusted: bounded and type-checked); false when malformed.
bool parse_manifest(const nlohmann::json& j, Checkpoint& c) {
  if (!j.is_object()) return false;
  if (j.empty()) return true;  // no manifest
  constexpr int64_t kMaxDim = int64_t{1} << 40;
  constexpr size_t kMaxLayers = 100000, kMaxBlocks = 64, kMaxRank = 8;
  auto dim = [&](const nlohmann::json& v, int64_t& out) {
    if (!v.is_number_integer() && !v.is_number_unsigned()) return false;
    out = v.get<int64_t>();
    return out >= 1 && out <= kMaxDim;
  };
  auto index = [&](const char* key, size_t& out) {
    auto it = j.find(key);
    if (it == j.end() || !(it->is_number_unsigned() || it->is_number_integer()) || it->get<int64_t>() < 0) return false;
    out = it->get<size_t>();
    return true;
  };
  auto in = j.find("input");
  auto layers = j.find("layers");
  if (in == j.end() || !in->is_array() || in->size() != 3) return false;
  if (!dim((*in)[0], c.manifest.input.c) || !dim((*in)[1], c.manifest.input.h) || !dim((*in)[2], c.manifest.input.w)) {
    return false;
  }
  if (layers == j.end() || !layers->is_array() || layers->empty() || layers->size() > kMaxLayers) return false;
  for (const auto& item : *layers) {
    if (!item.is_object()) return false;
    LayerEntry l;
    auto kind = item.find("kind"), name = item.find("name"), shapes = item.find("shapes");
    if (kind == item.end() || !kind->is_string() || name == item.end() || !name->is_string()) return false;
    if (shapes == item.end() || !shapes->is_array() || shapes->size() > kMaxBlocks) return false;
    l.kind = kind->get<std::string>();
    l.name = name->get<std::string>();
    for (const auto& shape : *shapes) {
      if (!shape.is_array() || shape.empty() || shape.size() > kMaxRank) return false;
      auto& dims = l.shapes.emplace_back();
      int64_t total = 1;
      for (const auto& v : shape) {
        int64_t d = 0;
        if (!dim(v, d)) return false;
        total *= d;
        if (total > kMaxDim) return false;
        dims.push_back(d);
      }
    }
    c.manifest.layers.push_back(std::move(l));
  }
  return index("first", c.first_layer) && index("last", c.last_layer) && c.first_layer <= c.last_layer &&
         c.last_layer <= c.manifest.layers.size();
}

// Whether the parameters and optimizer buffers hold exactly the manifest's layers
// [first_layer, last_layer); "" when they do (or there is no manifest), else what is wrong.
std::string size_problem(const Checkpoint& c) {
  if (c.manifest.empty()) return "";
  if (c.first_layer > c.last_layer || c.last_layer > c.manifest.layers.size()) {
    return "layer range [" + std::to_string(c.first_layer) + ", " + std::to_string(c.last_layer) +
           ") is outside the manifest's " + std::to_string(c.manifest.layers.size()) + " layers";
  }
  const size_t want = c.manifest.num_params(c.first_layer, c.last_layer);
  if (c.params.size() != want) {
    return std::to_string(c.params.size()) + " parameters where the manifest's layers [" +
           std::to_string(c.first_layer) + ", " + std::to_string(c.last_layer) + ") have " + std::to_string(want);
  }
  for (const auto& b : c.optimizer.buffers) {
    if (b.size() != want) return "an optimizer buffer of " + std::to_string(b.size()) + " values for " + std::to_string(want) + " parameters";
  }
  return "";
}

}  // namespace

uint64_t fnv1a64(const std::string& text) noexcept {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

size_t LayerEntry::num_params() const noexcept {
  size_t n = 0;
  for (const auto& dims : shapes) {
    size_t block = 1;
    for (int64_t d : dims) block *= static_cast<size_t>(d);
    n += block;
  }
  return n;
}

size_t Manifest::num_params(size_t first, size_t last) const noexcept {
  size_t n = 0;
  for (size_t i = first; i < last && i < layers.size(); ++i) n += layers[i].num_params();
  return n;
}

Manifest manifest_of(const Network& net) {
  Manifest m;
  m.input = net.input_shape();
  for (size_t i = 0; i < net.num_layers(); ++i) {
    const Layer& l = net.layer(i);
    m.layers.push_back(LayerEntry{l.kind(), l.describe(), l.param_shapes()});
  }
  return m;
}

uint64_t model_identity(const Manifest& m) {
  std::string text = "input=" + input_text(m.input) + "\n";
  for (const LayerEntry& l : m.layers) {
    // A dropout layer's rate is a training setting: only that the layer is there counts.
    text += l.kind == "dropout" ? l.kind : l.name;
    for (const auto& dims : l.shapes) {
      text += ' ';  // appended piecewise: GCC 12 warns (-Wrestrict, falsely) on " " + string here
      text += shape_text(dims);
    }
    text += '\n';
  }
  return fnv1a64(text);
}

Checkpoint checkpoint_of(const Network& net, size_t first, size_t last) {
  Checkpoint c;
  c.manifest = manifest_of(net);
  c.model_hash = model_identity(c.manifest);
  c.first_layer = first;
  c.last_layer = last;
  const auto [offset, count] = net.param_range(first, last);
  c.params.assign(net.params().begin() + static_cast<std::ptrdiff_t>(offset),
                  net.params().begin() + static_cast<std::ptrdiff_t>(offset + count));
  return c;
}

std::string checkpoint_path(const std::string& trial_dir, int model_rank) {
  return (std::filesystem::path(trial_dir) / ("checkpoint-stage" + std::to_string(model_rank) + ".bin")).string();
}

Status write_checkpoint(const std::string& path, const Checkpoint& c) {
  if (const std::string problem = size_problem(c); !problem.empty()) {
    return err(Errc::kInvalidArgument, "checkpoint " + path + " not written: " + problem);
  }
  Writer w;
  w.out.reserve(kHeaderBytes + (c.params.size() * (1 + c.optimizer.buffers.size())) * sizeof(float) + 1024);
  w.out.resize(8);
  std::memcpy(w.out.data(), kMagic, 8);
  w.put<uint32_t>(kCheckpointVersion);
  w.put<uint32_t>(0);
  w.put<uint64_t>(c.run_hash);
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
  w.put<uint64_t>(c.manifest.empty() ? 0 : model_identity(c.manifest));
  const std::string manifest = manifest_json(c).dump();
  w.put<uint64_t>(manifest.size());
  w.out.insert(w.out.end(), manifest.begin(), manifest.end());
  const uint64_t payload = w.out.size() - kHeaderBytes;
  const uint32_t sum = crc(w.out, kHeaderBytes);
  std::memcpy(w.out.data() + 24, &payload, sizeof payload);
  std::memcpy(w.out.data() + 32, &sum, sizeof sum);

  const std::string tmp = path + ".tmp";
  // A link or a FIFO planted at the temporary name (a trial directory unpacked from someone else's
  // archive) is refused: before, the link's target was emptied and written, and a FIFO hung here.
  auto opened = open_own_for_writing(tmp, /*truncate=*/true);
  if (!opened.ok()) return std::move(opened).error().with_context("checkpoint " + path + " not written");
  const int fd = opened->release();
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
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return err(Errc::kNotFound, "no checkpoint at " + path);
    return io_error("open", path);
  }
  auto out = read_checkpoint(fd, path);
  ::close(fd);
  return out;
}

namespace {
// Reads exactly `n` bytes at `offset` into `out`; fewer when the file ends first.
Result<size_t> read_at(int fd, uint8_t* out, size_t n, size_t offset, const std::string& path) {
  size_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd, out + done, n - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return io_error("read", path);
    if (got == 0) break;  // shorter than it was: the caller's checks say so
    done += static_cast<size_t>(got);
  }
  return done;
}
}  // namespace

Result<Checkpoint> read_checkpoint(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return io_error("stat", path);
  if (!S_ISREG(st.st_mode)) return malformed(path, "not a regular file");
  // The header first: the file's size is checked against what it says before anything of that
  // size is allocated (a sparse file of many gigabytes planted as a trial's checkpoint costs no disk).
  std::vector<uint8_t> bytes(kHeaderBytes);
  HPCTUNE_ASSIGN(const size_t head, read_at(fd, bytes.data(), kHeaderBytes, 0, path));
  if (head < kHeaderBytes) return malformed(path, "shorter than its header");
  if (std::memcmp(bytes.data(), kMagic, 8) != 0) return malformed(path, "not a checkpoint (bad magic)");
  Reader h(bytes.data() + 8, kHeaderBytes - 8);
  uint32_t version = 0, pad = 0, sum = 0, pad2 = 0;
  uint64_t hash = 0, payload = 0;
  h.get(version), h.get(pad), h.get(hash), h.get(payload), h.get(sum), h.get(pad2);
  if (version != 1 && version != kCheckpointVersion) {
    return malformed(path, "format version " + std::to_string(version) + ", this build reads " +
                               std::to_string(kCheckpointVersion) + " and 1");
  }
  const uint64_t on_disk = static_cast<uint64_t>(st.st_size) - kHeaderBytes;
  if (payload != on_disk) {
    return malformed(path, "truncated or padded (" + std::to_string(on_disk) + " payload bytes, header says " +
                               std::to_string(payload) + ")");
  }
  if (payload > kMaxCheckpointPayloadBytes) {
    return malformed(path, "its header says " + std::to_string(payload) + " payload bytes, more than the " +
                               std::to_string(kMaxCheckpointPayloadBytes) + " a checkpoint may hold");
  }
  bytes.resize(kHeaderBytes + payload);
  HPCTUNE_ASSIGN(const size_t body, read_at(fd, bytes.data() + kHeaderBytes, payload, kHeaderBytes, path));
  if (body != payload) {
    return malformed(path, "truncated or padded (" + std::to_string(body) + " payload bytes, header says " +
                               std::to_string(payload) + ")");
  }
  if (crc(bytes, kHeaderBytes) != sum) return malformed(path, "checksum mismatch");

  Checkpoint c;
  c.run_hash = hash;
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
  std::string meta, manifest;
  ok = ok && r.bytes(meta);
  if (ok && version >= 2) ok = r.get(c.model_hash) && r.bytes(manifest);
  ok = ok && r.done();
  if (!ok) return malformed(path, "malformed payload");
  c.meta = nlohmann::json::parse(meta, nullptr, false);
  if (c.meta.is_discarded()) return malformed(path, "malformed metadata");
  if (c.epoch < 0 || c.step < 0) return malformed(path, "negative epoch or step");
  if (version >= 2) {
    const nlohmann::json m = nlohmann::json::parse(manifest, nullptr, false);
    if (m.is_discarded() || !parse_manifest(m, c)) return malformed(path, "malformed layer manifest");
    const uint64_t model = c.manifest.empty() ? 0 : model_identity(c.manifest);
    if (model != c.model_hash) return malformed(path, "its model hash is not its manifest's");
    if (const std::string problem = size_problem(c); !problem.empty()) return malformed(path, problem);
  }
  return c;
}

// ---- layout independence -------------------------------------------------------------------------

Result<Checkpoint> merge_checkpoints(std::vector<Checkpoint> parts) {
  if (parts.empty()) return err(Errc::kInvalidArgument, "checkpoint merge: no parts");
  for (const Checkpoint& p : parts) {
    if (p.manifest.empty()) {
      return err(Errc::kInvalidArgument, "checkpoint merge: a part has no layer manifest (a version 1 file)");
    }
  }
  std::stable_sort(parts.begin(), parts.end(),
                   [](const Checkpoint& a, const Checkpoint& b) { return a.first_layer < b.first_layer; });
  const Checkpoint& head = parts.front();
  const size_t layers = head.manifest.layers.size();
  Checkpoint out;
  out.manifest = head.manifest;
  out.model_hash = model_identity(head.manifest);
  out.first_layer = 0;
  out.epoch = head.epoch;
  out.step = head.step;
  out.optimizer.steps = head.optimizer.steps;
  out.optimizer.buffers.resize(head.optimizer.buffers.size());
  out.rngs = head.rngs;
  out.meta = head.meta;
  size_t next = 0;
  for (const Checkpoint& p : parts) {
    if (next == layers) break;  // tiled: the rest are stale
    const std::string which = "the part of layers [" + std::to_string(p.first_layer) + ", " +
                              std::to_string(p.last_layer) + ")";
    if (model_identity(p.manifest) != out.model_hash) {
      return err(Errc::kInvalidArgument, "checkpoint merge: " + which + " is of another model");
    }
    if (p.first_layer != next || p.last_layer <= p.first_layer) {
      return err(Errc::kInvalidArgument, "checkpoint merge: " + which + " does not start at layer " +
                                             std::to_string(next) + " where the previous part ends");
    }
    if (p.epoch != head.epoch || p.step != head.step || p.optimizer.steps != head.optimizer.steps) {
      return err(Errc::kInvalidArgument, "checkpoint merge: " + which + " is of epoch " + std::to_string(p.epoch) +
                                             " step " + std::to_string(p.step) + ", the first part of epoch " +
                                             std::to_string(head.epoch) + " step " + std::to_string(head.step));
    }
    if (p.optimizer.buffers.size() != out.optimizer.buffers.size()) {
      return err(Errc::kInvalidArgument, "checkpoint merge: " + which + " has another optimizer's state");
    }
    out.params.insert(out.params.end(), p.params.begin(), p.params.end());
    for (size_t b = 0; b < p.optimizer.buffers.size(); ++b) {
      out.optimizer.buffers[b].insert(out.optimizer.buffers[b].end(), p.optimizer.buffers[b].begin(),
                                      p.optimizer.buffers[b].end());
    }
    next = p.last_layer;
  }
  if (next != layers) {
    return err(Errc::kInvalidArgument, "checkpoint merge: the parts cover layers [0, " + std::to_string(next) +
                                           ") of " + std::to_string(layers));
  }
  out.last_layer = layers;
  return out;
}

Result<Checkpoint> slice_checkpoint(const Checkpoint& c, size_t first, size_t last) {
  if (c.manifest.empty()) return err(Errc::kInvalidArgument, "checkpoint slice: no layer manifest (a version 1 file)");
  if (first >= last || first < c.first_layer || last > c.last_layer) {
    return err(Errc::kInvalidArgument, "checkpoint slice: layers [" + std::to_string(first) + ", " +
                                           std::to_string(last) + ") are not within the checkpoint's [" +
                                           std::to_string(c.first_layer) + ", " + std::to_string(c.last_layer) + ")");
  }
  Checkpoint out = c;
  out.run_hash = 0;
  out.first_layer = first;
  out.last_layer = last;
  const size_t from = c.manifest.num_params(c.first_layer, first), n = c.manifest.num_params(first, last);
  auto cut = [&](const std::vector<float>& v) {
    return std::vector<float>(v.begin() + static_cast<std::ptrdiff_t>(from),
                              v.begin() + static_cast<std::ptrdiff_t>(from + n));
  };
  out.params = cut(c.params);
  for (size_t b = 0; b < c.optimizer.buffers.size(); ++b) out.optimizer.buffers[b] = cut(c.optimizer.buffers[b]);
  return out;
}

Result<Checkpoint> read_trial_checkpoint_at(int dir_fd, const std::string& trial_dir) {
  std::vector<Checkpoint> parts;
  size_t covered = 0;  // stage files are read until they tile the model
  for (int stage = 0;; ++stage) {
    // A trial's stage files are the trainer's own: a link in their place (planted in a trial's
    // directory) is not followed, a FIFO not waited on.
    const std::string path = checkpoint_path(trial_dir, stage);
    const std::string name = std::filesystem::path(path).filename().string();
    const int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
    if (fd < 0) {
      const int e = errno;
      if (e == ENOENT && stage > 0) break;
      if (e == ENOENT) return err(Errc::kNotFound, "no checkpoint at " + path);
      if (e == ELOOP) return malformed(path, "a symbolic link: not followed");
      return io_error("open", path);
    }
    auto part = read_checkpoint(fd, path);
    ::close(fd);
    if (!part.ok()) {
      if (part.error().code() == Errc::kNotFound && stage > 0) break;
      return std::move(part).error();
    }
    covered = part->last_layer;
    const size_t layers = part->manifest.layers.size();
    parts.push_back(std::move(part).value());
    if (covered >= layers) break;
  }
  auto merged = merge_checkpoints(std::move(parts));
  if (!merged.ok()) return std::move(merged).error().with_context("trial directory " + trial_dir);
  return merged;
}

Result<Checkpoint> read_trial_checkpoint(const std::string& trial_dir) {
  UniqueFd dir(::open(trial_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) {
    if (errno == ENOENT) return err(Errc::kNotFound, "no checkpoint at " + checkpoint_path(trial_dir, 0));
    return io_error("open", trial_dir);
  }
  return read_trial_checkpoint_at(dir.get(), trial_dir);
}

Result<Checkpoint> read_checkpoint_under(const std::string& root, const std::string& path) {
  namespace fs = std::filesystem;
  const std::string top = fs::path(root).lexically_normal().string();
  const std::string full = fs::path(path).lexically_normal().string();
  if (full.size() <= top.size() + 1 || full.compare(0, top.size() + 1, top + "/") != 0)
    return malformed(path, "not below " + root);
  const std::vector<std::string> parts = plain_components(full.substr(top.size() + 1));
  if (parts.empty()) return malformed(path, "not a plain path below " + root);
  UniqueFd at(::open(top.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!at.valid()) return io_error("open", top);
  // Every directory below `root` opened without following a link, the user's own; the last
  // component, a directory of stage files or a checkpoint file, the same.
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    auto next = open_own_at(at.get(), parts[i], /*directory=*/true);
    if (!next.ok() && next.error().code() == Errc::kNotFound) return err(Errc::kNotFound, "no checkpoint at " + path);
    if (!next.ok()) return malformed(path, next.error().message());
    at = std::move(next).value();
  }
  struct stat st {};
  if (::fstatat(at.get(), parts.back().c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return err(Errc::kNotFound, "no checkpoint at " + path);
    return io_error("stat", path);
  }
  auto last = open_own_at(at.get(), parts.back(), /*directory=*/S_ISDIR(st.st_mode));
  if (!last.ok()) return malformed(path, last.error().message());
  return S_ISDIR(st.st_mode) ? read_trial_checkpoint_at(last->get(), path) : read_checkpoint(last->get(), path);
}

Status export_checkpoint(const std::string& trial_dir, const std::string& path) {
  HPCTUNE_ASSIGN(Checkpoint whole, read_trial_checkpoint(trial_dir));
  return write_checkpoint(path, whole);
}

// ---- loading into a network ----------------------------------------------------------------------

Status check_layers(const Manifest& expected, const Manifest& found, size_t first, size_t count) {
  for (size_t i = first; i < first + count; ++i) {
    if (i >= expected.layers.size()) {
      return err(Errc::kInvalidArgument, "layer " + std::to_string(i) + ": the network has only " +
                                             std::to_string(expected.layers.size()) + " layers");
    }
    const LayerEntry& want = expected.layers[i];
    const std::string where = "checkpoint of another model: layer " + std::to_string(i) + " '" + want.name + "'";
    if (i >= found.layers.size()) {
      return err(Errc::kInvalidArgument, where + ": expected " + shapes_text(want) + ", found no layer (the checkpoint's model has " +
                                             std::to_string(found.layers.size()) + " layers)");
    }
    const LayerEntry& got = found.layers[i];
    // A dropout rate is not part of the model (model_identity()).
    const bool same = want.kind == got.kind && want.shapes == got.shapes && (want.kind == "dropout" || want.name == got.name);
    if (!same) {
      return err(Errc::kInvalidArgument, where + ": expected " + shapes_text(want) + ", found '" + got.name + "' " +
                                             shapes_text(got));
    }
  }
  return Status::Ok();
}

Status load_layers(Network& net, const Checkpoint& c, size_t first, size_t count) {
  if (c.manifest.empty()) {
    return err(Errc::kInvalidArgument,
               "checkpoint has no layer manifest (a version 1 file): it can only resume its own trial");
  }
  HPCTUNE_TRY(check_layers(manifest_of(net), c.manifest, first, count));
  if (count == 0) return Status::Ok();
  if (first < c.first_layer || first + count > c.last_layer) {
    return err(Errc::kInvalidArgument, "checkpoint holds layers [" + std::to_string(c.first_layer) + ", " +
                                           std::to_string(c.last_layer) + ") only, not [" + std::to_string(first) +
                                           ", " + std::to_string(first + count) +
                                           "): join a trial's stage files with read_trial_checkpoint()");
  }
  if (c.params.size() != c.manifest.num_params(c.first_layer, c.last_layer)) {
    return err(Errc::kInvalidArgument, "checkpoint's parameters do not fit its manifest");
  }
  const size_t from = c.manifest.num_params(c.first_layer, first);
  const auto [offset, n] = net.param_range(first, first + count);
  std::copy_n(c.params.begin() + static_cast<std::ptrdiff_t>(from), n,
              net.params().begin() + static_cast<std::ptrdiff_t>(offset));
  return Status::Ok();
}

Status load_model(Network& net, const Checkpoint& c, bool skip_output) {
  if (c.manifest.empty()) {
    return err(Errc::kInvalidArgument,
               "checkpoint has no layer manifest (a version 1 file): it can only resume its own trial");
  }
  const Manifest mine = manifest_of(net);
  if (!(mine.input == c.manifest.input)) {
    return err(Errc::kInvalidArgument, "checkpoint of another model: the input shape: expected " +
                                           input_text(mine.input) + ", found " + input_text(c.manifest.input));
  }
  const size_t n = net.num_layers() - (skip_output ? 1 : 0);
  HPCTUNE_TRY(check_layers(mine, c.manifest, 0, n));
  if (!skip_output && c.manifest.layers.size() != mine.layers.size()) {
    return err(Errc::kInvalidArgument, "checkpoint of another model: layer " + std::to_string(n) +
                                           ": expected no layer (the network has " + std::to_string(n) +
                                           "), found '" + c.manifest.layers[n].name + "'");
  }
  return load_layers(net, c, 0, n);
}

}  // namespace hpctune::nn
