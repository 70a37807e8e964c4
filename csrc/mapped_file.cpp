#include "mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "errors.h"

namespace poincare {

int open_regular_file(const std::string& path, std::size_t& size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IoError("cannot open " + path + ": " + std::strerror(errno));
  struct stat st{};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw FormatError(path + ": not a regular file");
  }
  size = static_cast<std::size_t>(st.st_size);
  return fd;
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = open_regular_file(path, size_);
  if (size_ > 0) {
    // Private and writable: a write to a mapped index (after verify()) copies the page it
    // touches; the file stays as it was saved.
    void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      throw IoError("cannot map " + path + ": " + std::strerror(e));
    }
    data_ = static_cast<unsigned char*>(p);
    // Searches touch rows and lists at random: no read-ahead beyond the page asked for.
    (void)::madvise(p, size_, MADV_RANDOM);
  }
  ::close(fd);  // the mapping keeps the file open
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

void MappedFile::release(const void* p, std::size_t bytes) const {
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto from = (reinterpret_cast<std::uintptr_t>(p) + page - 1) / page * page;
  const auto to = (reinterpret_cast<std::uintptr_t>(p) + bytes) / page * page;
  // Advice only: a failure leaves the pages resident, nothing else.
  if (to > from) (void)::madvise(reinterpret_cast<void*>(from), to - from, MADV_DONTNEED);
}

}  // namespace poincare
