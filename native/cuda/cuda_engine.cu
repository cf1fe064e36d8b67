// cuda_engine.cu — CudaEngine, the CUDA twin of the CPU engine (native/cpu): the fused weight and
// optimizer-state arenas live in device memory (one cudaMalloc each), every call stages its host
// inputs through the pinned Stager on the engine's own stream, runs the kernels of forward.cu /
// backward.cu / rows.cu, copies results back and synchronises before returning (the addon runs each
// call on a worker thread, so the event loop stays free). Same math, same order, same rounding as the
// CPU engine: see native/cuda/README.md for what is bitwise equal and what is within tolerance.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <unordered_set>
#include <vector>

#include "core/batch.h"
#include "core/errors.h"
#include "core/gradients.h"
#include "core/init.h"
#include "core/optim.h"
#include "core/parallel.h"
#include "cuda/buffers.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_engine.h"
#include "cuda/kernels.h"
#include "cuda/staging.h"

namespace embshard {

namespace {

using cuda::DevicePtr;
using cuda::DeviceScratch;
using cuda::SlotDesc;
using cuda::TableDesc;

uint64_t align256(uint64_t x) { return (x + 255) & ~255ull; }

// The kernels read resolved rows (PreparedBatch::rows; capabilities().resolvesIds is false), so a batch
// prepared without them must not reach this engine (the row copy would read past an empty vector).
void require_resolved(const PreparedBatch& b) {
  if (static_cast<int64_t>(b.rows.size()) != b.numIds())
    fail("INTERNAL", "the CUDA engine needs resolved ids (prepare_batch with resolveIds = true): %zu rows for %lld ids",
         b.rows.size(), static_cast<long long>(b.numIds()));
}

// Carves consecutive 256-byte aligned pieces out of one device scratch allocation.
class Carver {
 public:
  explicit Carver(void* base) : p_(static_cast<uint8_t*>(base)) {}
  template <typename T>
  T* take(uint64_t count) {
    T* q = reinterpret_cast<T*>(p_);
    p_ += align256(count * sizeof(T));
    return q;
  }

 private:
  uint8_t* p_;
};

class CudaEngine final : public Engine {
 public:
  CudaEngine(const CollectionSpec& spec, const Layout& layout, int device, bool initialize);
  ~CudaEngine() override;
  std::string device() const override { return "cuda:" + std::to_string(device_); }
  // The kernels read resolved rows (prepare_batch resolves them); cudaEvent kernel timing.
  EngineCapabilities capabilities() const override {
    return EngineCapabilities{/*resolvesIds=*/false, /*kernelTimes=*/true, /*outputsOnDevice=*/true};
  }
  KernelTimes kernel_times() const override { return times_; }

  void forward(const PreparedBatch& b, float* pooled, float* const* seq) override { run_forward(b, pooled, seq, nullptr, false); }
  BackwardResult backward(const PreparedBatch& b, const float* pooledGrad, const float* const* seqGrad) override {
    return run_backward(b, pooledGrad, seqGrad, nullptr, false);
  }
  void forward_device(const PreparedBatch& b, float* pooled, float* seq) override { run_forward(b, pooled, nullptr, seq, true); }
  BackwardResult backward_device(const PreparedBatch& b, const float* pooledGrad, const float* seqGrad) override {
    return run_backward(b, pooledGrad, nullptr, seqGrad, true);
  }
  void read_rows(uint32_t table, const uint64_t* rows, int64_t n, float* out) override;
  void write_rows(uint32_t table, const uint64_t* rows, int64_t n, const float* values) override;
  void read_state(uint32_t table, const uint64_t* rows, int64_t n, float* out) override;
  void write_state(uint32_t table, const uint64_t* rows, int64_t n, const float* values) override;
  void read_raw(Arena a, uint64_t offset, uint64_t bytes, void* dst) override;
  void write_raw(Arena a, uint64_t offset, uint64_t bytes, const void* src) override;

