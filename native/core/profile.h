// profile.h — phase timings for the kernels. A PhaseTimer given a PhaseTimes records each phase's time in
// it (the CPU engine keeps its last backward's: Engine::backward_phases, `backwardPhases()` in JS); with
// EMBSHARD_PROFILE=1 in the environment each profiled call also prints one line of "phase ms" pairs to
// stderr. Costs one branch per phase when neither is asked for.
#pragma once
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace embshard {

// The phases of one call, in order, in ms (at most kMax; names are string literals).
struct PhaseTimes {
  static constexpr int kMax = 8;
  const char* name[kMax] = {};
  double ms[kMax] = {};
  int n = 0;
};

class PhaseTimer {
 public:
  // `record`, when given, is cleared now and receives every phase marked.
  explicit PhaseTimer(const char* name, PhaseTimes* record = nullptr) : name_(name), on_(enabled()), record_(record), last_(now()) {
    if (record_) record_->n = 0;
  }
  ~PhaseTimer() {
    if (on_) std::fprintf(stderr, "[embshard] %s%s\n", name_, line_.c_str());
  }
  void mark(const char* phase) {
    if (!on_ && !record_) return;
    const double t = now();
    if (record_ && record_->n < PhaseTimes::kMax) {
      record_->name[record_->n] = phase;
      record_->ms[record_->n++] = t - last_;
    }
    if (on_) {
      char buf[64];
      std::snprintf(buf, sizeof buf, " %s %.2f", phase, t - last_);
      line_ += buf;
    }
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
  PhaseTimes* record_;
  double last_;
  std::string line_;
};

}  // namespace embshard
