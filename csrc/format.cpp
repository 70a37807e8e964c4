#include "format.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <vector>

#include "crc32.h"
#include "errors.h"

namespace poincare::format {

namespace {

constexpr char kVectorsMagic[8] = {'P', 'I', 'D', 'X', 'V', 'E', 'C', '\0'};
constexpr char kGraphMagic[8] = {'P', 'I', 'D', 'X', 'H', 'N', 'S', 'W'};
constexpr char kEndMagic[4] = {'P', 'E', 'N', 'D'};
constexpr std::size_t kPrefix = 16;  // magic, version, header size
constexpr std::size_t kTrailer = 8;  // crc32, end magic

static_assert(sizeof(float) == 4 && sizeof(double) == 8, "IEEE-754 types required");

bool little_endian() {
  const std::uint16_t one = 1;
  unsigned char b;
  std::memcpy(&b, &one, 1);
  return b == 1;
}

// Accumulates a file in memory; the whole file is written with one checksum at the end.
class Writer {
 public:
  template <typename T>
  void put(const T& v) {
    append(&v, sizeof(T));
  }
  template <typename T>
  void put_array(const T* p, std::size_t n) {
    append(p, n * sizeof(T));
  }
  void pad_to(std::size_t alignment) {
    while (buf_.size() % alignment) buf_.push_back(0);
  }
  void append(const void* p, std::size_t n) {
    const auto* c = static_cast<const unsigned char*>(p);
    buf_.insert(buf_.end(), c, c + n);
  }
  std::size_t size() const { return buf_.size(); }
  void patch_u32(std::size_t offset, std::uint32_t v) { std::memcpy(buf_.data() + offset, &v, 4); }

  void write_file(const std::string& path) {
    const std::uint32_t crc = crc32_update(0, buf_.data(), buf_.size());
    put(crc);
    append(kEndMagic, 4);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw IoError("cannot create " + path + ": " + std::strerror(errno));
    std::size_t done = 0;
    while (done < buf_.size()) {
      const ssize_t w = ::write(fd, buf_.data() + done, buf_.size() - done);
      if (w < 0) {
        if (errno == EINTR) continue;
        const int e = errno;
        ::close(fd);
        throw IoError("cannot write " + path + ": " + std::strerror(e));
      }
      done += static_cast<std::size_t>(w);
    }
    // fsync before the caller renames the manifest into place: a saved index is durable.
    if (::fsync(fd) != 0) {
      const int e = errno;
      ::close(fd);
      throw IoError("cannot fsync " + path + ": " + std::strerror(e));
    }
    if (::close(fd) != 0) throw IoError("cannot close " + path + ": " + std::strerror(errno));
  }

