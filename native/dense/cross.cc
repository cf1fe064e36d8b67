// cross.cc — DCNv2 low-rank cross layers on the linear layer's kernels (see cross.h).
#include "dense/cross.h"

#include <algorithm>

#include "core/parallel.h"
#include "dense/linear.h"

namespace embshard::dense {

void CrossCache::resize(int64_t B, int64_t D, int64_t r, int64_t L) {
  xs.resize(static_cast<size_t>(L + 1));
  vs.resize(static_cast<size_t>(L));
  ws.resize(static_cast<size_t>(L));
  for (auto& v : xs) v.resize(static_cast<size_t>(B * D));
  for (auto& v : vs) v.resize(static_cast<size_t>(B * r));
  for (auto& v : ws) v.resize(static_cast<size_t>(B * D));
}

void cross_forward(const float* x0, int64_t B, int64_t D, int64_t r, const std::vector<CrossLayerParams>& layers,
                   Precision precision, CrossCache& cache, float* out) {
  const int64_t L = static_cast<int64_t>(layers.size()), n = B * D;
  cache.resize(B, D, r, L);
  std::copy(x0, x0 + n, cache.xs[0].begin());
  const float* base = cache.xs[0].data();
  for (int64_t l = 0; l < L; ++l) {
    const auto& p = layers[static_cast<size_t>(l)];
    const float* xl = cache.xs[static_cast<size_t>(l)].data();
    float* v = cache.vs[static_cast<size_t>(l)].data();
    float* w = cache.ws[static_cast<size_t>(l)].data();
    float* next = cache.xs[static_cast<size_t>(l + 1)].data();
    linear_forward(xl, B, D, r, p.V, nullptr, false, precision, v);
    linear_forward(v, B, r, D, p.U, p.b, false, precision, w);
    parallel_for(n, 1 << 14, [&](int64_t a, int64_t e) {
      for (int64_t i = a; i < e; ++i) next[i] = base[i] * w[i] + xl[i];
    });
  }
  if (out) std::copy(cache.xs[static_cast<size_t>(L)].begin(), cache.xs[static_cast<size_t>(L)].end(), out);
}

void cross_backward(const float* dout, int64_t B, int64_t D, int64_t r, const std::vector<CrossLayerParams>& layers,
                    Precision precision, const CrossCache& cache, const std::vector<CrossLayerGrads>& grads, float* dx0) {
  const int64_t L = static_cast<int64_t>(layers.size()), n = B * D;
  std::vector<float> g(dout, dout + n), acc(static_cast<size_t>(n), 0.0f), dw(static_cast<size_t>(n)),
      dv(static_cast<size_t>(B * r)), dxl(static_cast<size_t>(n));
  const float* base = cache.xs[0].data();
  for (int64_t l = L - 1; l >= 0; --l) {
    const auto& p = layers[static_cast<size_t>(l)];
    const auto& q = grads[static_cast<size_t>(l)];
    const float* w = cache.ws[static_cast<size_t>(l)].data();
    parallel_for(n, 1 << 14, [&](int64_t a, int64_t e) {
      for (int64_t i = a; i < e; ++i) {
        dw[i] = g[i] * base[i];
        acc[i] += g[i] * w[i];
      }
    });
    linear_backward(cache.vs[static_cast<size_t>(l)].data(), dw.data(), B, r, D, p.U, q.U, q.b, dv.data(), precision);
    linear_backward(cache.xs[static_cast<size_t>(l)].data(), dv.data(), B, D, r, p.V, q.V, nullptr, dxl.data(), precision);
    parallel_for(n, 1 << 14, [&](int64_t a, int64_t e) {
      for (int64_t i = a; i < e; ++i) g[i] += dxl[i];
    });
  }
  parallel_for(n, 1 << 14, [&](int64_t a, int64_t e) {
    for (int64_t i = a; i < e; ++i) dx0[i] = g[i] + acc[i];
  });
}

}  // namespace embshard::dense