 private:
  void use_device() const { EMB_CUDA_CHECK(cudaSetDevice(device_)); }
  void sync() const { EMB_CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  uint8_t* weights() const { return static_cast<uint8_t*>(weights_.get()); }
  float* state() const { return static_cast<float*>(state_.get()); }
  void initialize_tables();
  // Slot descriptors of a batch, and where each sequence feature's values start in a packed buffer.
  std::vector<SlotDesc> slots_of(const PreparedBatch& b, int64_t* seqTotal) const;
  // One batch on the device, carved from the batch buffer: ids, bag offsets, per-sample weights (null
  // without), slot table (these four enqueued host-to-device), and room for the pooled and sequence
  // floats (outputs in forward, gradients in backward).
  struct StagedBatch {
    std::vector<SlotDesc> slots;  // host copy
    int64_t seqTotal = 0;
    uint64_t* rows;
    int64_t* offsets;
    float* weights;
    SlotDesc* slotsDev;
    float* pooled;
    float* seq;
  };
  StagedBatch stage_batch(const PreparedBatch& b);
  // forward / backward with the outputs / gradients in host memory (staged: `seq` per feature) or, onDevice,
  // in this device's memory (`pooled` and `seqDev` device pointers: the kernels write / read them in place).
  void run_forward(const PreparedBatch& b, float* pooled, float* const* seq, float* seqDev, bool onDevice);
  BackwardResult run_backward(const PreparedBatch& b, const float* pooledGrad, const float* const* seqGrad, const float* seqDev,
                              bool onDevice);
  // Row-wise transfers in chunks of at most kChunkBytes of device scratch, and at most half of what the
  // row scratch can grow into beside the tables (they may fill the device), but always at least one row.
  template <typename Fn>
  void in_row_chunks(int64_t n, uint64_t bytesPerRow, Fn&& fn);
  // Keeps only the last occurrence of every row (sequential "last write wins", as on the CPU).
  static void last_writes(const uint64_t* rows, int64_t n, uint64_t width, const float* values, std::vector<uint64_t>& keptRows,
                          std::vector<float>& keptValues, bool* dup);

  static constexpr uint64_t kChunkBytes = 64ull << 20;
  static constexpr uint64_t kMinChunkBytes = 1ull << 20;

  int device_;
  cudaStream_t stream_ = nullptr;
  DevicePtr weights_;
  DevicePtr state_;
  DevicePtr tablesDev_;
  std::vector<TableDesc> tables_;
  uint32_t maxDim_ = 0;
  int endBit_ = 1;
  std::unique_ptr<cuda::Stager> stager_;
  DeviceScratch batch_{"batch inputs and gradients"};
  DeviceScratch sort_{"sort and run-length buffers"};
  DeviceScratch hot_{"hot-row partial sums"};
  DeviceScratch rowsScratch_{"row access"};
  // cudaEvent pairs around the forward kernel and the two backward kernel phases
  cudaEvent_t ev_[4] = {nullptr, nullptr, nullptr, nullptr};
  KernelTimes times_;
};

CudaEngine::CudaEngine(const CollectionSpec& spec, const Layout& layout, int device, bool initialize)
    : Engine(spec, layout), device_(device) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    fail("BACKEND_UNAVAILABLE", "cuda:%d is unavailable: %s (%s)", device, cudaGetErrorString(e), cudaGetErrorName(e));
  }
  if (device < 0 || device >= count)
    fail("BACKEND_UNAVAILABLE", "cuda:%d does not exist: this machine has %d CUDA device(s)", device, count);
  use_device();
  EMB_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  try {
    weights_.reset(cuda::device_alloc(layout_.weightBytes, arena_description(spec_, layout_, false), device_));
    state_.reset(cuda::device_alloc(layout_.stateFloats * 4, arena_description(spec_, layout_, true), device_));
    for (size_t t = 0; t < spec_.tables.size(); ++t) {
      const TableStorage& tl = layout_.tables[t];
      const TableSpec& ts = spec_.tables[t];
      tables_.push_back(TableDesc{tl.weightOffset, tl.rowBytes, tl.stateOffset, tl.statePerRow, tl.rowBase, ts.rows, ts.dim, ts.dtype});
      maxDim_ = std::max(maxDim_, ts.dim);
    }
    endBit_ = std::max(1, key_bits(layout_.totalRows));
    stager_ = std::make_unique<cuda::Stager>();
    for (cudaEvent_t& e : ev_) EMB_CUDA_CHECK(cudaEventCreate(&e));
    tablesDev_.reset(cuda::device_alloc(tables_.size() * sizeof(TableDesc), "the table descriptors", device_));
    stager_->h2d(tablesDev_.get(), tables_.data(), tables_.size() * sizeof(TableDesc), stream_);
    if (layout_.weightBytes) EMB_CUDA_CHECK(cudaMemsetAsync(weights(), 0, layout_.weightBytes, stream_));
    if (layout_.stateFloats) EMB_CUDA_CHECK(cudaMemsetAsync(state(), 0, layout_.stateFloats * 4, stream_));
    if (initialize) initialize_tables();
    sync();
  } catch (...) {
    (void)cudaStreamSynchronize(stream_);
    for (cudaEvent_t e : ev_)
      if (e) (void)cudaEventDestroy(e);
    (void)cudaStreamDestroy(stream_);
    throw;
  }
}

CudaEngine::~CudaEngine() {
  (void)cudaSetDevice(device_);
  (void)cudaStreamSynchronize(stream_);
  stager_.reset();
  batch_.release();
  sort_.release();
  hot_.release();
  rowsScratch_.release();
  for (cudaEvent_t e : ev_)
    if (e) (void)cudaEventDestroy(e);
  tablesDev_.reset();
  state_.reset();
  weights_.reset();
  (void)cudaStreamDestroy(stream_);
}

void CudaEngine::initialize_tables() {
  for (uint32_t t = 0; t < spec_.tables.size(); ++t) {
    const TableSpec& ts = spec_.tables[t];
    const TableDesc& td = tables_[t];
    if (ts.init.kind != InitKind::Normal) {
      cuda::launch_init_table(weights(), td, t, ts.init, spec_.seed, stream_);
      continue;
    }
    // Normal init uses logf / cosf, whose device versions may differ from the host libm in the last
    // bit: compute it with the CPU engine's exact code on the host and upload it.
    const uint64_t chunkRows = std::max<uint64_t>(1, cuda::Stager::kHalfBytes / td.rowBytes);
    std::vector<uint8_t> host(chunkRows * td.rowBytes);
    for (uint64_t r0 = 0; r0 < ts.rows; r0 += chunkRows) {
      const uint64_t nr = std::min(chunkRows, ts.rows - r0);
      parallel_for(static_cast<int64_t>(nr), 1024, [&](int64_t lo, int64_t hi) {
        for (int64_t k = lo; k < hi; ++k) {
          uint8_t* row = host.data() + static_cast<uint64_t>(k) * td.rowBytes;
          const uint64_t r = r0 + static_cast<uint64_t>(k);
          for (uint32_t c = 0; c < ts.dim; ++c)
            store_value(ts.dtype, row, c, init_value(ts.init.kind, ts.init.a, ts.init.b, spec_.seed, t, r * ts.dim + c));
        }
      });
      stager_->h2d(weights() + td.weightOffset + r0 * td.rowBytes, host.data(), nr * td.rowBytes, stream_);
    }
  }
}

std::vector<SlotDesc> CudaEngine::slots_of(const PreparedBatch& b, int64_t* seqTotal) const {
  // sequence features are packed in collection-feature order
  std::vector<int64_t> seqOffset(spec_.features.size(), 0);
  int64_t total = 0;
  for (size_t f = 0; f < spec_.features.size(); ++f) {
    if (spec_.features[f].pooling != Pooling::None) continue;
    seqOffset[f] = total;
    total += sequence_values(spec_, b, static_cast<uint32_t>(f));
  }
  *seqTotal = total;
  std::vector<SlotDesc> slots(static_cast<size_t>(b.F));
  for (int32_t s = 0; s < b.F; ++s) {
    const uint32_t f = b.feature[s];
    const FeatureSpec& fs = spec_.features[f];
    const TableDesc& td = tables_[fs.table];
    slots[s] = SlotDesc{td.weightOffset, td.rowBytes,  td.rowBase, layout_.pooledCol[f], seqOffset[f],
                        b.slotBegin(s),  fs.table,     td.dim,     td.dtype,             fs.pooling};
  }
  return slots;
}

CudaEngine::StagedBatch CudaEngine::stage_batch(const PreparedBatch& b) {
  const int64_t N = b.numIds();
  const int64_t numBags = static_cast<int64_t>(b.F) * b.B;
  const int64_t pooledFloats = b.B * layout_.pooledDim;
  StagedBatch d;
  d.slots = slots_of(b, &d.seqTotal);
  const uint64_t bytes = align256(N * 8ull) + align256((numBags + 1) * 8ull) + align256(b.weights ? N * 4ull : 0) +
                         align256(d.slots.size() * sizeof(SlotDesc)) + align256(pooledFloats * 4ull) + align256(d.seqTotal * 4ull);
  Carver carve(batch_.ensure(bytes, device_));
  d.rows = carve.take<uint64_t>(N);
  d.offsets = carve.take<int64_t>(numBags + 1);
  d.weights = b.weights ? carve.take<float>(N) : nullptr;
  d.slotsDev = carve.take<SlotDesc>(d.slots.size());
  d.pooled = carve.take<float>(pooledFloats);
  d.seq = carve.take<float>(d.seqTotal);

  stager_->h2d(d.rows, b.rows.data(), N * 8ull, stream_);
  stager_->h2d(d.offsets, b.offsets.data(), (numBags + 1) * 8ull, stream_);
  if (d.weights) stager_->h2d(d.weights, b.weights, N * 4ull, stream_);
  stager_->h2d(d.slotsDev, d.slots.data(), d.slots.size() * sizeof(SlotDesc), stream_);
  return d;
}

void CudaEngine::run_forward(const PreparedBatch& b, float* pooled, float* const* seq, float* seqDev, bool onDevice) {
  use_device();
  const int64_t numBags = static_cast<int64_t>(b.F) * b.B;
  const int64_t pooledFloats = b.B * layout_.pooledDim;
  if (pooledFloats > 0 && pooled == nullptr) fail("INVALID_ARGUMENT", "forward: no pooled output buffer");
  require_resolved(b);
  const StagedBatch d = stage_batch(b);
  const std::vector<SlotDesc>& slots = d.slots;

  float* outPooled = onDevice ? pooled : d.pooled;
  float* outSeq = onDevice ? seqDev : d.seq;
  cuda::ForwardArgs a{weights(), d.rows, d.offsets, d.weights, d.slotsDev, b.B, numBags, layout_.pooledDim, outPooled, outSeq};
  EMB_CUDA_CHECK(cudaEventRecord(ev_[0], stream_));
  cuda::launch_forward(a, cuda::forward_group_size(slots.data(), b.F), stream_);
  EMB_CUDA_CHECK(cudaEventRecord(ev_[1], stream_));

  if (pooledFloats > 0 && !onDevice) stager_->d2h(pooled, d.pooled, pooledFloats * 4ull, stream_);
  for (int32_t s = 0; s < b.F && !onDevice; ++s) {
    const uint32_t f = b.feature[s];
    if (slots[s].outCol >= 0) continue;
    stager_->d2h(seq[f], d.seq + slots[s].seqOffset, sequence_values(spec_, b, f) * 4ull, stream_);
  }
  sync();
  float ms = 0;
  EMB_CUDA_CHECK(cudaEventElapsedTime(&ms, ev_[0], ev_[1]));
  times_.forwardMs = ms;
}

BackwardResult CudaEngine::run_backward(const PreparedBatch& b, const float* pooledGrad, const float* const* seqGrad, const float* seqDev,
                                        bool onDevice) {
  use_device();
  const int64_t N = b.numIds();
  const int64_t numBags = static_cast<int64_t>(b.F) * b.B;
  const int64_t pooledFloats = b.B * layout_.pooledDim;
  const OptimizerConfig& opt = spec_.optimizer;
  // CUB counts items in int and scans N + 1 run counts; bagOf holds bag indices as int32.
  if (N >= int64_t(INT_MAX))
    fail("INVALID_SIZE", "the CUDA backend takes at most 2^31 - 2 ids per batch (got %lld)", static_cast<long long>(N));
  if (numBags > int64_t(INT_MAX))
    fail("INVALID_SIZE", "the CUDA backend takes at most 2^31 - 1 bags (features × batchSize) per backward (got %lld)",
         static_cast<long long>(numBags));
  // every input is checked before the first copy is enqueued (gradient sizes: check_gradient_sizes, by the caller)
  require_resolved(b);
  const StagedBatch d = stage_batch(b);
  const std::vector<SlotDesc>& slots = d.slots;
  const int64_t seqTotal = d.seqTotal;
  uint64_t* dRows = d.rows;
  int64_t* dOff = d.offsets;
  float* dW = d.weights;
  SlotDesc* dSlots = d.slotsDev;
  const float* dPooledGrad = onDevice ? pooledGrad : d.pooled;
  const float* dSeqGrad = onDevice ? seqDev : d.seq;
  cuda::BackwardBuffers sb = cuda::carve_backward_buffers(sort_.ensure(cuda::backward_scratch_bytes(std::max<int64_t>(N, 1), endBit_), device_),
                                                          std::max<int64_t>(N, 1), endBit_);

  if (pooledFloats > 0 && !onDevice) stager_->h2d(d.pooled, pooledGrad, pooledFloats * 4ull, stream_);
  for (size_t f = 0; f < spec_.features.size() && !onDevice; ++f) {
    if (spec_.features[f].pooling != Pooling::None) continue;
    const int64_t n = sequence_values(spec_, b, static_cast<uint32_t>(f));
    stager_->h2d(d.seq + slots[b.slotOf[f]].seqOffset, seqGrad[f], n * 4ull, stream_);
  }

  // 1. finiteness (counters[1]) — nothing is written to the tables before the host has seen it
  EMB_CUDA_CHECK(cudaEventRecord(ev_[0], stream_));
  EMB_CUDA_CHECK(cudaMemsetAsync(sb.counters, 0, 16, stream_));
  cuda::launch_nonfinite(dPooledGrad, pooledFloats, sb.counters + 1, stream_);
  cuda::launch_nonfinite(dSeqGrad, seqTotal, sb.counters + 1, stream_);
  // 2.–3. keys, stable sort, runs
  if (N > 0) cuda::launch_sort_and_runs(dRows, dOff, dSlots, b.B, numBags, N, endBit_, sb, stream_);
  EMB_CUDA_CHECK(cudaEventRecord(ev_[1], stream_));
  uint32_t counters[4] = {0, 0, 0, 0};
  stager_->d2h(counters, sb.counters, 16, stream_);
  if (counters[1] != 0) return non_finite_outcome(opt);
  if (N == 0) {
    ++step_;
    return BackwardResult{false, 0};
  }
  const uint32_t numRuns = counters[0], numChunks = counters[2];

  // 4. one exact update per unique row
  uint32_t* chunkRun = nullptr;
  float* partials = nullptr;
  if (numChunks > 0) {
    Carver hc(hot_.ensure(align256(numChunks * 4ull) + align256(static_cast<uint64_t>(numChunks) * maxDim_ * 4ull), device_));
    chunkRun = hc.take<uint32_t>(numChunks);
    partials = hc.take<float>(static_cast<uint64_t>(numChunks) * maxDim_);
  }
  const int64_t t1 = step_ + 1;  // the step being applied (1-based), as on the CPU
  cuda::BackwardArgs a{};
  a.arena = weights();
  a.state = state();
  a.tables = static_cast<const TableDesc*>(tablesDev_.get());
  a.slots = dSlots;
  a.offsets = dOff;
  a.weights = dW;
  a.pooledGrad = dPooledGrad;
  a.seqGrad = dSeqGrad;
  a.B = b.B;
  a.pooledDim = layout_.pooledDim;
  a.maxDim = maxDim_;
  a.bagOf = sb.bagOf;
  a.sortedPos = sb.sortedPos;
  a.uniqueKeys = sb.uniqueKeys;
  a.runCount = sb.runCount;
  a.runStart = sb.runStart;
  a.chunkEnd = sb.chunkEnd;
  a.chunkRun = chunkRun;
  a.partials = partials;
  a.numRuns = numRuns;
  a.numChunks = numChunks;
  a.opt = opt.type;
  a.lr = opt.lr;
  a.eps = opt.eps;
  a.beta1 = opt.beta1;
  a.beta2 = opt.beta2;
  a.weightDecay = opt.weightDecay;
  a.bc1 = adam_bias_correction(opt.beta1, t1);
  a.bc2 = adam_bias_correction(opt.beta2, t1);
  a.stochasticRounding = opt.stochasticRounding;
  a.seed = spec_.seed;
  a.step = static_cast<uint64_t>(t1);
  EMB_CUDA_CHECK(cudaEventRecord(ev_[2], stream_));
  cuda::launch_update(a, chunkRun, stream_);
  EMB_CUDA_CHECK(cudaEventRecord(ev_[3], stream_));
  sync();
  float sortMs = 0, updateMs = 0;
  EMB_CUDA_CHECK(cudaEventElapsedTime(&sortMs, ev_[0], ev_[1]));
  EMB_CUDA_CHECK(cudaEventElapsedTime(&updateMs, ev_[2], ev_[3]));
  times_.backwardMs = static_cast<double>(sortMs) + updateMs;
  ++step_;
  return BackwardResult{false, static_cast<int64_t>(numRuns)};
}

template <typename Fn>
void CudaEngine::in_row_chunks(int64_t n, uint64_t bytesPerRow, Fn&& fn) {
  uint64_t budget = kChunkBytes;
  size_t freeB = 0, totalB = 0;
  const cudaError_t e = cudaMemGetInfo(&freeB, &totalB);
  if (e == cudaSuccess)
    budget = std::min<uint64_t>(budget, std::max<uint64_t>(kMinChunkBytes, (freeB + rowsScratch_.capacity()) / 2));
  else
    (void)cudaGetLastError();
  const int64_t per = static_cast<int64_t>(std::max<uint64_t>(1, budget / std::max<uint64_t>(bytesPerRow, 1)));
  for (int64_t lo = 0; lo < n; lo += per) fn(lo, std::min(n, lo + per) - lo);
}

void CudaEngine::read_rows(uint32_t table, const uint64_t* rows, int64_t n, float* out) {
  use_device();
  const TableDesc& td = tables_[table];
  in_row_chunks(n, 8 + td.dim * 4ull, [&](int64_t lo, int64_t cnt) {
    Carver c(rowsScratch_.ensure(align256(cnt * 8ull) + align256(cnt * td.dim * 4ull), device_));
    uint64_t* dRows = c.take<uint64_t>(cnt);
    float* dOut = c.take<float>(cnt * td.dim);
    stager_->h2d(dRows, rows + lo, cnt * 8ull, stream_);
    cuda::launch_gather_rows(weights(), td, dRows, cnt, dOut, stream_);
    stager_->d2h(out + lo * td.dim, dOut, cnt * td.dim * 4ull, stream_);
  });
  sync();
}

void CudaEngine::last_writes(const uint64_t* rows, int64_t n, uint64_t width, const float* values, std::vector<uint64_t>& keptRows,
                             std::vector<float>& keptValues, bool* dup) {
  std::unordered_set<uint64_t> seen;
  seen.reserve(static_cast<size_t>(n));
  std::vector<uint8_t> keep(static_cast<size_t>(n), 0);
  int64_t kept = 0;
  for (int64_t i = n - 1; i >= 0; --i)
    if (seen.insert(rows[i]).second) {
      keep[i] = 1;
      ++kept;
    }
  *dup = kept != n;
  if (!*dup) return;
  keptRows.reserve(static_cast<size_t>(kept));
  keptValues.reserve(static_cast<size_t>(kept) * width);
  for (int64_t i = 0; i < n; ++i)
    if (keep[i]) {
      keptRows.push_back(rows[i]);
      keptValues.insert(keptValues.end(), values + i * width, values + (i + 1) * width);
    }
}

void CudaEngine::write_rows(uint32_t table, const uint64_t* rows, int64_t n, const float* values) {
  use_device();
  const TableDesc& td = tables_[table];
  std::vector<uint64_t> keptRows;
  std::vector<float> keptValues;
  bool dup = false;
  last_writes(rows, n, td.dim, values, keptRows, keptValues, &dup);
  if (dup) {
    rows = keptRows.data();
    values = keptValues.data();
    n = static_cast<int64_t>(keptRows.size());
  }
  in_row_chunks(n, 8 + td.dim * 4ull, [&](int64_t lo, int64_t cnt) {
    Carver c(rowsScratch_.ensure(align256(cnt * 8ull) + align256(cnt * td.dim * 4ull), device_));
    uint64_t* dRows = c.take<uint64_t>(cnt);
    float* dVals = c.take<float>(cnt * td.dim);
    stager_->h2d(dRows, rows + lo, cnt * 8ull, stream_);
    stager_->h2d(dVals, values + lo * td.dim, cnt * td.dim * 4ull, stream_);
    cuda::launch_scatter_rows(weights(), td, dRows, cnt, dVals, stream_);
    sync();  // the scratch is reused by the next chunk
  });
  sync();
}

void CudaEngine::read_state(uint32_t table, const uint64_t* rows, int64_t n, float* out) {
  use_device();
  const TableDesc& td = tables_[table];
  if (td.statePerRow == 0) return;
  in_row_chunks(n, 8 + td.statePerRow * 4, [&](int64_t lo, int64_t cnt) {
    Carver c(rowsScratch_.ensure(align256(cnt * 8ull) + align256(cnt * td.statePerRow * 4), device_));
    uint64_t* dRows = c.take<uint64_t>(cnt);
    float* dOut = c.take<float>(cnt * td.statePerRow);
    stager_->h2d(dRows, rows + lo, cnt * 8ull, stream_);
    cuda::launch_gather_state(state(), td, dRows, cnt, dOut, stream_);
    stager_->d2h(out + lo * td.statePerRow, dOut, cnt * td.statePerRow * 4, stream_);
  });
  sync();
}

void CudaEngine::write_state(uint32_t table, const uint64_t* rows, int64_t n, const float* values) {
  use_device();
  const TableDesc& td = tables_[table];
  if (td.statePerRow == 0) return;
  std::vector<uint64_t> keptRows;
  std::vector<float> keptValues;
  bool dup = false;
  last_writes(rows, n, td.statePerRow, values, keptRows, keptValues, &dup);
  if (dup) {
    rows = keptRows.data();
    values = keptValues.data();
    n = static_cast<int64_t>(keptRows.size());
  }
  in_row_chunks(n, 8 + td.statePerRow * 4, [&](int64_t lo, int64_t cnt) {
    Carver c(rowsScratch_.ensure(align256(cnt * 8ull) + align256(cnt * td.statePerRow * 4), device_));
    uint64_t* dRows = c.take<uint64_t>(cnt);
    float* dVals = c.take<float>(cnt * td.statePerRow);
    stager_->h2d(dRows, rows + lo, cnt * 8ull, stream_);
    stager_->h2d(dVals, values + lo * td.statePerRow, cnt * td.statePerRow * 4, stream_);
    cuda::launch_scatter_state(state(), td, dRows, cnt, dVals, stream_);
    sync();
  });
  sync();
}

void CudaEngine::read_raw(Arena a, uint64_t offset, uint64_t bytes, void* dst) {
  use_device();
  const uint64_t size = a == Arena::Weights ? layout_.weightBytes : layout_.stateFloats * 4;
  if (offset > size || bytes > size - offset) fail("INTERNAL", "raw read past the end of an arena");
  const uint8_t* base = a == Arena::Weights ? weights() : reinterpret_cast<const uint8_t*>(state());
  stager_->d2h(dst, base + offset, bytes, stream_);
  sync();
}

void CudaEngine::write_raw(Arena a, uint64_t offset, uint64_t bytes, const void* src) {
  use_device();
  const uint64_t size = a == Arena::Weights ? layout_.weightBytes : layout_.stateFloats * 4;
  if (offset > size || bytes > size - offset) fail("INTERNAL", "raw write past the end of an arena");
  uint8_t* base = a == Arena::Weights ? weights() : reinterpret_cast<uint8_t*>(state());
  stager_->h2d(base + offset, src, bytes, stream_);
  sync();
}

}  // namespace

std::unique_ptr<Engine> make_cuda_engine(const CollectionSpec& spec, const Layout& layout, int device, bool initialize) {
  return std::make_unique<CudaEngine>(spec, layout, device, initialize);
}

}  // namespace embshard
