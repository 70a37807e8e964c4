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
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "errors.h"
#include "mappable_array.h"
#include "mapped_file.h"

namespace poincare {
class ThreadPool;
}

namespace poincare::format {

// Version 2: level-0 lists of 2M links in place plus relocated lists (version 1 reserved 4
// repair slots in every list: its graph files are still read, and converted), the rank factors
// in the vectors file, and the block table. Version 3: the vectors file names its code kind and
// holds the code rows after the rank factors (codes.h); graph files are as in version 2.
// Version 4: the graph file ends with where each level-0 list's refill begins (HnswGraph::
// refill_start; earlier graphs load without a refill); vectors files are as in version 3.
constexpr std::uint32_t kVersion = 4;
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

// A regular file open for reading at given offsets; closed with its owner.
class FileHandle {
 public:
  FileHandle() = default;
  // Opens `path` (IoError when it cannot be opened, FormatError when it is not a regular file).
  explicit FileHandle(const std::string& path);
  ~FileHandle();
  FileHandle(FileHandle&& o) noexcept;
  FileHandle& operator=(FileHandle&& o) noexcept;
  FileHandle(const FileHandle&) = delete;
  FileHandle& operator=(const FileHandle&) = delete;
  std::size_t size() const { return size_; }
  // Reads exactly n bytes at `offset` into dst; IoError when the read fails or the file ends
  // first (it was cut short while being read).
  void read_at(std::size_t offset, void* dst, std::size_t n) const;

 private:
  std::string path_;
  int fd_ = -1;
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

// Bounds-checked cursor over a file's payload, read one of two ways:
// - streamed (a full load): every piece is read from the file into the array it belongs to and
//   checksummed on the way; expect_end() checks the CRC of every byte against the trailer, and a
//   failure found before that reports a corrupted file as such (fail() checks the CRC first).
//   No copy of the whole file is ever held: the big arrays are read straight into place, in
//   parallel when given a pool.
// - mapped (a fast open): the payload is a private mapping; the blocks are checked by the caller
//   (BlockCheck) and views into it stay valid while the mapping lives.
class Reader {
 public:
  Reader(std::string path, std::string what, FileHandle file, std::size_t end,
         std::uint32_t version, std::uint32_t stored_crc, ThreadPool* pool);
  Reader(std::string path, std::string what, BlockCheck check, std::size_t end,
         std::uint32_t version);
  std::uint32_t version() const { return version_; }
  bool mapped() const { return check_.file != nullptr; }
  const BlockCheck& block_check() const { return check_; }
  std::size_t position() const { return pos_; }

  template <typename T>
  T get() {
    T v;
    need(sizeof(T));
    take(&v, sizeof(T));
    return v;
  }
  template <typename T>
  std::vector<T> get_array(std::size_t n) {
    check_array<T>(n);
    std::vector<T> v(n);
    take(v.data(), n * sizeof(T));
    return v;
  }
  // n elements read once into an owned big array (the index's own arrays), in parallel pieces.
  template <typename T>
  MappableArray<T> get_big_array(std::size_t n) {
    check_array<T>(n);
    MappableArray<T> v;
    v.resize_for_overwrite(n);
    take_big(v.data(), n * sizeof(T));
    return v;
  }
  // Steps over n elements (arrays recomputed from others on load; still checksummed).
  template <typename T>
  void skip_array(std::size_t n) {
    check_array<T>(n);
    skip(n * sizeof(T));
  }
  // n elements in place, valid while the mapping lives (mapped mode only; the payload is aligned
  // for T where views are taken).
  template <typename T>
  const T* view_array(std::size_t n) {
    check_array<T>(n);
    if (!mapped()) throw std::logic_error(path_ + ": view_array on a streamed file");
    if (pos_ % alignof(T) != 0) fail("misaligned array");
    const T* p = reinterpret_cast<const T*>(base_ + pos_);
    pos_ += n * sizeof(T);
    return p;
  }
  void skip_to_alignment(std::size_t a) {
    while (pos_ % a) {
      need(1);
      skip(1);
    }
  }
  // The payload is consumed exactly; streamed, every byte's checksum is checked as well.
  void expect_end();
  // Throws FormatError: `why`, or, streamed, that the file is corrupted when its checksum says so.
  [[noreturn]] void fail(const std::string& why) const;

 private:
  friend Reader open_checked(const std::string& path, const char (&magic)[8], const char* what,
                             ThreadPool* pool);
  template <typename T>
  void check_array(std::size_t n) const {
    if (n > (end_ - pos_) / sizeof(T))
      fail("array of " + std::to_string(n) + " elements runs past the end");
  }
  void need(std::size_t n) const {
    if (n > end_ - pos_) fail("unexpected end of data");
  }
  // Copies n bytes at the cursor to dst and moves past them (streamed: reads and checksums).
  void take(void* dst, std::size_t n);
  // take() for a big array: pieces read and checksummed on the pool's threads.
  void take_big(void* dst, std::size_t n);
  void skip(std::size_t n);
  // Streamed: whether the CRC of every byte before the trailer matches the stored one.
  bool file_checksum_matches() const;
  std::string path_;
  std::string what_;
  FileHandle file_;
  ThreadPool* pool_ = nullptr;
  std::uint32_t crc_ = 0;         // streamed: CRC of the bytes before pos_
  std::uint32_t stored_crc_ = 0;  // streamed: the trailer's CRC
  bool checked_ = false;          // streamed: the whole file's CRC was found to match
  BlockCheck check_;
  const unsigned char* base_ = nullptr;  // mapped: the file's bytes
  std::size_t end_;
  std::uint32_t version_;
  std::size_t pos_ = kPrefix;
};

// Opens a file to be read streamed: checks magic, version and end marker now, and the checksum
// of every byte as it is read (see Reader). `pool` (optional) reads the big arrays in parallel.
Reader open_checked(const std::string& path, const char (&magic)[8], const char* what,
                    ThreadPool* pool = nullptr);
// Maps the file and checks magic, version, size and the block table's own checksum, not the
// blocks (see BlockCheck). Files of version 1 have no table: they are read as open_checked does.
Reader open_mapped(const std::string& path, const char (&magic)[8], const char* what);
// Starts a file: magic, the current version, a header size to patch.
void start(Writer& w, const char (&magic)[8]);

}  // namespace poincare::format
