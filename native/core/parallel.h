// parallel.h — the host thread pool behind every multi-threaded CPU kernel. One process-wide pool
// (hardware_concurrency threads, the caller included); parallel regions are serialised, and a region
// started from inside a worker runs inline, so kernels may call each other freely.
#pragma once
#include <cstdint>
#include <functional>

namespace embshard {

// Runs fn(begin, end) over [0, n) in chunks of at least `grain` items. Results must not depend on the
// chunking (kernels write disjoint outputs), which keeps every kernel deterministic.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

// Runs fn(t) for t in [0, threads()) with one call per pool thread (for per-thread histograms).
void parallel_threads(const std::function<void(int)>& fn);

// Runs fn(t, k) for every task k in [0, n), the pool threads taking tasks in turn; t is the thread that
// runs it (for per-thread scratch). Results must not depend on which thread runs which task.
void parallel_tasks(int64_t n, const std::function<void(int, int64_t)>& fn);

// The most threads the pool takes (the caller included).
constexpr int kMaxPoolThreads = 1024;

int pool_threads();
// n in [0, kMaxPoolThreads], 0 = hardware concurrency. Throws std::system_error when the system cannot
// start a thread; the pool then keeps the threads it started (pool_threads() says how many).
void set_pool_threads(int n);

}  // namespace embshard
