// output_pool.h — output buffers handed to JS without a copy. They are left uninitialised (kernels write
// every element) and recycled when JS drops them, so a training loop does not pay page faults on a fresh
// allocation every step; a fresh large buffer is mapped with huge pages, so the misses cost little too.
#pragma once
#include <napi.h>

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <new>
#include <mutex>
#include <utility>
#include <vector>

namespace embshard::addon {

class OutputPool {
 public:
  static OutputPool& get() {
    static OutputPool* p = new OutputPool();  // never destroyed: finalizers may run at teardown
    return *p;
  }
  float* take(size_t n) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      for (size_t i = 0; i < free_.size(); ++i)
        if (free_[i].second == n) {
          float* p = free_[i].first;
          cached_ -= n * 4;
          free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
          return p;
        }
    }
    return allocate(n);
  }
  void give(float* p, size_t n) {
    std::lock_guard<std::mutex> lk(mu_);
    if (free_.size() < kMaxBuffers && cached_ + n * 4 <= kMaxBytes) {
      free_.emplace_back(p, n);
      cached_ += n * 4;
      return;
    }
    release(p, n);
  }

 private:
  // Large outputs get their own 2 MiB-aligned mapping with transparent huge pages: a fresh buffer then
  // faults in a few huge pages instead of thousands of small ones.
  static constexpr size_t kHuge = size_t(2) << 20;
  static size_t mapped_bytes(size_t n) { return (n * 4 + kHuge - 1) & ~(kHuge - 1); }
  static float* allocate(size_t n) {
    if (n * 4 < kHuge) return static_cast<float*>(::operator new(n * 4));
    const size_t bytes = mapped_bytes(n);
    // over-map by 2 MiB so the buffer can start on a huge-page boundary
    void* raw = ::mmap(nullptr, bytes + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) throw std::bad_alloc();
    const uintptr_t base = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t aligned = (base + kHuge - 1) & ~(kHuge - 1);
    if (aligned > base) ::munmap(raw, aligned - base);
    const uintptr_t end = base + bytes + kHuge;
    if (end > aligned + bytes) ::munmap(reinterpret_cast<void*>(aligned + bytes), end - aligned - bytes);
#ifdef MADV_HUGEPAGE
    ::madvise(reinterpret_cast<void*>(aligned), bytes, MADV_HUGEPAGE);
#endif
    return reinterpret_cast<float*>(aligned);
  }
  static void release(float* p, size_t n) {
    if (n * 4 < kHuge) ::operator delete(p);
    else ::munmap(p, mapped_bytes(n));
  }

  static constexpr size_t kMaxBuffers = 16;
  static constexpr size_t kMaxBytes = size_t(512) << 20;
  std::mutex mu_;
  std::vector<std::pair<float*, size_t>> free_;
  size_t cached_ = 0;
};

// An owned output buffer until it is adopted by JS.
class OutBuf {
 public:
  OutBuf() = default;
  explicit OutBuf(size_t n) : p_(n ? OutputPool::get().take(n) : nullptr), n_(n) {}
  ~OutBuf() {
    if (p_) OutputPool::get().give(p_, n_);
  }
  OutBuf(OutBuf&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  OutBuf& operator=(OutBuf&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  float* data() const { return p_; }
  size_t size() const { return n_; }
  explicit operator bool() const { return p_ != nullptr || n_ == 0; }

  // Hands the memory to a JS Float32Array; it returns to the pool when collected.
  Napi::Float32Array adopt(Napi::Env env) {
    size_t n = n_;
    if (n == 0) return Napi::Float32Array::New(env, 0);
    float* p = std::exchange(p_, nullptr);
    n_ = 0;
    Napi::ArrayBuffer ab = Napi::ArrayBuffer::New(
        env, p, n * 4, [](Napi::Env, void* data, size_t* hint) {
          OutputPool::get().give(static_cast<float*>(data), *hint);
          delete hint;
        },
        new size_t(n));
    return Napi::Float32Array::New(env, n, ab, 0);
  }

 private:
  float* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace embshard::addon
