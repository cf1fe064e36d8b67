// executor.h — one worker thread per process-group handle that runs its collectives in call order,
// off the JS event loop and off the libuv pool (a collective may wait on its peers for a long time;
// parking it on a pool thread could starve the pool the peers' own work needs).
#pragma once
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace embshard::comm {

class Executor {
 public:
  Executor();
  ~Executor();  // runs every queued job, then joins
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  void post(std::function<void()> job);
  // Stops accepting jobs, waits for the queue to drain and joins the thread (idempotent).
  void shutdown();

 private:
  void loop();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace embshard::comm