 private:
  std::vector<unsigned char> buf_;
};

// Bounds-checked cursor over a file already verified by checksum.
class Reader {
 public:
  Reader(std::string path, std::vector<unsigned char> data, std::size_t end, std::uint32_t version)
      : path_(std::move(path)), data_(std::move(data)), end_(end), version_(version) {}
  // The file's format version (kOldestVersion..kVersion).
  std::uint32_t version() const { return version_; }
  template <typename T>
  T get() {
    T v;
    need(sizeof(T));
    std::memcpy(&v, data_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  template <typename T>
  std::vector<T> get_array(std::size_t n) {
    if (n > (end_ - pos_) / sizeof(T))
      fail("array of " + std::to_string(n) + " elements runs past the end");
    std::vector<T> v(n);
    if (n) std::memcpy(v.data(), data_.data() + pos_, n * sizeof(T));
    pos_ += n * sizeof(T);
    return v;
  }
  void skip_to_alignment(std::size_t a) {
    while (pos_ % a) {
      need(1);
      ++pos_;
    }
  }
  void seek(std::size_t p) {
    if (p > end_) fail("header size points past the end");
    pos_ = p;
  }
  void expect_end() const {
    if (pos_ != end_) fail(std::to_string(end_ - pos_) + " unexpected bytes before the trailer");
  }
  [[noreturn]] void fail(const std::string& why) const { throw FormatError(path_ + ": " + why); }

 private:
  void need(std::size_t n) const {
    if (n > end_ - pos_) fail("unexpected end of data");
  }
  std::string path_;
  std::vector<unsigned char> data_;
  std::size_t end_;
  std::uint32_t version_;
  std::size_t pos_ = kPrefix;
};

std::vector<unsigned char> slurp(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IoError("cannot open " + path + ": " + std::strerror(errno));
  struct stat st{};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw FormatError(path + ": not a regular file");
  }
  std::vector<unsigned char> data(static_cast<std::size_t>(st.st_size));
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t r = ::read(fd, data.data() + done, data.size() - done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      ::close(fd);
      throw IoError("cannot read " + path);
    }
    done += static_cast<std::size_t>(r);
  }
  ::close(fd);
  return data;
}

// Checks magic, version, size and checksum; returns a Reader positioned after the prefix.
Reader open_checked(const std::string& path, const char (&magic)[8], const char* what) {
  auto data = slurp(path);
  if (data.size() < kPrefix + kTrailer || std::memcmp(data.data(), magic, 8) != 0)
    throw FormatError(path + ": not a poincare_index " + what + " file (bad magic bytes)");
  std::uint32_t version;
  std::memcpy(&version, data.data() + 8, 4);
  if (version < kOldestVersion || version > kVersion)
    throw FormatError(path + ": format version " + std::to_string(version) +
                      " is not supported (this build reads versions " +
                      std::to_string(kOldestVersion) + " to " + std::to_string(kVersion) + ")");
  const std::size_t end = data.size() - kTrailer;
  if (std::memcmp(data.data() + end + 4, kEndMagic, 4) != 0)
    throw FormatError(path + ": truncated " + what + " file (no end marker)");
  std::uint32_t stored;
  std::memcpy(&stored, data.data() + end, 4);
  if (crc32_update(0, data.data(), end) != stored)
    throw FormatError(path + ": checksum mismatch, the " + std::string(what) +
                      " file is corrupted");
  std::uint32_t header_bytes;
  std::memcpy(&header_bytes, data.data() + 12, 4);
  Reader r(path, std::move(data), end, version);
  (void)header_bytes;
  return r;
}

void start(Writer& w, const char (&magic)[8]) {
  if (!little_endian()) throw IoError("saving requires a little-endian machine");
  w.append(magic, 8);
  w.put<std::uint32_t>(kVersion);
  w.put<std::uint32_t>(0);  // header size, patched once the header is written
}

}  // namespace

void write_vectors(const std::string& path, const VectorStorage& s) {
  Writer w;
  start(w, kVectorsMagic);
  w.put<std::uint64_t>(s.dim());
  w.put<double>(s.curvature());
  w.put<std::uint64_t>(s.slots());
  w.put<std::int64_t>(s.id_high_water());
  w.patch_u32(12, static_cast<std::uint32_t>(w.size()));
  {
    std::vector<std::int64_t> ids(s.slots());  // held implicitly while they equal the slots
    s.copy_ids(ids.data());
    w.put_array(ids.data(), ids.size());
  }
  {
    std::vector<std::uint8_t> deleted(s.slots());
    s.copy_deleted(deleted.data());
    w.put_array(deleted.data(), deleted.size());
  }
  w.pad_to(8);
  w.put_array(s.vectors(), s.slots() * s.dim());
  w.write_file(path);
}

VectorStorage read_vectors(const std::string& path) {
  if (!little_endian()) throw IoError("loading requires a little-endian machine");
  Reader r = open_checked(path, kVectorsMagic, "vectors");
  const auto dim = r.get<std::uint64_t>();
  const auto curvature = r.get<double>();
  const auto n = r.get<std::uint64_t>();
  const auto high_water = r.get<std::int64_t>();
  if (dim == 0 || dim > (1u << 20)) r.fail("implausible dimension " + std::to_string(dim));
  if (!(curvature > 0) || !std::isfinite(curvature)) r.fail("invalid curvature");
  if (n > UINT32_MAX) r.fail("implausible number of points");
  auto ids = r.get_array<std::int64_t>(n);
  auto deleted = r.get_array<std::uint8_t>(n);
  r.skip_to_alignment(8);
  if (dim != 0 && n > SIZE_MAX / dim) r.fail("implausible size");
  auto vectors = r.get_array<float>(n * dim);
  r.expect_end();
  try {
    return VectorStorage::restore(dim, curvature, std::move(vectors), std::move(ids),
                                  std::move(deleted), high_water);
  } catch (const InvalidArgument& e) {
    throw FormatError(path + ": " + e.what());
  } catch (const FormatError& e) {
    throw FormatError(path + ": " + e.what());
  }
}

void write_graph(const std::string& path, const HnswGraph& g) {
  Writer w;
  start(w, kGraphMagic);
  const auto& p = g.params();
  w.put<std::uint32_t>(static_cast<std::uint32_t>(p.M));
  w.put<std::uint32_t>(static_cast<std::uint32_t>(p.ef_construction));
  w.put<std::uint64_t>(p.seed);
  w.put<std::int32_t>(g.max_level());
  w.put<std::uint32_t>(g.entry_point());
  w.put<std::uint64_t>(g.nodes());
  w.put<std::uint64_t>(g.relocated_links().size() / g.relocated_stride());
  w.patch_u32(12, static_cast<std::uint32_t>(w.size()));
  w.put_array(g.levels().data(), g.nodes());
  w.pad_to(4);
  w.put_array(g.level0_links().data(), g.level0_links().size());
  w.put_array(g.relocated_links().data(), g.relocated_links().size());
  w.put_array(g.upper_links().data(), g.upper_links().size());
  w.write_file(path);
}

std::unique_ptr<HnswGraph> read_graph(const std::string& path, std::size_t expected_nodes,
                                      const std::uint8_t* deleted) {
  if (!little_endian()) throw IoError("loading requires a little-endian machine");
  Reader r = open_checked(path, kGraphMagic, "graph");
  HnswParams p;
  p.M = static_cast<int>(r.get<std::uint32_t>());
  p.ef_construction = static_cast<int>(r.get<std::uint32_t>());
  p.seed = r.get<std::uint64_t>();
  const auto max_level = r.get<std::int32_t>();
  const auto entry = r.get<std::uint32_t>();
  const auto n = r.get<std::uint64_t>();
  const std::uint64_t n_relocated = r.version() >= 2 ? r.get<std::uint64_t>() : 0;
  if (p.M < 2 || p.M > 256 || p.ef_construction < 1) r.fail("invalid HNSW parameters");
  if (n_relocated > n) r.fail("more relocated link lists than nodes");
  if (n != expected_nodes)
    r.fail("graph has " + std::to_string(n) + " nodes but the vectors file has " +
           std::to_string(expected_nodes));
  if (max_level < -1 || max_level > HnswGraph::kMaxLevel) r.fail("invalid top level");
  auto levels = r.get_array<std::int8_t>(n);
  r.skip_to_alignment(4);
  const std::size_t stride0 = HnswGraph::level0_stride_for(p.M);
  std::vector<std::uint32_t> level0, relocated;
  if (r.version() >= 2) {
    level0 = r.get_array<std::uint32_t>(n * stride0);
    relocated = r.get_array<std::uint32_t>(n_relocated * HnswGraph::relocated_stride_for(p.M));
  } else {
    // Version 1 kept 2M + kRepairSlots slots in every list: lists over 2M are relocated.
    const std::size_t stride_v1 = HnswGraph::relocated_stride_for(p.M);
    const auto lists = r.get_array<std::uint32_t>(n * stride_v1);
    level0.assign(n * stride0, 0);
    for (std::size_t s = 0; s < n; ++s) {
      const std::uint32_t* l = lists.data() + s * stride_v1;
      if (l[0] > stride_v1 - 1) r.fail("node " + std::to_string(s) + " has too many links");
      if (l[0] + 1 <= stride0) {
        std::copy(l, l + stride0, level0.begin() + static_cast<std::ptrdiff_t>(s * stride0));
        continue;
      }
      level0[s * stride0] =
          HnswGraph::kRelocated | static_cast<std::uint32_t>(relocated.size() / stride_v1);
      relocated.insert(relocated.end(), l, l + stride_v1);
    }
  }
  const std::size_t stride_up = 1 + static_cast<std::size_t>(p.M);
  std::size_t n_upper = 0;
  for (std::size_t s = 0; s < n; ++s) {
    if (levels[s] < 0 || levels[s] > HnswGraph::kMaxLevel || (levels[s] > max_level && !deleted[s]))
      r.fail("node " + std::to_string(s) + " has an invalid level");
    n_upper += static_cast<std::size_t>(levels[s]) * stride_up;
  }
  auto upper = r.get_array<std::uint32_t>(n_upper);
  r.expect_end();
  std::unique_ptr<HnswGraph> g;
  try {
    g = HnswGraph::restore(p, std::move(levels), std::move(level0), std::move(relocated),
                           std::move(upper), entry, max_level);
    g->check_integrity(deleted);
  } catch (const InvalidArgument& e) {
    throw FormatError(path + ": " + e.what());
  } catch (const FormatError& e) {
    throw FormatError(path + ": " + e.what());
  }
  return g;
}

}  // namespace poincare::format
