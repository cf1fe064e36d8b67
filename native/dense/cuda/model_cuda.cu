// model_cuda.cu — the whole dense model on one GPU (see model_cuda.h). The pass structure is
// DenseModel's (model.cc) line for line, with device buffers in place of std::vectors and the launchers
// of launch.h in place of the CPU layers. All work runs on the model's own stream and cuBLAS handle.
#include "dense/cuda/model_cuda.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "core/errors.h"
#include "core/memory_overlap.h"
#include "cuda/buffers.h"
#include "cuda/cuda_check.h"
#include "dense/cuda/launch.h"

namespace embshard::dense::cuda {

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// A grow-only device buffer of T. ensure(n) may reallocate, which drops the contents.
template <typename T>
class DevBuf {
 public:
  DevBuf() = default;
  DevBuf(DevBuf&& o) noexcept : p_(std::exchange(o.p_, nullptr)), cap_(std::exchange(o.cap_, 0)) {}
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  DevBuf& operator=(DevBuf&&) = delete;
  ~DevBuf() {
    if (p_) (void)cudaFree(p_);
  }
  T* ensure(int64_t n) {
    if (n > cap_) {
      if (p_) (void)cudaFree(p_);
      p_ = nullptr;
      cap_ = 0;
      int device = 0;
      EMB_CUDA_CHECK(cudaGetDevice(&device));  // the model's: every call selects it first
      // out of memory: ALLOC_FAILED naming the device and the bytes
      p_ = static_cast<T*>(::embshard::cuda::device_alloc(static_cast<uint64_t>(n) * sizeof(T), "the dense model", device));
      cap_ = n;
    }
    return p_;
  }
  T* get() const { return p_; }

 private:
  T* p_ = nullptr;
  int64_t cap_ = 0;
};

}  // namespace

struct CudaDenseModel::Impl {
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  DevBuf<float> params, state;
  // shared with the handles deviceGrads() gives out (grads_owner()): freed when the model and every handle are gone
  std::shared_ptr<float> grads;
  // inputs of the last pass
  DevBuf<float> dense, sparse, labels;
  // the pooled embeddings of the current call: `sparse` (uploaded) or the caller's device memory
  const float* sparseIn = nullptr;
  // the host input and batch size of a forward_bottom not yet consumed (nullptr: none)
  const float* bottomFor = nullptr;
  int64_t bottomB = 0;
  // activations of the last forward pass (xs[0] unused: x0 is `inter`)
  std::vector<DevBuf<float>> bot, top, xs, vs, ws;
  DevBuf<float> inter;
  // backward scratch
  DevBuf<float> g1, g2, gx, sgrad, acc, dw, dv, dxl;
  DevBuf<double> loss;
  ~Impl() {
    if (blas) (void)cublasDestroy(blas);
    if (stream) (void)cudaStreamDestroy(stream);
  }
};

namespace {
void to_device(float* dst, const float* src, int64_t n, cudaStream_t s) {
  if (n > 0) EMB_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * sizeof(float), cudaMemcpyHostToDevice, s));
}
void to_host(float* dst, const float* src, int64_t n, cudaStream_t s) {
  if (n > 0) EMB_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToHost, s));
}
}  // namespace

