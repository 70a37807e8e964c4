// The framing every binary file of a saved index shares: a prefix (8-byte magic, format version,
// header size), the payload, and from version 2 a table of CRC-32s, one per 1 MiB block of the
// bytes before it (with its own CRC), then the trailer (CRC-32 of every byte before it, end
// magic). A full load checks the trailer; a fast open maps the file and checks the table and
// the blocks it reads, and leaves the others to verify().
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "errors.h"
#include "mappable_array.h"
#include "mapped_file.h"

namespace poincare::format {

// Version 2: level-0 lists of 2M links in place plus relocated lists (version 1 reserved 4
// repair slots in every list: its graph files are still read, and converted), the rank factors
// in the vectors file, and the block table. Version 3: the vectors file names its code kind and
// holds the code rows after the rank factors (codes.h); graph files are as in version 2.
constexpr std::uint32_t kVersion = 3;
constexpr std::uint32_t kOldestVersion = 1;
constexpr std::size_t kPrefix = 16;  // magic, version, header size
constexpr std::size_t kTrailer = 8;  // crc32, end magic
constexpr std::size_t kBlockBytes = std::size_t{1} << 20;

bool little_endian();

// Writes a file as it is given, one block at a time: a block is checksummed and written once it
// is full, so a save holds one block beside the index, not a second copy of it. finish() adds
// the block table and the trailer and fsyncs; a Writer destroyed before finish() (an error on
// the way) removes its partial file.
class Writer {
 public:
  // Creates (or truncates) `path` (IoError on failure).
  explicit Writer(std::string path);
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  template <typename T>
  void put(const T& v) {
    append(&v, sizeof(T));
  }
  template <typename T>
  void put_array(const T* p, std::size_t n) {
    append(p, n * sizeof(T));
  }
  void pad_to(std::size_t alignment);
  void append(const void* p, std::size_t n);
  // Bytes given so far.
  std::size_t size() const { return flushed_ + block_.size(); }
  // Overwrites 4 bytes at `offset`, which must lie in the block not yet written (the header
  // size, patched right after the header: std::logic_error otherwise, a bug of the caller).
  void patch_u32(std::size_t offset, std::uint32_t v);
  // Writes the last block, the block table and the trailer, and fsyncs the file.
  void finish();

 private:
  void write_out(const unsigned char* p, std::size_t n);
  void flush_block();
  std::string path_;
  int fd_ = -1;
  std::vector<unsigned char> block_;  // the block being filled (< kBlockBytes bytes)
  std::size_t flushed_ = 0;           // bytes written to the file
  std::uint32_t file_crc_ = 0;        // CRC of the bytes written
  std::vector<std::uint32_t> block_crcs_;
};

// A whole file's bytes read into memory, not zeroed first (the read fills every byte): a
// 1M-point index's files are ~500 MB, and fresh memory is what a full load spends most on.
// Plain pages: the buffer is read once, in order, so huge pages would buy no TLB misses back.
class FileBytes {
 public:
  FileBytes() = default;
  explicit FileBytes(std::size_t size)
      : data_(size ? static_cast<unsigned char*>(::operator new(size)) : nullptr), size_(size) {}
  ~FileBytes() { ::operator delete(data_); }
  FileBytes(FileBytes&& o) noexcept : data_(o.data_), size_(o.size_) {
    o.data_ = nullptr;
    o.size_ = 0;
  }
  FileBytes& operator=(FileBytes&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    return *this;
  }
  FileBytes(const FileBytes&) = delete;
  FileBytes& operator=(const FileBytes&) = delete;
  unsigned char* data() { return data_; }
  const unsigned char* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  unsigned char* data_ = nullptr;
  std::size_t size_ = 0;
};

// The per-block checksums of a mapped file: what verify() checks later.
struct BlockCheck {
  std::shared_ptr<const MappedFile> file;
  std::size_t covered = 0;  // bytes the blocks cover (the payload, from offset 0)
  std::vector<std::uint32_t> crcs;
  // Throws FormatError naming the first block in [begin, end) whose CRC differs.
  void verify_range(std::size_t begin, std::size_t end) const;
  void verify_all() const { verify_range(0, covered); }
};

// Bounds-checked cursor over a file's payload (read into memory or mapped).
class Reader {
 public:
  Reader(std::string path, FileBytes data, std::size_t end, std::uint32_t version);
  Reader(std::string path, BlockCheck check, std::size_t end, std::uint32_t version);
  std::uint32_t version() const { return version_; }
  bool mapped() const { return check_.file != nullptr; }
  const BlockCheck& block_check() const { return check_; }
  std::size_t position() const { return pos_; }

  template <typename T>
  T get() {
    T v;
    need(sizeof(T));
    std::memcpy(&v, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  template <typename T>
  std::vector<T> get_array(std::size_t n) {
    check_array<T>(n);
    std::vector<T> v(n);
    if (n) std::memcpy(v.data(), base_ + pos_, n * sizeof(T));
    pos_ += n * sizeof(T);
    return v;
  }
  // n elements copied once into an owned big array (huge pages, not zeroed first): the index's
  // own arrays.
  template <typename T>
  MappableArray<T> get_big_array(std::size_t n) {
    const T* p = view_array<T>(n);
    MappableArray<T> v;
    v.assign(p, p + n);
    return v;
  }
  // Steps over n elements (arrays recomputed from others on load).
  template <typename T>
  void skip_array(std::size_t n) {
    check_array<T>(n);
    pos_ += n * sizeof(T);
  }
  // n elements in place, valid while the Reader lives (the payload is aligned for T where views
  // are taken).
  template <typename T>
  const T* view_array(std::size_t n) {
    check_array<T>(n);
    if (pos_ % alignof(T) != 0) fail("misaligned array");
    const T* p = reinterpret_cast<const T*>(base_ + pos_);
    pos_ += n * sizeof(T);
    return p;
  }
  void skip_to_alignment(std::size_t a) {
    while (pos_ % a) {
      need(1);
      ++pos_;
    }
  }
  void expect_end() const {
    if (pos_ != end_) fail(std::to_string(end_ - pos_) + " unexpected bytes before the trailer");
  }
  [[noreturn]] void fail(const std::string& why) const { throw FormatError(path_ + ": " + why); }

 private:
  template <typename T>
  void check_array(std::size_t n) const {
    if (n > (end_ - pos_) / sizeof(T))
      fail("array of " + std::to_string(n) + " elements runs past the end");
  }
  void need(std::size_t n) const {
    if (n > end_ - pos_) fail("unexpected end of data");
  }
  std::string path_;
  FileBytes data_;
  BlockCheck check_;
  const unsigned char* base_;
  std::size_t end_;
  std::uint32_t version_;
  std::size_t pos_ = kPrefix;
};

// Reads the whole file and checks magic, version, size and the trailer's checksum.
Reader open_checked(const std::string& path, const char (&magic)[8], const char* what);
// Maps the file and checks magic, version, size and the block table's own checksum, not the
// blocks (see BlockCheck). Files of version 1 have no table: they are read as open_checked does.
Reader open_mapped(const std::string& path, const char (&magic)[8], const char* what);
// Starts a file: magic, the current version, a header size to patch.
void start(Writer& w, const char (&magic)[8]);

}  // namespace poincare::format
