// A one-byte lock for per-node link lists: held for a few dozen instructions, so spinning beats a
// 40-byte std::mutex in both memory (one per point) and uncontended cost.
#pragma once

#include <atomic>
#include <thread>

namespace poincare {

class SpinLock {
 public:
  void lock() noexcept {
    for (int spins = 0; flag_.exchange(true, std::memory_order_acquire);) {
      while (flag_.load(std::memory_order_relaxed)) {
        if (++spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
          __builtin_ia32_pause();
#endif
        } else {
          std::this_thread::yield();  // the holder may have been descheduled
        }
      }
    }
  }
  void unlock() noexcept { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

}  // namespace poincare
