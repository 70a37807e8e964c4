#include "file_frame.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "crc32.h"

namespace poincare::format {

namespace {

constexpr char kEndMagic[4] = {'P', 'E', 'N', 'D'};
constexpr std::size_t kTableTail = 8 + 8 + 4;  // block bytes, block count, the table's CRC

std::vector<unsigned char> slurp(const std::string& path) {
  std::size_t size = 0;
  const int fd = open_regular_file(path, size);
  std::vector<unsigned char> data(size);
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

void Writer::write_file(const std::string& path) {
  // The block table: one CRC per block of everything written so far, then its own CRC.
  const std::size_t covered = buf_.size();
  const std::uint64_t n_blocks = (covered + kBlockBytes - 1) / kBlockBytes;
  for (std::size_t b = 0; b < n_blocks; ++b) {
    const std::size_t at = b * kBlockBytes;
    put(crc32_update(0, buf_.data() + at, std::min(kBlockBytes, covered - at)));
  }
  put<std::uint64_t>(kBlockBytes);
  put(n_blocks);
  put(crc32_update(0, buf_.data() + covered, buf_.size() - covered));
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

Reader::Reader(std::string path, std::vector<unsigned char> data, std::size_t end,
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
