// grid.h — how the CUDA emulator runs a grid: blocks one after another on the launching host thread; the
// threads of a block as cooperative fibers (fiber.h) that run until they reach a barrier: __syncthreads
// (all live threads of the block), or a warp intrinsic (the lanes of its mask, which then exchange values
// in lockstep). The order (schedule.h) is by index or seeded-random. Errors a GPU would hang on or
// leave undefined are reported instead: a deadlock (threads waiting at a barrier nobody else reaches),
// a warp intrinsic whose mask leaves out the calling lane, names an exited lane, or differs from the
// mask of the other lanes, and a shuffle from a lane outside the mask.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <numeric>
#include <string>
#include <vector>

#include "cuda/emu/fiber.h"
#include "cuda/emu/schedule.h"

namespace embshard::emu {

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
  constexpr dim3(uint3 u) : x(u.x), y(u.y), z(u.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};

constexpr int kWarpSize = 32;

// A kernel call with its arguments already bound (launch.h): every emulated thread runs fn(ctx).
struct KernelBody {
  void (*fn)(const void*);
  const void* ctx;
};

class BlockRun;

struct EmuThread {
  enum State { NotStarted, Ready, Running, Blocked, Done };
  uint3 idx{0, 0, 0};
  unsigned linear = 0, lane = 0, warp = 0;
  State state = NotStarted;
  Context ctx;
  Stack* stack = nullptr;
  BlockRun* block = nullptr;
};

// The lanes of one warp meeting at warp intrinsics. Values are exchanged through two slot banks used
// alternately, so a lane may deposit its next value while a slower lane still reads the previous one.
struct WarpState {
  unsigned exists = 0;   // lanes that exist (a block's last warp may be partial)
  unsigned live = 0;     // lanes that have not exited
  unsigned arrived = 0;  // lanes waiting at the current intrinsic
  unsigned expect = 0;   // the mask of the current intrinsic
  uint64_t gen = 0;      // intrinsics completed
  std::vector<unsigned> waiters;
  uint64_t slot[2][kWarpSize];
};

class BlockRun {
 public:
  // Runs block `bidx` of the launch to completion. Returns false with error() set when it could not.
  bool run(dim3 grid, dim3 block, uint3 bidx, size_t smemBytes, KernelBody body, Rng* rng, uint8_t smemFill) {
    grid_ = grid;
    block_ = block;
    bidx_ = bidx;
    body_ = body;
    rng_ = rng;
    error_.clear();
    const unsigned n = block.x * block.y * block.z;
    threads_.resize(n);
    const unsigned nw = (n + kWarpSize - 1) / kWarpSize;
    warps_.assign(nw, WarpState{});
    for (unsigned w = 0; w < nw; ++w) {
      const unsigned lanes = std::min<unsigned>(kWarpSize, n - w * kWarpSize);
      warps_[w].exists = warps_[w].live = lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1);
    }
    ready_.clear();
    for (unsigned i = 0; i < n; ++i) {
      EmuThread& t = threads_[i];
      t.linear = i;
      t.idx = uint3{i % block.x, (i / block.x) % block.y, i / (block.x * block.y)};
      t.lane = i % kWarpSize;
      t.warp = i / kWarpSize;
      t.state = EmuThread::NotStarted;
      t.stack = nullptr;
      t.block = this;
      ready_.push_back(i);
    }
    live_ = n;
    syncArrived_ = 0;
    syncWaiters_.clear();
    smem_.resize(smemBytes);
    if (smemBytes) std::memset(smem_.data(), smemFill, smemBytes);
    while (!ready_.empty() && error_.empty()) {
      size_t k = 0;
      if (rng_) {
        k = static_cast<size_t>(rng_->below(ready_.size()));
        std::swap(ready_[0], ready_[k]);
      }
      EmuThread& t = threads_[ready_.front()];
      ready_.pop_front();
      if (t.state == EmuThread::NotStarted) {
        t.stack = pool().take();
        make_context(t.ctx, *t.stack, &fiber_main, &t);
      }
      t.state = EmuThread::Running;
      current() = &t;
      switch_context(sched_, t.ctx);
      current() = nullptr;
      if (t.state == EmuThread::Done) {
        pool().give(t.stack);
        t.stack = nullptr;
      }
    }
    if (error_.empty() && live_ > 0) {
      unsigned atSync = 0, atWarp = 0;
      for (const EmuThread& t : threads_)
        if (t.state == EmuThread::Blocked) (syncWaiterOf(t.linear) ? atSync : atWarp)++;
      error_ = "deadlock: " + std::to_string(live_) + " thread(s) never finished (" + std::to_string(atSync) +
               " waiting in __syncthreads, " + std::to_string(atWarp) + " in a warp intrinsic)";
    }
    for (EmuThread& t : threads_)  // abandoned fibers (after an error): their stacks go back unused
      if (t.stack) {
        pool().give(t.stack);
        t.stack = nullptr;
      }
    return error_.empty();
  }

  const std::string& error() const { return error_; }
  uint3 block_idx() const { return bidx_; }
  dim3 block_dim() const { return block_; }
  dim3 grid_dim() const { return grid_; }
  uint8_t* dynamic_smem() { return smem_.data(); }

  static EmuThread*& current() {
    static thread_local EmuThread* t = nullptr;
    return t;
  }
  static BlockRun& of_current() { return *current()->block; }

  // __syncthreads(): waits until every live thread of the block has arrived.
  void syncthreads(EmuThread& t) {
    ++syncArrived_;
    if (syncArrived_ == live_) {
      release_sync();
      return;
    }
    syncWaiters_.push_back(t.linear);
    block_self(t);
  }

