// engine.h — the interface both backends implement (native/cpu/cpu_engine, native/cuda/cuda_engine).
// All pointers are host pointers (a device backend stages them itself), except the outputs and gradients
// of forward_device / backward_device, which engines with the outputsOnDevice capability read and write
// in their device's memory. Every method either completes
// or throws embshard::Error before changing any state. Methods are called from worker threads, one at
// a time per engine (the addon serialises calls). What a backend can do beyond the interface is told
// by capabilities(), never inferred from its device string.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "core/batch.h"
#include "core/errors.h"
#include "core/host_device.h"
#include "core/pooling.h"
#include "core/profile.h"
#include "core/types.h"

namespace embshard {

struct BackwardResult {
  bool skipped = false;      // non-finite gradients under nonFinite: 'skip'
  int64_t uniqueRows = 0;    // rows updated
};

// What an engine can do, queried by its callers instead of testing the device string.
struct EngineCapabilities {
  // The kernels take raw ids (PreparedBatch::rows left empty) and resolve and range-check them while
  // they read them: forward reports a bad id after its pass (it changes no state), backward before any
  // row changes. Engines without it need prepare_batch to resolve the ids first.
  bool resolvesIds = false;
  // kernel_times() reports device time of the last forward / backward kernels.
  bool kernelTimes = false;
  // forward_device / backward_device keep the outputs and gradients in device memory (the sharded
  // runtime's device exchanges).
  bool outputsOnDevice = false;
};

// Device time of the last forward / backward kernels (staging excluded); -1 when not measured.
struct KernelTimes {
  double forwardMs = -1;   // the fused forward kernel
  double backwardMs = -1;  // linearise + sort + run-length + update kernels
};

// Raw access to the fused arenas, used by checkpoints (core/checkpoint.cc) on either backend.
enum class Arena : uint8_t { Weights = 0, State = 1 };

class Engine {
 public:
  virtual ~Engine() = default;
  virtual std::string device() const = 0;
  virtual EngineCapabilities capabilities() const = 0;
  virtual KernelTimes kernel_times() const { return {}; }
  // The host phases of the last backward (engines that time them; none elsewhere).
  virtual PhaseTimes backward_phases() const { return {}; }
  const CollectionSpec& spec() const { return spec_; }
  const Layout& layout() const { return layout_; }
  int64_t step() const { return step_; }
  void set_step(int64_t t) { step_ = t; }
  void set_learning_rate(float lr) { spec_.optimizer.lr = lr; }

  // pooled: [B × pooledDim] (may be null when pooledDim == 0); seq[f]: [Σlen_f × dim] for each
  // collection feature f with pooling none (null entries for pooled features).
  virtual void forward(const PreparedBatch& b, float* pooled, float* const* seq) = 0;
  // Gradients laid out like forward's outputs, their sizes already checked (check_gradient_sizes in
  // core/gradients.h). Rejects non-finite gradients (core/gradients.h decides: error or skip) before
  // any write, sums all contributions per row in a fixed order, then applies one optimizer update per
  // row. Increments step() unless skipped.
  virtual BackwardResult backward(const PreparedBatch& b, const float* pooledGrad, const float* const* seqGrad) = 0;
  // The same in the memory of the engine's device: `pooled` [B × pooledDim], and every sequence feature's
  // values (or gradients) back to back in `seq`, features in collection order (Σ_f Σlen_f × dim_f floats);
  // engines with the outputsOnDevice capability. The others fail with BACKEND_UNAVAILABLE.
  virtual void forward_device(const PreparedBatch& b, float* pooled, float* seq);
  virtual BackwardResult backward_device(const PreparedBatch& b, const float* pooledGrad, const float* seqGrad);

  // Row access in fp32 (rows already validated by the caller). State: statePerRow floats per row.
  virtual void read_rows(uint32_t table, const uint64_t* rows, int64_t n, float* out) = 0;
  virtual void write_rows(uint32_t table, const uint64_t* rows, int64_t n, const float* values) = 0;
  virtual void read_state(uint32_t table, const uint64_t* rows, int64_t n, float* out) = 0;
  virtual void write_state(uint32_t table, const uint64_t* rows, int64_t n, const float* values) = 0;

  // Byte-level access to the arenas (weights: layout.weightBytes; state: layout.stateFloats * 4).
  virtual void read_raw(Arena a, uint64_t offset, uint64_t bytes, void* dst) = 0;
  virtual void write_raw(Arena a, uint64_t offset, uint64_t bytes, const void* src) = 0;

 protected:
  Engine(CollectionSpec spec, Layout layout) : spec_(std::move(spec)), layout_(std::move(layout)) {}
  CollectionSpec spec_;
  Layout layout_;
  int64_t step_ = 0;
};

inline void Engine::forward_device(const PreparedBatch&, float*, float*) {
  fail("BACKEND_UNAVAILABLE", "the %s engine keeps its outputs in host memory", device().c_str());
}

inline BackwardResult Engine::backward_device(const PreparedBatch&, const float*, const float*) {
  fail("BACKEND_UNAVAILABLE", "the %s engine takes its gradients from host memory", device().c_str());
}

}  // namespace embshard
