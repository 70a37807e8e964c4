// A big array that is either owned (a BigVector) or a view into a privately mapped file (a fast
// open). Reads never check which; an operation that changes the length copies a mapped array
// into owned memory first, and an in-place write to a mapped one copies the page it touches
// (the mapping is private), so nothing writes to the file and nothing needs a mode check.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>

#include "huge_pages.h"
#include "mapped_file.h"

namespace poincare {

template <typename T>
class MappableArray {
 public:
  MappableArray() = default;
  MappableArray(const MappableArray& o)
      : owned_(o.owned_), mapped_(o.mapped_), mapped_size_(o.mapped_size_) {
    base_ = mapped_ ? o.base_ : owned_.data();
  }
  MappableArray(MappableArray&& o) noexcept
      : owned_(std::move(o.owned_)), mapped_(std::move(o.mapped_)), mapped_size_(o.mapped_size_) {
    base_ = mapped_ ? o.base_ : owned_.data();
    o.mapped_size_ = 0;
    o.base_ = o.owned_.data();
  }
  MappableArray& operator=(MappableArray o) noexcept {
    T* const view = o.base_;
    owned_ = std::move(o.owned_);
    mapped_ = std::move(o.mapped_);
    mapped_size_ = o.mapped_size_;
    base_ = mapped_ ? view : owned_.data();
    return *this;
  }

  const T* data() const { return base_; }
  T* data() { return base_; }
  std::size_t size() const { return mapped_ ? mapped_size_ : owned_.size(); }
  // The owned capacity; a mapped array reports its length (it grows only after owning).
  std::size_t capacity() const { return mapped_ ? mapped_size_ : owned_.capacity(); }
  bool mapped() const { return mapped_ != nullptr; }
  const T& operator[](std::size_t i) const { return base_[i]; }
  T& operator[](std::size_t i) { return base_[i]; }

  void resize(std::size_t n, const T& value = T()) {
    own();
    owned_.resize(n, value);
    base_ = owned_.data();
  }
  // Owned, n elements whose values the caller writes next (left uninitialised).
  void resize_for_overwrite(std::size_t n) {
    drop_mapping();
    owned_.resize(n);
    base_ = owned_.data();
  }
  void reserve(std::size_t n) {
    own();
    owned_.reserve(n);
    base_ = owned_.data();
  }
  template <typename It>
  void assign(It first, It last) {
    drop_mapping();
    owned_.assign(first, last);
    base_ = owned_.data();
  }
  // Views n elements at p inside `file` (which p must point into, aligned for T).
  void map(std::shared_ptr<const MappedFile> file, const T* p, std::size_t n) {
    owned_ = BigVector<T>();
    mapped_ = std::move(file);
    mapped_size_ = n;
    base_ = const_cast<T*>(p);
  }
  // Lets the kernel drop the resident pages of a mapped array that was never written (see
  // MappedFile::release); a no-op for an owned one.
  void release_pages() const {
    if (mapped_) mapped_->release(base_, mapped_size_ * sizeof(T));
  }
  // Copies a mapped array into owned memory (one pass over it) and lets the mapping go.
  void own() {
    if (!mapped_) return;
    BigVector<T> copy(base_, base_ + mapped_size_);
    drop_mapping();
    owned_ = std::move(copy);
    base_ = owned_.data();
  }

 private:
  void drop_mapping() {
    mapped_.reset();
    mapped_size_ = 0;
    base_ = owned_.data();
  }

  BigVector<T> owned_;
  std::shared_ptr<const MappedFile> mapped_;
  std::size_t mapped_size_ = 0;
  T* base_ = nullptr;
};

}  // namespace poincare
