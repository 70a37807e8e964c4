// A readers-writer lock in which a waiting writer goes first: readers arriving after it wait
// until it has written. It meets the SharedMutex requirements used here (lock, unlock,
// lock_shared, unlock_shared), so std::unique_lock and std::shared_lock take it as they take
// std::shared_mutex. Not recursive, in either mode.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <mutex>

namespace poincare {

class WriterFirstMutex {
 public:
  // Waits until no writer holds the lock and no reader does, then holds it exclusively.
  void lock() {
    std::unique_lock<std::mutex> g(m_);
    ++writers_waiting_;
    writer_turn_.wait(g, [&] { return !writing_ && readers_ == 0; });
    --writers_waiting_;
    writing_ = true;
  }
  // Releases the exclusive hold; the next waiting writer goes before any waiting reader.
  void unlock() {
    std::lock_guard<std::mutex> g(m_);
    writing_ = false;
    if (writers_waiting_ > 0)
      writer_turn_.notify_one();
    else
      reader_turn_.notify_all();
  }
  // Waits while a writer holds the lock or waits for it, then holds it shared.
  void lock_shared() {
    std::unique_lock<std::mutex> g(m_);
    reader_turn_.wait(g, [&] { return !writing_ && writers_waiting_ == 0; });
    ++readers_;
  }
  // Releases a shared hold; the last reader out lets a waiting writer in.
  void unlock_shared() {
    std::lock_guard<std::mutex> g(m_);
    if (--readers_ == 0 && writers_waiting_ > 0) writer_turn_.notify_one();
  }

 private:
  // glibc's rwlock (behind std::shared_mutex) lets new readers in while a writer waits: two
  // threads whose searches overlap keep it shared without a gap, and an add waits for as long as
  // they search (seen as a stalled concurrency test under the sanitizer, where searches are slow).
  std::mutex m_;
  std::condition_variable writer_turn_;
  std::condition_variable reader_turn_;
  std::size_t readers_ = 0;
  std::size_t writers_waiting_ = 0;
  bool writing_ = false;
};

}  // namespace poincare
