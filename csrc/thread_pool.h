// A small std::thread pool owned by each index (not OpenMP: faiss-cpu ships its own libgomp, and
// OpenMP workers hang in a forked child).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <functional>

namespace poincare {

class ThreadPool {
 public:
  // n_threads >= 1 counts the calling thread: n_threads - 1 workers are started lazily.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn(task, worker) for every task in [0, n_tasks) on up to size() threads (worker in
  // [0, size())), the caller included, and returns when all are done. The first exception thrown
  // by a task is rethrown here after the others finish. One parallel_for at a time per pool
  // (callers serialise); safe to call again in a forked child.
  void parallel_for(std::size_t n_tasks, const std::function<void(std::size_t, int)>& fn);

 private:
  struct State;
  void start_workers();
  int n_threads_;
  State* state_ = nullptr;  // heap-owned so a forked child can abandon the parent's workers
  pid_t owner_pid_ = 0;
};

}  // namespace poincare
