// parallel.cc — implementation of the process-wide host thread pool (see parallel.h).
#include "core/parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace embshard {
namespace {

thread_local bool t_inside = false;

class Pool {
 public:
  explicit Pool(int n) { start(n); }
  ~Pool() { stop(); }

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  void resize(int n) {
    std::lock_guard<std::mutex> region(region_);
    stop();
    start(n);
  }

  // Runs job(t) on every thread t in [0, size()), the caller being thread 0.
  void run(const std::function<void(int)>& job) {
    if (t_inside || workers_.empty()) {
      bool was = t_inside;
      t_inside = true;
      for (int t = 0; t < size(); ++t) job(t);
      t_inside = was;
      return;
    }
    std::lock_guard<std::mutex> region(region_);
    {
      std::lock_guard<std::mutex> lk(mu_);
      job_ = &job;
      pending_ = static_cast<int>(workers_.size());
      ++generation_;
    }
    cv_.notify_all();
    t_inside = true;
    job(0);
    t_inside = false;
    std::unique_lock<std::mutex> lk(mu_);
    done_.wait(lk, [&] { return pending_ == 0; });
    job_ = nullptr;
  }

 private:
  void start(int n) {
    quit_ = false;
    // Each worker starts from the generation current now: a region opened before the thread gets to
    // run must still be seen as new by it (reading generation_ inside the thread would miss it).
    uint64_t gen;
    {
      std::lock_guard<std::mutex> lk(mu_);
      gen = generation_;
    }
    for (int t = 1; t < n; ++t) workers_.emplace_back([this, t, gen] { loop(t, gen); });
  }
  void stop() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      quit_ = true;
      ++generation_;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
  }
  void loop(int t, uint64_t seen) {
    for (;;) {
      const std::function<void(int)>* job;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return generation_ != seen; });
        seen = generation_;
        if (quit_) return;
        job = job_;
      }
      t_inside = true;
      (*job)(t);
      t_inside = false;
      {
        std::lock_guard<std::mutex> lk(mu_);
        if (--pending_ == 0) done_.notify_one();
      }
    }
  }

  std::vector<std::thread> workers_;
  std::mutex region_, mu_;
  std::condition_variable cv_, done_;
  const std::function<void(int)>* job_ = nullptr;
  int pending_ = 0;
  uint64_t generation_ = 0;
  bool quit_ = false;
};

int all_cores() {
  unsigned h = std::thread::hardware_concurrency();
  return h == 0 ? 1 : static_cast<int>(h);
}

// The pool's size when the process first uses it: EMBSHARD_THREADS (an integer in [1, kMaxPoolThreads];
// lib/native.ts refuses other values before an addon loads), else every core.
int initial_threads() {
  const char* e = std::getenv("EMBSHARD_THREADS");
  if (e == nullptr || *e == '\0') return all_cores();
  char* end = nullptr;
  const long n = std::strtol(e, &end, 10);
  return *end == '\0' && n >= 1 && n <= kMaxPoolThreads ? static_cast<int>(n) : all_cores();
}

Pool& pool() {
  static Pool* p = new Pool(initial_threads());  // never destroyed: workers may outlive static teardown
  return *p;
}

}  // namespace

int pool_threads() { return pool().size(); }

void set_pool_threads(int n) { pool().resize(n <= 0 ? all_cores() : n); }

void parallel_threads(const std::function<void(int)>& fn) { pool().run(fn); }

void parallel_tasks(int64_t n, const std::function<void(int, int64_t)>& fn) {
  std::atomic<int64_t> next{0};
  parallel_threads([&](int t) {
    for (int64_t k = next.fetch_add(1, std::memory_order_relaxed); k < n; k = next.fetch_add(1, std::memory_order_relaxed)) fn(t, k);
  });
}

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  int threads = t_inside ? 1 : pool_threads();
  if (threads == 1 || n <= grain) {
    fn(0, n);
    return;
  }
  int64_t chunks = std::min<int64_t>((n + grain - 1) / grain, int64_t(threads) * 8);
  int64_t per = (n + chunks - 1) / chunks;
  std::atomic<int64_t> next{0};
  std::exception_ptr first;
  std::mutex first_mu;
  pool().run([&](int) {
    for (;;) {
      int64_t c = next.fetch_add(1, std::memory_order_relaxed);
      if (c >= chunks) return;
      int64_t b = c * per, e = std::min(n, b + per);
      if (b >= e) continue;
      try {
        fn(b, e);
      } catch (...) {
        std::lock_guard<std::mutex> lk(first_mu);
        if (!first) first = std::current_exception();
        next.store(chunks);
      }
    }
  });
  if (first) std::rethrow_exception(first);
}

}  // namespace embshard
