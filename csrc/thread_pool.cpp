#include "thread_pool.h"

#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace poincare {

struct ThreadPool::State {
  std::mutex mutex;
  std::condition_variable wake;
  std::condition_variable done;
  std::vector<std::thread> workers;
  const std::function<void(std::size_t, int)>* job = nullptr;
  std::size_t n_tasks = 0;
  std::atomic<std::size_t> next_task{0};
  std::uint64_t generation = 0;
  int busy = 0;
  bool stop = false;
  std::exception_ptr error;
  std::mutex error_mutex;

  // Claims tasks until none is left; the claim counter balances load without a queue.
  void run_tasks(int worker) {
    for (;;) {
      const std::size_t t = next_task.fetch_add(1, std::memory_order_relaxed);
      if (t >= n_tasks) return;
      try {
        (*job)(t, worker);
      } catch (...) {
        std::lock_guard<std::mutex> g(error_mutex);
        if (!error) error = std::current_exception();
        next_task.store(n_tasks, std::memory_order_relaxed);  // stop handing out work
      }
    }
  }

  void worker_loop(int worker) {
    std::uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex);
        wake.wait(lock, [&] { return stop || generation != seen; });
        if (stop) return;
        seen = generation;
      }
      run_tasks(worker);
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (--busy == 0) done.notify_all();
      }
    }
  }
};

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {}

ThreadPool::~ThreadPool() {
  if (state_ == nullptr) return;
  if (owner_pid_ != getpid()) return;  // the parent's threads do not exist here: abandon them
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stop = true;
  }
  state_->wake.notify_all();
  for (auto& w : state_->workers) w.join();
  delete state_;
}

void ThreadPool::start_workers() {
  // After fork() the child inherits the State (and maybe a locked mutex) but none of the
  // workers; it is deliberately leaked and a fresh one built.
  state_ = new State();
  owner_pid_ = getpid();
  for (int w = 1; w < n_threads_; ++w)
    state_->workers.emplace_back([w, s = state_] { s->worker_loop(w); });
}

void ThreadPool::parallel_for(std::size_t n_tasks,
                              const std::function<void(std::size_t, int)>& fn) {
  if (n_tasks == 0) return;
  if (n_threads_ == 1 || n_tasks == 1) {
    for (std::size_t t = 0; t < n_tasks; ++t) fn(t, 0);
    return;
  }
  if (state_ == nullptr || owner_pid_ != getpid()) start_workers();
  State& s = *state_;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.job = &fn;
    s.n_tasks = n_tasks;
    s.next_task.store(0, std::memory_order_relaxed);
    s.error = nullptr;
    s.busy = static_cast<int>(s.workers.size());
    ++s.generation;
  }
  s.wake.notify_all();
  s.run_tasks(0);
  {
    std::unique_lock<std::mutex> lock(s.mutex);
    s.done.wait(lock, [&] { return s.busy == 0; });
    s.job = nullptr;
  }
  if (s.error) std::rethrow_exception(s.error);
}

}  // namespace poincare
