// executor.cc — the per-group worker thread (see executor.h).
#include "comm/executor.h"

namespace embshard::comm {

Executor::Executor() : thread_([this] { loop(); }) {}

Executor::~Executor() { shutdown(); }

void Executor::post(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void Executor::shutdown() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void Executor::loop() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [this] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

}  // namespace embshard::comm