  // One meeting of lanes at a warp intrinsic: the slot bank holding their values and the lanes that met
  // (kept by each lane: a faster lane may already have opened the next meeting, with another mask).
  struct Meeting {
    int bank;
    unsigned mask;
  };
  // The lanes of `mask` meet; `value` is deposited before the meeting.
  Meeting warp_meet(EmuThread& t, unsigned mask, uint64_t value, const char* what) {
    WarpState& w = warps_[t.warp];
    const unsigned me = 1u << t.lane;
    mask &= w.exists;
    if (!(mask & me)) fail(t, std::string(what) + ": the calling lane " + std::to_string(t.lane) + " is not in its mask");
    if (mask & ~w.live) fail(t, std::string(what) + ": its mask names a lane that has exited");
    if (w.arrived == 0) w.expect = mask;
    else if (mask != w.expect) fail(t, std::string(what) + ": lanes of one warp disagree on the mask");
    const int bank = static_cast<int>(w.gen & 1);
    w.slot[bank][t.lane] = value;
    w.arrived |= me;
    if (w.arrived == w.expect) {
      w.arrived = 0;
      ++w.gen;
      for (unsigned l : w.waiters) wake(threads_[t.warp * kWarpSize + l]);
      w.waiters.clear();
    } else {
      w.waiters.push_back(t.lane);
      block_self(t);
    }
    return Meeting{bank, mask};
  }
  const WarpState& warp_of(const EmuThread& t) const { return warps_[t.warp]; }

  // A fuzzing preemption point (atomics): with a seed, sometimes lets another thread run first.
  void maybe_yield(EmuThread& t) {
    if (!rng_ || !rng_->coin()) return;
    ready_.push_back(t.linear);
    t.state = EmuThread::Ready;
    switch_context(t.ctx, sched_);
  }

  [[noreturn]] void fail(EmuThread& t, const std::string& why) {
    if (error_.empty())
      error_ = "thread (" + std::to_string(t.idx.x) + "," + std::to_string(t.idx.y) + "," + std::to_string(t.idx.z) + ") of block (" +
               std::to_string(bidx_.x) + "," + std::to_string(bidx_.y) + "," + std::to_string(bidx_.z) + "): " + why;
    t.state = EmuThread::Blocked;
    switch_context(t.ctx, sched_);
    __builtin_unreachable();  // an abandoned fiber is never resumed
  }

 private:
  static StackPool& pool() {
    static thread_local StackPool p;
    return p;
  }

  static void fiber_main(void* arg) {
    EmuThread& t = *static_cast<EmuThread*>(arg);
    BlockRun& b = *t.block;
    b.body_.fn(b.body_.ctx);
    b.on_exit(t);
  }

  void on_exit(EmuThread& t) {
    t.state = EmuThread::Done;
    --live_;
    WarpState& w = warps_[t.warp];
    w.live &= ~(1u << t.lane);
    if (w.arrived && (w.expect & (1u << t.lane)) && error_.empty())
      error_ = "a lane exited while the other lanes of its warp wait for it in a warp intrinsic";
    if (syncArrived_ > 0 && syncArrived_ == live_) release_sync();
    switch_context(t.ctx, sched_);
    __builtin_unreachable();
  }

  void release_sync() {
    syncArrived_ = 0;
    for (unsigned i : syncWaiters_) wake(threads_[i]);
    syncWaiters_.clear();
  }
  bool syncWaiterOf(unsigned i) const { return std::find(syncWaiters_.begin(), syncWaiters_.end(), i) != syncWaiters_.end(); }

  void wake(EmuThread& t) {
    t.state = EmuThread::Ready;
    ready_.push_back(t.linear);
  }
  void block_self(EmuThread& t) {
    t.state = EmuThread::Blocked;
    switch_context(t.ctx, sched_);
  }

  dim3 grid_, block_;
  uint3 bidx_{0, 0, 0};
  KernelBody body_{nullptr, nullptr};
  Rng* rng_ = nullptr;
  Context sched_;
  std::vector<EmuThread> threads_;
  std::vector<WarpState> warps_;
  std::deque<unsigned> ready_;
  unsigned live_ = 0, syncArrived_ = 0;
  std::vector<unsigned> syncWaiters_;
  std::vector<uint8_t> smem_;
  std::string error_;
};

// Runs every block of a grid (in index order, or in a seeded random order: i -> (a·i + b) mod n with a
// coprime to n). Returns an empty string, or what went wrong in the first failing block.
inline std::string run_grid(dim3 grid, dim3 block, size_t smemBytes, KernelBody body) {
  static thread_local BlockRun run;
  const unsigned __int128 n = static_cast<unsigned __int128>(grid.x) * grid.y * grid.z;
  const uint64_t seed = schedule_seed();
  Rng rng = launch_rng();
  uint64_t a = 1, b = 0;
  const uint64_t n64 = static_cast<uint64_t>(n);
  if (seed && n64 > 1) {
    a = 1 + rng.below(n64 - 1);
    while (std::gcd(a, n64) != 1) a = a % (n64 - 1) + 1;
    b = rng.below(n64);
  }
  const uint8_t fill = seed ? static_cast<uint8_t>(rng.next()) : 0xff;  // shared memory starts as garbage
  for (uint64_t i = 0; i < n64; ++i) {
    const uint64_t k = static_cast<uint64_t>((static_cast<unsigned __int128>(a) * i + b) % n);
    const uint3 bidx{static_cast<unsigned>(k % grid.x), static_cast<unsigned>((k / grid.x) % grid.y),
                     static_cast<unsigned>(k / (static_cast<uint64_t>(grid.x) * grid.y))};
    if (!run.run(grid, block, bidx, smemBytes, body, seed ? &rng : nullptr, fill)) return run.error();
  }
  return {};
}

}  // namespace embshard::emu
