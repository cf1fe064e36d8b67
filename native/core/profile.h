// profile.h — opt-in phase timings for the kernels: with EMBSHARD_PROFILE=1 in the environment each
// profiled call prints one line of "phase ms" pairs to stderr. Costs one branch when off.
#pragma once
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace embshard {

class PhaseTimer {
 public:
  explicit PhaseTimer(const char* name) : name_(name), on_(enabled()), last_(now()) {}
  ~PhaseTimer() {
    if (on_) std::fprintf(stderr, "[embshard] %s%s\n", name_, line_.c_str());
  }
  void mark(const char* phase) {
    if (!on_) return;
    double t = now();
    char buf[64];
    std::snprintf(buf, sizeof buf, " %s %.2f", phase, t - last_);
    line_ += buf;
    last_ = t;
  }
  static bool enabled() {
    static const bool on = std::getenv("EMBSHARD_PROFILE") != nullptr;
    return on;
  }

 private:
  static double now() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
  const char* name_;
  bool on_;
  double last_;
  std::string line_;
};

}  // namespace embshard