CudaDenseModel::CudaDenseModel(DenseModelSpec spec, int device, bool initialize)
    : layout_(std::move(spec)), device_(device), impl_(std::make_unique<Impl>()) {
  int count = 0;
  EMB_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (device < 0 || device >= count) fail("BACKEND_UNAVAILABLE", "device cuda:%d does not exist (%d CUDA device(s))", device, count);
  EMB_CUDA_CHECK(cudaSetDevice(device_));
  Impl& m = *impl_;
  EMB_CUDA_CHECK(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
  EMB_BLAS_CHECK(cublasCreate(&m.blas));
  EMB_BLAS_CHECK(cublasSetStream(m.blas, m.stream));
  // plain FP32 GEMMs (no TF32), so the GPU model matches the CPU one to float rounding
  EMB_BLAS_CHECK(cublasSetMathMode(m.blas, CUBLAS_DEFAULT_MATH));
  const auto& s = layout_.spec();
  m.bot = std::vector<DevBuf<float>>(s.bottom.size());
  m.top = std::vector<DevBuf<float>>(s.top.size());
  const size_t L = s.interaction == Interaction::Cross ? static_cast<size_t>(s.crossLayers) : 0;
  m.xs = std::vector<DevBuf<float>>(L + 1);
  m.vs = std::vector<DevBuf<float>>(L);
  m.ws = std::vector<DevBuf<float>>(L);
  const int64_t P = layout_.param_count(), S = layout_.state_count();
  m.params.ensure(P);
  m.grads = std::shared_ptr<float>(
      static_cast<float*>(::embshard::cuda::device_alloc(static_cast<uint64_t>(P) * sizeof(float), "the dense model", device_)),
      [device = device_](float* p) {
        int current = 0;
        const bool restore = cudaGetDevice(&current) == cudaSuccess;
        (void)cudaSetDevice(device);
        (void)cudaFree(p);
        if (restore) (void)cudaSetDevice(current);
      });
  m.state.ensure(S);
  // the CPU model's initialisation, computed on the host and uploaded: identical starting values
  std::vector<float> hp(static_cast<size_t>(P), 0.0f), hg(static_cast<size_t>(P), 0.0f), hs(static_cast<size_t>(S), 0.0f);
  if (initialize) {
    layout_.bind(hp.data(), hg.data(), hs.data());
    layout_.initialize();
    layout_.bind(nullptr, nullptr, nullptr);
  }
  write(Buffer::Params, hp.data());
  write(Buffer::Grads, hg.data());
  write(Buffer::State, hs.data());
}

CudaDenseModel::~CudaDenseModel() {
  (void)cudaSetDevice(device_);
  impl_.reset();
}

int64_t CudaDenseModel::size(Buffer b) const { return b == Buffer::State ? layout_.state_count() : layout_.param_count(); }

void CudaDenseModel::read(Buffer b, float* dst) {
  EMB_CUDA_CHECK(cudaSetDevice(device_));
  Impl& m = *impl_;
  const float* src = b == Buffer::Params ? m.params.get() : b == Buffer::Grads ? m.grads.get() : m.state.get();
  to_host(dst, src, size(b), m.stream);
  EMB_CUDA_CHECK(cudaStreamSynchronize(m.stream));
}

std::shared_ptr<void> CudaDenseModel::grads_owner() const { return impl_->grads; }

float* CudaDenseModel::device_data(Buffer b) {
  Impl& m = *impl_;
  return b == Buffer::Params ? m.params.get() : b == Buffer::Grads ? m.grads.get() : m.state.get();
}

void CudaDenseModel::write(Buffer b, const float* src) {
  EMB_CUDA_CHECK(cudaSetDevice(device_));
  Impl& m = *impl_;
  if (b == Buffer::Params) m.bottomFor = nullptr;  // a kept bottom output is stale
  float* dst = b == Buffer::Params ? m.params.get() : b == Buffer::Grads ? m.grads.get() : m.state.get();
  to_device(dst, src, size(b), m.stream);
  EMB_CUDA_CHECK(cudaStreamSynchronize(m.stream));
}

namespace {

// Tensor indices of each part, as DenseModel::layout() lays them out.
struct Parts {
  size_t bottom, cross, top;
};
Parts parts_of(const DenseModelSpec& s) {
  Parts p{0, 2 * s.bottom.size(), 0};
  p.top = p.cross + (s.interaction == Interaction::Cross ? 3 * static_cast<size_t>(s.crossLayers) : 0);
  return p;
}

// Runs the bottom MLP on the device input already in m.dense (into m.bot).
void run_bottom(CudaDenseModel::Impl& m, const DenseModel& layout, int64_t B) {
  const auto& s = layout.spec();
  const auto& ts = layout.tensors();
  const Parts pt = parts_of(s);
  auto P = [&](size_t t) { return m.params.get() + ts[t].offset; };
  const float* x = m.dense.get();
  int64_t in = s.denseIn;
  for (size_t i = 0; i < s.bottom.size(); ++i) {
    float* y = m.bot[i].ensure(B * s.bottom[i]);
    linear_forward(m.blas, m.stream, x, B, in, s.bottom[i], P(pt.bottom + 2 * i), P(pt.bottom + 2 * i + 1), y);
    relu_forward(y, B * s.bottom[i], m.stream);
    x = y;
    in = s.bottom[i];
  }
}

// Runs the rest of the forward pass on the bottom output in m.bot and m.sparseIn; returns the device logits [B].
const float* run_top(CudaDenseModel::Impl& m, const DenseModel& layout, int64_t B) {
  const auto& s = layout.spec();
  const auto& ts = layout.tensors();
  const Parts pt = parts_of(s);
  auto P = [&](size_t t) { return m.params.get() + ts[t].offset; };
  const float* x = m.bot.back().get();
  int64_t in = s.bottom.back();
  const int64_t D = layout.interaction_width();
  float* inter = m.inter.ensure(B * D);
  if (s.interaction == Interaction::Dot) dot_forward(x, m.sparseIn, B, in, s.numSparse, inter, m.stream);
  else concat_forward(x, m.sparseIn, B, in, s.numSparse * s.embDim, inter, m.stream);
  const float* t = inter;
  if (s.interaction == Interaction::Cross) {
    const int64_t r = s.crossRank;
    for (int64_t l = 0; l < s.crossLayers; ++l) {
      const size_t li = static_cast<size_t>(l);
      const float* xl = l == 0 ? inter : m.xs[li].get();
      float* v = m.vs[li].ensure(B * r);
      float* w = m.ws[li].ensure(B * D);
      float* next = m.xs[li + 1].ensure(B * D);
      linear_forward(m.blas, m.stream, xl, B, D, r, P(pt.cross + 3 * li), nullptr, v);
      linear_forward(m.blas, m.stream, v, B, r, D, P(pt.cross + 3 * li + 1), P(pt.cross + 3 * li + 2), w);
      cross_combine(inter, w, xl, next, B * D, m.stream);
    }
    t = m.xs[static_cast<size_t>(s.crossLayers)].get();
  }
  in = D;
  for (size_t i = 0; i < s.top.size(); ++i) {
    float* y = m.top[i].ensure(B * s.top[i]);
    linear_forward(m.blas, m.stream, t, B, in, s.top[i], P(pt.top + 2 * i), P(pt.top + 2 * i + 1), y);
    if (i + 1 < s.top.size()) relu_forward(y, B * s.top[i], m.stream);
    t = y;
    in = s.top[i];
  }
  return t;
}

void upload_dense(CudaDenseModel::Impl& m, const DenseModel& layout, const float* dense, int64_t B) {
  const int64_t nd = B * layout.spec().denseIn;
  to_device(m.dense.ensure(nd), dense, nd, m.stream);
}

// Uploads the inputs (the pooled embeddings only when they are in host memory) and runs the forward pass
// (the bottom MLP only without bottomReady, as the CPU model).
const float* run_forward(CudaDenseModel::Impl& m, const DenseModel& layout, const float* dense, const float* sparse, int64_t B,
                         bool bottomReady, bool sparseOnDevice) {
  const bool ready = m.bottomFor == dense && m.bottomB == B;
  m.bottomFor = nullptr;
  if (bottomReady && !ready) fail("INVALID_ARGUMENT", "bottomReady: the bottom MLP has not run on this dense input and batch size (forwardBottom first)");
  const int64_t ns = B * layout.sparse_width();
  if (sparseOnDevice) {
    m.sparseIn = sparse;
  } else {
    float* ds = m.sparse.ensure(ns);
    if (ns > 0) to_device(ds, sparse, ns, m.stream);
    m.sparseIn = ds;
  }
  if (!bottomReady) {
    upload_dense(m, layout, dense, B);
    run_bottom(m, layout, B);
  }
  return run_top(m, layout, B);
}

// Whether [a, a + na) and [b, b + nb) (floats) overlap.
bool overlap(const float* a, int64_t na, const float* b, int64_t nb) {
  return na > 0 && nb > 0 && ranges_overlap(a, static_cast<size_t>(na) * sizeof(float), b, static_cast<size_t>(nb) * sizeof(float));
}

// The device memory a forward_backward reads the pooled embeddings from (`sparse`, when `sparseOnDevice`) and
// writes their gradients to (`sparseGrad`, when `gradOnDevice`), n floats each: the gradients must not share
// memory with the pooled embeddings (the dot interaction's backward reads them while it writes), and neither may
// lie in the model's own buffers (its gradients, written by the pass; its parameters and state).
// INVALID_ARGUMENT naming both, before any work.
void check_device_args(const CudaDenseModel::Impl& m, const float* sparse, bool sparseOnDevice, const float* sparseGrad,
                       bool gradOnDevice, int64_t n, int64_t P, int64_t S) {
  const struct {
    const char* name;
    const float* p;
    int64_t n;
  } own[] = {{"the model's parameters", m.params.get(), P}, {"the model's gradients", m.grads.get(), P}, {"the model's optimizer state", m.state.get(), S}};
  if (gradOnDevice) {
    if (sparseOnDevice && overlap(sparseGrad, n, sparse, n))
      fail("INVALID_ARGUMENT", "sparseGrad shares memory with sparse: an output must be an array of its own");
    for (const auto& o : own)
      if (overlap(sparseGrad, n, o.p, o.n)) fail("INVALID_ARGUMENT", "sparseGrad shares memory with %s: an output must be an array of its own", o.name);
  }
  if (sparseOnDevice)
    for (const auto& o : own)
      if (overlap(sparse, n, o.p, o.n)) fail("INVALID_ARGUMENT", "sparse shares memory with %s", o.name);
}

}  // namespace

void CudaDenseModel::forward_bottom(const float* dense, int64_t B, StepTimes* times) {
  auto t0 = std::chrono::steady_clock::now();
  EMB_CUDA_CHECK(cudaSetDevice(device_));
  Impl& m = *impl_;
  m.bottomFor = nullptr;
  upload_dense(m, layout_, dense, B);
  run_bottom(m, layout_, B);
  EMB_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  m.bottomFor = dense;
  m.bottomB = B;
  if (times) times->forwardMs = ms_since(t0);
}

void CudaDenseModel::forward(const float* dense, const float* sparse, int64_t B, float* logits, StepTimes* times, bool bottomReady,
                             SparseMemory mem) {
  auto t0 = std::chrono::steady_clock::now();
  EMB_CUDA_CHECK(cudaSetDevice(device_));
  Impl& m = *impl_;
  const float* z = run_forward(m, layout_, dense, sparse, B, bottomReady, mem.inputOnDevice);
  to_host(logits, z, B, m.stream);
  EMB_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  if (times) times->forwardMs = ms_since(t0);
}

double CudaDenseModel::forward_backward(const float* dense, const float* sparse, const float* labels, int64_t B,
                                        float gradScale, float* sparseGrad, float* logits, StepTimes* times, bool bottomReady,
                                        SparseMemory mem) {
  auto t0 = std::chrono::steady_clock::now();
  EMB_CUDA_CHECK(cudaSetDevice(device_));
  Impl& m = *impl_;
  const auto& s = layout_.spec();
  const auto& ts = layout_.tensors();
  const Parts pt = parts_of(s);
  auto P = [&](size_t t) { return m.params.get() + ts[t].offset; };
  auto G = [&](size_t t) { return m.grads.get() + ts[t].offset; };
  const int64_t D = layout_.interaction_width(), sw = layout_.sparse_width();
  const bool gradHere = mem.gradOnDevice && sparseGrad;  // the gradient goes straight into the caller's device memory
  check_device_args(m, sparse, mem.inputOnDevice, sparseGrad, gradHere, B * sw, size(Buffer::Params), size(Buffer::State));

  to_device(m.labels.ensure(B), labels, B, m.stream);
  const float* z = run_forward(m, layout_, dense, sparse, B, bottomReady, mem.inputOnDevice);
  if (logits) to_host(logits, z, B, m.stream);
  EMB_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  if (times) times->forwardMs = ms_since(t0);
  auto t1 = std::chrono::steady_clock::now();

  // Every scratch buffer of the backward pass is allocated before the first gradient is written, so that
  // a batch too large for the device's memory (ALLOC_FAILED) leaves the gradients as they were.
  // Gradient buffers wide enough for every layer's input or output gradient:
  int64_t maxW = D;
  for (auto w : s.top) maxW = std::max(maxW, w);
  for (auto w : s.bottom) maxW = std::max(maxW, w);
  float* ga = m.g1.ensure(B * maxW);
  float* gb = m.g2.ensure(B * maxW);
  double* loss = m.loss.ensure(B);
  const int64_t r = s.crossRank;
  float *acc = nullptr, *dw = nullptr, *dv = nullptr, *dxl = nullptr;
  if (s.interaction == Interaction::Cross) {
    acc = m.acc.ensure(B * D);
    dw = m.dw.ensure(B * D);
    dv = m.dv.ensure(B * r);
    dxl = m.dxl.ensure(B * D);
  }
  const int64_t d = s.bottom.back();
  float* gx = m.gx.ensure(B * d);
  float* se = sw > 0 ? (gradHere ? sparseGrad : m.sgrad.ensure(B * sw)) : nullptr;
  std::vector<double> hl(static_cast<size_t>(B));

  // loss and dlogit (scaled)
  bce(z, m.labels.get(), B, gradScale, loss, ga, m.stream);

  // top MLP, last layer first; ga holds the gradient w.r.t. the current layer's output
  const float* topIn = s.interaction == Interaction::Cross ? m.xs[static_cast<size_t>(s.crossLayers)].get() : m.inter.get();
  for (size_t k = s.top.size(); k-- > 0;) {
    const int64_t out = s.top[k], in = k == 0 ? D : s.top[k - 1];
    const float* x = k == 0 ? topIn : m.top[k - 1].get();
    if (k + 1 < s.top.size()) relu_backward(m.top[k].get(), ga, ga, B * out, m.stream);
    linear_backward(m.blas, m.stream, x, ga, B, in, out, P(pt.top + 2 * k), G(pt.top + 2 * k), G(pt.top + 2 * k + 1), gb);
    std::swap(ga, gb);
  }
  // cross layers: ga is the gradient w.r.t. their output; replace it by the gradient w.r.t. their input
  if (s.interaction == Interaction::Cross) {
    const int64_t n = B * D;
    EMB_CUDA_CHECK(cudaMemsetAsync(acc, 0, static_cast<size_t>(n) * sizeof(float), m.stream));
    for (int64_t l = s.crossLayers - 1; l >= 0; --l) {
      const size_t li = static_cast<size_t>(l);
      const float* xl = l == 0 ? m.inter.get() : m.xs[li].get();
      cross_grad(ga, m.inter.get(), m.ws[li].get(), dw, acc, n, m.stream);
      linear_backward(m.blas, m.stream, m.vs[li].get(), dw, B, r, D, P(pt.cross + 3 * li + 1), G(pt.cross + 3 * li + 1),
                      G(pt.cross + 3 * li + 2), dv);
      linear_backward(m.blas, m.stream, xl, dv, B, D, r, P(pt.cross + 3 * li), G(pt.cross + 3 * li), nullptr, dxl);
      add(ga, dxl, ga, n, m.stream);
    }
    add(ga, acc, gb, n, m.stream);
    std::swap(ga, gb);
  }
  // interaction → gradient of the bottom output (gx) and of the pooled embeddings (se)
  const float* botOut = m.bot.back().get();
  if (s.interaction == Interaction::Dot) dot_backward(botOut, m.sparseIn, ga, B, d, s.numSparse, gx, se, m.stream);
  else concat_backward(ga, B, d, sw, gx, se, m.stream);
  // bottom MLP
  float* gcur = gx;
  for (size_t k = s.bottom.size(); k-- > 0;) {
    const int64_t out = s.bottom[k], in = k == 0 ? s.denseIn : s.bottom[k - 1];
    const float* x = k == 0 ? m.dense.get() : m.bot[k - 1].get();
    relu_backward(m.bot[k].get(), gcur, gcur, B * out, m.stream);
    float* dx = k > 0 ? (gcur == ga ? gb : ga) : nullptr;
    linear_backward(m.blas, m.stream, x, gcur, B, in, out, P(pt.bottom + 2 * k), G(pt.bottom + 2 * k), G(pt.bottom + 2 * k + 1), dx);
    if (k > 0) gcur = dx;
  }
  if (sparseGrad && sw > 0 && !gradHere) to_host(sparseGrad, se, B * sw, m.stream);
  if (B > 0) EMB_CUDA_CHECK(cudaMemcpyAsync(hl.data(), loss, static_cast<size_t>(B) * sizeof(double), cudaMemcpyDeviceToHost, m.stream));
  EMB_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  double sum = 0.0;
  for (double v : hl) sum += v;  // in sample order, as dense/loss.cc
  if (times) times->backwardMs = ms_since(t1);
  return B > 0 ? sum / static_cast<double>(B) : 0.0;
}

void CudaDenseModel::apply(float lr, int64_t t) {
  EMB_CUDA_CHECK(cudaSetDevice(device_));
  Impl& m = *impl_;
  m.bottomFor = nullptr;  // the parameters change: a kept bottom output is stale
  const auto& o = layout_.spec().optimizer;
  optimizer_step(static_cast<int>(o.type), lr, o.eps, o.beta1, o.beta2, o.weightDecay, t, m.params.get(), m.grads.get(),
                 m.state.get(), layout_.param_count(), m.stream);
  EMB_CUDA_CHECK(cudaStreamSynchronize(m.stream));
}

}  // namespace embshard::dense::cuda
