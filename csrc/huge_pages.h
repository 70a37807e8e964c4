// An allocator for the index's big random-access arrays (vectors, level-0 links): allocations of
// 4 MiB or more are 2 MiB-aligned and, on Linux, marked MADV_HUGEPAGE, so a graph walk that
// touches a new row on every distance pays fewer TLB misses (most kernels enable transparent
// huge pages only on request).
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace poincare {

constexpr std::size_t kHugePage = std::size_t{2} << 20;
constexpr std::size_t kHugePageThreshold = std::size_t{4} << 20;

template <typename T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) noexcept {}

  T* allocate(std::size_t n) {
    if (n > SIZE_MAX / sizeof(T)) throw std::bad_alloc();
    const std::size_t bytes = n * sizeof(T);
    if (bytes < kHugePageThreshold) return static_cast<T*>(::operator new(bytes));
    const std::size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    void* p = ::operator new(rounded, std::align_val_t{kHugePage});  // throws bad_alloc
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    // Advice only: where huge pages are unavailable the call fails and nothing changes.
    (void)madvise(p, rounded, MADV_HUGEPAGE);
#endif
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t n) noexcept {
    // n is the count allocate() was given, so the same size test picks the same path.
    if (n * sizeof(T) < kHugePageThreshold)
      ::operator delete(p);
    else
      ::operator delete(p, std::align_val_t{kHugePage});
  }
  // An element constructed without a value is default-initialised, i.e. left as the memory
  // holds it for the trivial types these arrays hold: a resize the caller overwrites next (a
  // load reading a file into place) writes every byte once, not twice.
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const noexcept {
    return true;
  }
  template <typename U>
  bool operator!=(const HugePageAllocator<U>&) const noexcept {
    return false;
  }
};

// A std::vector on that allocator.
template <typename T>
using BigVector = std::vector<T, HugePageAllocator<T>>;

}  // namespace poincare
