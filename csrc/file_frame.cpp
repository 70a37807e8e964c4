#include "file_frame.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <stdexcept>

#include "crc32.h"
#include "thread_pool.h"

namespace poincare::format {

namespace {

constexpr char kEndMagic[4] = {'P', 'E', 'N', 'D'};
constexpr std::size_t kTableTail = 8 + 8 + 4;  // block bytes, block count, the table's CRC

// Magic and version from the file's first kPrefix bytes, and its end marker (its last 4; neither
// is read when the file is shorter than a frame): returns the version.
std::uint32_t check_frame(const std::string& path, std::size_t size, const unsigned char* prefix,
                          const unsigned char* end_magic, const char (&magic)[8],
                          const char* what) {
  if (size < kPrefix + kTrailer || std::memcmp(prefix, magic, 8) != 0)
    throw FormatError(path + ": not a poincare_index " + what + " file (bad magic bytes)");
  std::uint32_t version;
  std::memcpy(&version, prefix + 8, 4);
  if (version < kOldestVersion || version > kVersion)
    throw FormatError(path + ": format version " + std::to_string(version) +
                      " is not supported (this build reads versions " +
                      std::to_string(kOldestVersion) + " to " + std::to_string(kVersion) + ")");
  if (std::memcmp(end_magic, kEndMagic, 4) != 0)
    throw FormatError(path + ": truncated " + std::string(what) + " file (no end marker)");
  return version;
}

// The shape of the block table that ends the payload (version 2): the bytes its blocks cover,
// from the table's last kTableTail bytes (`tail`) and the size of the file; 0 when the shape is
// invalid.
std::size_t block_table_covers(const unsigned char* tail, std::size_t size) {
  const std::size_t end = size - kTrailer;
  if (end < kPrefix + kTableTail) return 0;
  std::uint64_t block_bytes, n_blocks;
  std::memcpy(&block_bytes, tail, 8);
  std::memcpy(&n_blocks, tail + 8, 8);
  if (block_bytes != kBlockBytes || n_blocks > (end - kPrefix - kTableTail) / 4) return 0;
  const std::size_t covered = end - kTableTail - 4 * n_blocks;
  if (n_blocks != (covered + kBlockBytes - 1) / kBlockBytes || covered < kPrefix) return 0;
  return covered;
}

// The block table of a mapped file: sets `check` (crcs, covered) after checking its shape and
// its own CRC.
void read_block_table(const std::string& path, const unsigned char* data, std::size_t size,
                      BlockCheck& check) {
  const std::size_t end = size - kTrailer;
  if (end < kPrefix + kTableTail) throw FormatError(path + ": no block table");
  const std::size_t covered = block_table_covers(data + end - kTableTail, size);
  if (covered == 0) throw FormatError(path + ": invalid block table");
  std::uint32_t table_crc;
  std::memcpy(&table_crc, data + end - 4, 4);
  if (crc32_update(0, data + covered, end - 4 - covered) != table_crc)
    throw FormatError(path + ": checksum mismatch in the block table");
  const std::size_t n_blocks = (covered + kBlockBytes - 1) / kBlockBytes;
  check.covered = covered;
  check.crcs.resize(n_blocks);
  if (n_blocks) std::memcpy(check.crcs.data(), data + covered, 4 * n_blocks);
}

// Big arrays are read in pieces of this size, each read and checksummed by one thread.
constexpr std::size_t kPieceBytes = std::size_t{8} << 20;

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

FileHandle::FileHandle(const std::string& path) : path_(path) {
  fd_ = open_regular_file(path, size_);
}

FileHandle::~FileHandle() {
  if (fd_ >= 0) ::close(fd_);
}

FileHandle::FileHandle(FileHandle&& o) noexcept
    : path_(std::move(o.path_)), fd_(o.fd_), size_(o.size_) {
  o.fd_ = -1;
}

FileHandle& FileHandle::operator=(FileHandle&& o) noexcept {
  std::swap(path_, o.path_);
  std::swap(fd_, o.fd_);
  std::swap(size_, o.size_);
  return *this;
}

void FileHandle::read_at(std::size_t offset, void* dst, std::size_t n) const {
  auto* p = static_cast<unsigned char*>(dst);
  while (n > 0) {
    const ssize_t r = ::pread(fd_, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw IoError("cannot read " + path_ + ": " + std::strerror(errno));
    if (r == 0) throw IoError("cannot read " + path_ + ": it ended early (changed while read)");
    p += r;
    offset += static_cast<std::size_t>(r);
    n -= static_cast<std::size_t>(r);
  }
}

Reader::Reader(std::string path, std::string what, FileHandle file, std::size_t end,
               std::uint32_t version, std::uint32_t stored_crc, ThreadPool* pool)
    : path_(std::move(path)),
      what_(std::move(what)),
      file_(std::move(file)),
      pool_(pool),
      stored_crc_(stored_crc),
      end_(end),
      version_(version) {}

Reader::Reader(std::string path, std::string what, BlockCheck check, std::size_t end,
               std::uint32_t version)
    : path_(std::move(path)),
      what_(std::move(what)),
      check_(std::move(check)),
      base_(check_.file->data()),
      end_(end),
      version_(version) {}

void Reader::take(void* dst, std::size_t n) {
  if (n == 0) return;
  if (mapped()) {
    std::memcpy(dst, base_ + pos_, n);
  } else {
    file_.read_at(pos_, dst, n);
    crc_ = crc32_update(crc_, dst, n);
  }
  pos_ += n;
}

void Reader::take_big(void* dst, std::size_t n) {
  if (mapped() || n <= kPieceBytes) return take(dst, n);
  auto* out = static_cast<unsigned char*>(dst);
  const std::size_t pieces = (n + kPieceBytes - 1) / kPieceBytes;
  std::vector<std::uint32_t> crcs(pieces);
  const std::size_t at = pos_;
  // Each thread reads its pieces into place (faulting their fresh pages in on its own core) and
  // checksums them while they are in cache; the pieces' CRCs are joined in file order after.
  auto read_piece = [&](std::size_t i, int) {
    const std::size_t from = i * kPieceBytes, len = std::min(kPieceBytes, n - from);
    file_.read_at(at + from, out + from, len);
    crcs[i] = crc32_update(0, out + from, len);
  };
  if (pool_ != nullptr) {
    pool_->parallel_for(pieces, read_piece);
  } else {
    for (std::size_t i = 0; i < pieces; ++i) read_piece(i, 0);
  }
  for (std::size_t i = 0; i < pieces; ++i)
    crc_ = crc32_combine(crc_, crcs[i], std::min(kPieceBytes, n - i * kPieceBytes));
  pos_ += n;
}

void Reader::skip(std::size_t n) {
  if (mapped()) {
    pos_ += n;
    return;
  }
  std::vector<unsigned char> scratch(std::min(n, kBlockBytes));
  while (n > 0) {
    const std::size_t len = std::min(n, scratch.size());
    take(scratch.data(), len);
    n -= len;
  }
}

bool Reader::file_checksum_matches() const {
  const std::size_t end = file_.size() - kTrailer;
  std::vector<unsigned char> scratch(std::min(end, kBlockBytes));
  std::uint32_t crc = 0;
  for (std::size_t at = 0; at < end; at += scratch.size()) {
    const std::size_t len = std::min(scratch.size(), end - at);
    file_.read_at(at, scratch.data(), len);
    crc = crc32_update(crc, scratch.data(), len);
  }
  return crc == stored_crc_;
}

void Reader::expect_end() {
  if (pos_ != end_) fail(std::to_string(end_ - pos_) + " unexpected bytes before the trailer");
  if (mapped() || checked_) return;
  // The block table (version 2) lies between the payload and the trailer: checksummed too.
  std::vector<unsigned char> table(file_.size() - kTrailer - end_);
  if (!table.empty()) file_.read_at(end_, table.data(), table.size());
  if (crc32_update(crc_, table.data(), table.size()) != stored_crc_)
    throw FormatError(path_ + ": checksum mismatch, the " + what_ + " file is corrupted");
  checked_ = true;
}

void Reader::fail(const std::string& why) const {
  // A streamed file is checked as it is read: what looks invalid before the end may be damage,
  // and damage is reported as such.
  if (!mapped() && !checked_ && !file_checksum_matches())
    throw FormatError(path_ + ": checksum mismatch, the " + what_ + " file is corrupted");
  throw FormatError(path_ + ": " + why);
}

Reader open_checked(const std::string& path, const char (&magic)[8], const char* what,
                    ThreadPool* pool) {
  FileHandle file(path);
  const std::size_t size = file.size();
  unsigned char prefix[kPrefix] = {}, tail[kTableTail + kTrailer] = {};
  if (size >= kPrefix + kTrailer) {
    file.read_at(0, prefix, kPrefix);
    const std::size_t tail_bytes = std::min(size, sizeof tail);
    file.read_at(size - tail_bytes, tail + sizeof tail - tail_bytes, tail_bytes);
  }
  const std::uint32_t version =
      check_frame(path, size, prefix, tail + sizeof tail - 4, magic, what);
  std::uint32_t stored_crc;
  std::memcpy(&stored_crc, tail + kTableTail, 4);
  Reader r(path, what, std::move(file), size - kTrailer, version, stored_crc, pool);
  r.crc_ = crc32_update(0, prefix, kPrefix);
  if (version >= 2) {
    r.end_ = block_table_covers(tail, size);
    if (r.end_ == 0) {
      r.end_ = size - kTrailer;
      r.fail("invalid block table");
    }
  }
  return r;
}

Reader open_mapped(const std::string& path, const char (&magic)[8], const char* what) {
  auto file = std::make_shared<const MappedFile>(path);
  const unsigned char* data = file->data();
  const std::size_t size = file->size();
  const std::uint32_t version = check_frame(
      path, size, data, size >= kPrefix + kTrailer ? data + size - 4 : data, magic, what);
  if (version < 2) return open_checked(path, magic, what);
  BlockCheck check;
  check.file = file;
  read_block_table(path, file->data(), file->size(), check);
  const std::size_t end = check.covered;
  return Reader(path, what, std::move(check), end, version);
}

void start(Writer& w, const char (&magic)[8]) {
  if (!little_endian()) throw IoError("saving requires a little-endian machine");
  w.append(magic, 8);
  w.put<std::uint32_t>(kVersion);
  w.put<std::uint32_t>(0);  // header size, patched once the header is written
}

}  // namespace poincare::format
