// A whole file mapped privately: what a fast open reads an index's big arrays from. Pages are
// read from the file when first touched; a write changes this process's copy of the page only
// (copy-on-write), never the file.
#pragma once

#include <cstddef>
#include <string>

namespace poincare {

// Opens `path` read-only and sets `size`; throws IoError when it cannot be opened, FormatError
// when it is not a regular file. The caller closes the descriptor.
int open_regular_file(const std::string& path, std::size_t& size);

class MappedFile {
 public:
  // Throws IoError when the file cannot be opened or mapped, FormatError when it is not a
  // regular file.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Lets the kernel drop this process's pages of [p, p + bytes) (whole pages inside it); they
  // are read from the file again when next touched. Only for bytes this process never wrote:
  // a written page of a private mapping would lose the write.
  void release(const void* p, std::size_t bytes) const;

 private:
  std::string path_;
  unsigned char* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace poincare
