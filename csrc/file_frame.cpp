#include "file_frame.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <stdexcept>

#include "crc32.h"

namespace poincare::format {

namespace {

constexpr char kEndMagic[4] = {'P', 'E', 'N', 'D'};
constexpr std::size_t kTableTail = 8 + 8 + 4;  // block bytes, block count, the table's CRC

FileBytes slurp(const std::string& path) {
  std::size_t size = 0;
  const int fd = open_regular_file(path, size);
  FileBytes data(size);
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

// Magic, version and end marker of a file of `size` bytes at `data`; returns the version.
std::uint32_t check_frame(const std::string& path, const unsigned char* data, std::size_t size,
                          const char (&magic)[8], const char* what) {
  if (size < kPrefix + kTrailer || std::memcmp(data, magic, 8) != 0)
    throw FormatError(path + ": not a poincare_index " + what + " file (bad magic bytes)");
  std::uint32_t version;
  std::memcpy(&version, data + 8, 4);
  if (version < kOldestVersion || version > kVersion)
    throw FormatError(path + ": format version " + std::to_string(version) +
                      " is not supported (this build reads versions " +
                      std::to_string(kOldestVersion) + " to " + std::to_string(kVersion) + ")");
  if (std::memcmp(data + size - 4, kEndMagic, 4) != 0)
    throw FormatError(path + ": truncated " + std::string(what) + " file (no end marker)");
  return version;
}

// The block table before the trailer (version 2): sets `check` (crcs, covered) after checking
// its shape and its own CRC.
void read_block_table(const std::string& path, const unsigned char* data, std::size_t size,
                      BlockCheck& check) {
  const std::size_t end = size - kTrailer;
  if (end < kPrefix + kTableTail) throw FormatError(path + ": no block table");
  std::uint64_t block_bytes, n_blocks;
  std::uint32_t table_crc;
  std::memcpy(&block_bytes, data + end - kTableTail, 8);
  std::memcpy(&n_blocks, data + end - kTableTail + 8, 8);
  std::memcpy(&table_crc, data + end - 4, 4);
  if (block_bytes != kBlockBytes || n_blocks > (end - kPrefix - kTableTail) / 4)
    throw FormatError(path + ": invalid block table");
  const std::size_t covered = end - kTableTail - 4 * n_blocks;
  if (n_blocks != (covered + kBlockBytes - 1) / kBlockBytes)
    throw FormatError(path + ": the block table does not cover the file");
  if (crc32_update(0, data + covered, end - 4 - covered) != table_crc)
    throw FormatError(path + ": checksum mismatch in the block table");
  check.covered = covered;
  check.crcs.resize(n_blocks);
  if (n_blocks) std::memcpy(check.crcs.data(), data + covered, 4 * n_blocks);
}

}  // namespace

bool little_endian() {
  const std::uint16_t one = 1;
  unsigned char b;
  std::memcpy(&b, &one, 1);
  return b == 1;
}

Writer::Writer(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw IoError("cannot create " + path_ + ": " + std::strerror(errno));
  block_.reserve(kBlockBytes);
}

Writer::~Writer() {
  if (fd_ < 0) return;
  // Not finished: an exception is on its way; a partial file must not look like a saved one.
  ::close(fd_);
  ::unlink(path_.c_str());
}

void Writer::pad_to(std::size_t alignment) {
  static const unsigned char zeros[64] = {};
  while (size() % alignment) append(zeros, std::min(alignment - size() % alignment, sizeof zeros));
}

void Writer::append(const void* p, std::size_t n) {
  const auto* c = static_cast<const unsigned char*>(p);
  while (n > 0) {
    const std::size_t take = std::min(n, kBlockBytes - block_.size());
    block_.insert(block_.end(), c, c + take);
    c += take;
    n -= take;
    if (block_.size() == kBlockBytes) flush_block();
  }
}

void Writer::patch_u32(std::size_t offset, std::uint32_t v) {
  if (offset < flushed_ || offset + 4 > size())
    throw std::logic_error(path_ + ": patch at " + std::to_string(offset) +
                           " outside the block not yet written");
  std::memcpy(block_.data() + (offset - flushed_), &v, 4);
}

void Writer::write_out(const unsigned char* p, std::size_t n) {
  file_crc_ = crc32_update(file_crc_, p, n);
  std::size_t done = 0;
  while (done < n) {
    const ssize_t w = ::write(fd_, p + done, n - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw IoError("cannot write " + path_ + ": " + std::strerror(errno));
    }
    done += static_cast<std::size_t>(w);
  }
  flushed_ += n;
}

void Writer::flush_block() {
  if (block_.empty()) return;
  block_crcs_.push_back(crc32_update(0, block_.data(), block_.size()));
  write_out(block_.data(), block_.size());
  block_.clear();
}

void Writer::finish() {
  flush_block();
  // The block table: one CRC per block of the payload, then its own CRC; then the trailer (the
  // CRC of every byte before it, and the end magic).
  std::vector<unsigned char> tail(4 * block_crcs_.size() + kTableTail + kTrailer);
  unsigned char* t = tail.data();
  if (!block_crcs_.empty()) std::memcpy(t, block_crcs_.data(), 4 * block_crcs_.size());
  t += 4 * block_crcs_.size();
  const std::uint64_t block_bytes = kBlockBytes, n_blocks = block_crcs_.size();
  std::memcpy(t, &block_bytes, 8);
  std::memcpy(t + 8, &n_blocks, 8);
  const std::uint32_t table_crc = crc32_update(0, tail.data(), 4 * block_crcs_.size() + 16);
  std::memcpy(t + 16, &table_crc, 4);
  const std::uint32_t crc = crc32_update(file_crc_, tail.data(), tail.size() - kTrailer);
  std::memcpy(t + 20, &crc, 4);
  std::memcpy(t + 24, kEndMagic, 4);
  write_out(tail.data(), tail.size());
  // fsync before the caller renames the manifest into place: a saved index is durable.
  if (::fsync(fd_) != 0) throw IoError("cannot fsync " + path_ + ": " + std::strerror(errno));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) throw IoError("cannot close " + path_ + ": " + std::strerror(errno));
}

void BlockCheck::verify_range(std::size_t begin, std::size_t end) const {
  if (!file) return;
  end = std::min(end, covered);
  for (std::size_t b = begin / kBlockBytes; b * kBlockBytes < end; ++b) {
    const std::size_t at = b * kBlockBytes, len = std::min(kBlockBytes, covered - at);
    if (crc32_update(0, file->data() + at, len) != crcs[b])
      throw FormatError(file->path() + ": checksum mismatch in bytes [" + std::to_string(at) +
                        ", " + std::to_string(at + len) + "): the file is corrupted");
  }
}

Reader::Reader(std::string path, FileBytes data, std::size_t end,
               std::uint32_t version)
    : path_(std::move(path)),
      data_(std::move(data)),
      base_(data_.data()),
      end_(end),
      version_(version) {}

Reader::Reader(std::string path, BlockCheck check, std::size_t end, std::uint32_t version)
    : path_(std::move(path)),
      check_(std::move(check)),
      base_(check_.file->data()),
      end_(end),
      version_(version) {}

Reader open_checked(const std::string& path, const char (&magic)[8], const char* what) {
  auto data = slurp(path);
  const std::uint32_t version = check_frame(path, data.data(), data.size(), magic, what);
  const std::size_t end = data.size() - kTrailer;
  std::uint32_t stored;
  std::memcpy(&stored, data.data() + end, 4);
  if (crc32_update(0, data.data(), end) != stored)
    throw FormatError(path + ": checksum mismatch, the " + std::string(what) +
                      " file is corrupted");
  std::size_t payload_end = end;
  if (version >= 2) {
    BlockCheck table;
    read_block_table(path, data.data(), data.size(), table);
    payload_end = table.covered;
  }
  return Reader(path, std::move(data), payload_end, version);
}

Reader open_mapped(const std::string& path, const char (&magic)[8], const char* what) {
  auto file = std::make_shared<const MappedFile>(path);
  const std::uint32_t version = check_frame(path, file->data(), file->size(), magic, what);
  if (version < 2) return open_checked(path, magic, what);
  BlockCheck check;
  check.file = file;
  read_block_table(path, file->data(), file->size(), check);
  const std::size_t end = check.covered;
  return Reader(path, std::move(check), end, version);
}

void start(Writer& w, const char (&magic)[8]) {
  if (!little_endian()) throw IoError("saving requires a little-endian machine");
  w.append(magic, 8);
  w.put<std::uint32_t>(kVersion);
  w.put<std::uint32_t>(0);  // header size, patched once the header is written
}

}  // namespace poincare::format
