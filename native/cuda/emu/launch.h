// launch.h — a kernel launch in the CUDA emulator (what EMB_LAUNCH in cuda/kernel_launch.h expands to
// when compiled with g++): checks the launch configuration against the GPU's limits (an invalid one is
// cudaErrorInvalidConfiguration, reported by cudaGetLastError and nothing runs), binds the arguments by
// value as the GPU does, and runs the grid (grid.h) on the launching host thread, at once (after any
// work still waiting ahead of it on the stream, runtime.h): the stream order is the order of the calls.
// A kernel that deadlocks or misuses a warp intrinsic is cudaErrorLaunchFailure, with what happened
// printed on stderr.
#pragma once
#include <cstdio>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cuda/emu/device_api.h"
#include "cuda/emu/runtime.h"

namespace embshard::emu {

inline bool valid_launch(dim3 g, dim3 b, size_t smem) {
  const uint64_t threads = static_cast<uint64_t>(b.x) * b.y * b.z;
  return g.x >= 1 && g.y >= 1 && g.z >= 1 && g.x <= 2147483647u && g.y <= 65535 && g.z <= 65535 && threads >= 1 && threads <= 1024 &&
         b.x <= 1024 && b.y <= 1024 && b.z <= 64 && smem <= kMaxSharedPerBlock;
}

template <typename... P, typename... A>
void launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "a kernel launch passes one argument per kernel parameter");
  if (!valid_launch(grid, block, smem)) {
    fail(cudaErrorInvalidConfiguration);
    return;
  }
  drain(stream);  // behind an NCCL operation that waits for its peers, the kernel waits too
  struct Bound {
    void (*kernel)(P...);
    std::tuple<std::decay_t<P>...> params;
  };
  const Bound bound{kernel, std::tuple<std::decay_t<P>...>(std::forward<A>(args)...)};
  // each emulated thread receives its own copy of the parameters, as each GPU thread reads its own
  KernelBody body{[](const void* c) {
                    const Bound& b = *static_cast<const Bound*>(c);
                    std::apply(b.kernel, b.params);
                  },
                  &bound};
  const std::string err = run_grid(grid, block, smem, body);
  if (!err.empty()) {
    std::fprintf(stderr, "CUDA emulator: kernel launch <<<(%u,%u,%u), (%u,%u,%u), %zu>>> failed: %s\n", grid.x, grid.y, grid.z, block.x,
                 block.y, block.z, smem, err.c_str());
    fail(cudaErrorLaunchFailure);
  }
}

// The dynamic shared memory of the running block (`extern __shared__ T name[]` on the GPU).
template <typename T>
T* dynamic_shared() {
  return reinterpret_cast<T*>(BlockRun::of_current().dynamic_smem());
}

}  // namespace embshard::emu
