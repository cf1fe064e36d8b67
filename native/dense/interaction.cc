// interaction.cc — DLRM dot interaction and plain concatenation (see interaction.h). One sample per
// task; every output element is written by exactly one thread in a fixed order.
#include "dense/interaction.h"

#include <algorithm>
#include <vector>

#include "core/parallel.h"

namespace embshard::dense {

namespace {
inline const float* vec(const float* x, const float* e, int64_t b, int64_t d, int64_t F, int64_t i) {
  return i == 0 ? x + b * d : e + b * F * d + (i - 1) * d;
}
}  // namespace

void dot_interaction_forward(const float* x, const float* e, int64_t B, int64_t d, int64_t F, float* out) {
  const int64_t n = F + 1, w = dot_interaction_width(d, F);
  parallel_for(B, 16, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      float* o = out + b * w;
      std::copy(x + b * d, x + b * d + d, o);
      int64_t p = d;
      for (int64_t i = 1; i < n; ++i) {
        const float* ti = vec(x, e, b, d, F, i);
        for (int64_t j = 0; j < i; ++j) {
          const float* tj = vec(x, e, b, d, F, j);
          float s = 0.0f;
          for (int64_t k = 0; k < d; ++k) s += ti[k] * tj[k];
          o[p++] = s;
        }
      }
    }
  });
}

void dot_interaction_backward(const float* x, const float* e, const float* dout, int64_t B, int64_t d, int64_t F,
                              float* dx, float* de) {
  const int64_t n = F + 1, w = dot_interaction_width(d, F);
  parallel_for(B, 16, [&](int64_t b0, int64_t b1) {
    std::vector<float> dT(static_cast<size_t>(n * d));
    for (int64_t b = b0; b < b1; ++b) {
      const float* g = dout + b * w;
      std::fill(dT.begin(), dT.end(), 0.0f);
      std::copy(g, g + d, dT.begin());  // the pass-through copy of x
      int64_t p = d;
      for (int64_t i = 1; i < n; ++i) {
        const float* ti = vec(x, e, b, d, F, i);
        float* gi = dT.data() + i * d;
        for (int64_t j = 0; j < i; ++j) {
          const float* tj = vec(x, e, b, d, F, j);
          float* gj = dT.data() + j * d;
          float gz = g[p++];
          for (int64_t k = 0; k < d; ++k) {
            gi[k] += gz * tj[k];
            gj[k] += gz * ti[k];
          }
        }
      }
      std::copy(dT.begin(), dT.begin() + d, dx + b * d);
      std::copy(dT.begin() + d, dT.end(), de + b * F * d);
    }
  });
}

void concat_forward(const float* x, const float* e, int64_t B, int64_t dx, int64_t de, float* out) {
  parallel_for(B, 64, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      float* o = out + b * (dx + de);
      std::copy(x + b * dx, x + (b + 1) * dx, o);
      std::copy(e + b * de, e + (b + 1) * de, o + dx);
    }
  });
}

void concat_backward(const float* dout, int64_t B, int64_t dx, int64_t de, float* gx, float* ge) {
  parallel_for(B, 64, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const float* g = dout + b * (dx + de);
      std::copy(g, g + dx, gx + b * dx);
      std::copy(g + dx, g + dx + de, ge + b * de);
    }
  });
}

}  // namespace embshard::dense
