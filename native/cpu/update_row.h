// update_row.h — one exact optimizer update of one row (the row's summed gradient in `g`), specialised
// per storage dtype and rounding mode so the column loops stay branch-free. The per-element rules are
// core/optim.h's, shared with the CUDA kernels.
#pragma once
#include <cstdint>

#include "core/init.h"
#include "core/optim.h"
#include "core/row_sum_squares.h"
#include "core/types.h"
#include "cpu/row_ops.h"

namespace embshard::cpu {

struct UpdateContext {
  const OptimizerConfig* opt;
  uint64_t seed;
  uint64_t step;  // 1-based step being applied
  float bc1, bc2; // adam bias corrections
};

template <DType DT, bool SR>
inline void st(uint8_t* w, uint32_t c, float v, const UpdateContext& u, uint64_t globalRow) {
  if constexpr (DT == DType::F32) reinterpret_cast<float*>(w)[c] = v;
  else if constexpr (SR) store_value_sr(DT, w, c, v, rounding_bits(u.seed, u.step, globalRow, c));
  else store_value(DT, w, c, v);
}

// `g` is overwritten with the weight-decayed gradient. apply_weight_decay(g, w, 0) == g exactly, so the
// loops without decay skip it: branch-free bodies the compiler vectorises.
template <DType DT, bool SR, bool WD>
inline void update_row_impl(const UpdateContext& u, uint8_t* __restrict w, float* __restrict state, float* __restrict g,
                            uint32_t dim, uint64_t globalRow) {
  const OptimizerConfig& o = *u.opt;
  const float lr = o.lr, eps = o.eps, wd = o.weightDecay;
  auto grad = [&](float gc, float wc) { if constexpr (WD) return apply_weight_decay(gc, wc, wd); else return gc; };
  switch (o.type) {
    case OptType::SGD:
      for (uint32_t c = 0; c < dim; ++c) {
        float wc = ld<DT>(w, c);
        st<DT, SR>(w, c, sgd_step(wc, grad(g[c], wc), lr), u, globalRow);
      }
      break;
    case OptType::Adagrad:
      for (uint32_t c = 0; c < dim; ++c) {
        float wc = ld<DT>(w, c);
        st<DT, SR>(w, c, adagrad_step(wc, grad(g[c], wc), state[c], lr, eps), u, globalRow);
      }
      break;
    case OptType::RowwiseAdagrad: {
      if constexpr (WD)
        for (uint32_t c = 0; c < dim; ++c) g[c] = apply_weight_decay(g[c], ld<DT>(w, c), wd);
      state[0] += row_sum_squares(g, dim) / static_cast<float>(dim);
      const float s = state[0];
      for (uint32_t c = 0; c < dim; ++c) st<DT, SR>(w, c, rowwise_adagrad_step(ld<DT>(w, c), g[c], s, lr, eps), u, globalRow);
      break;
    }
    case OptType::Adam: {
      const float b1 = o.beta1, b2 = o.beta2, bc1 = u.bc1, bc2 = u.bc2;
      float* __restrict m = state;
      float* __restrict v = state + dim;
      for (uint32_t c = 0; c < dim; ++c) {
        float wc = ld<DT>(w, c);
        st<DT, SR>(w, c, adam_step(wc, grad(g[c], wc), m[c], v[c], lr, b1, b2, eps, bc1, bc2), u, globalRow);
      }
      break;
    }
  }
}

template <DType DT, bool SR>
void update_row(const UpdateContext& u, uint8_t* w, float* state, float* g, uint32_t dim, uint64_t globalRow) {
  if (u.opt->weightDecay != 0.0f) update_row_impl<DT, SR, true>(u, w, state, g, dim, globalRow);
  else update_row_impl<DT, SR, false>(u, w, state, g, dim, globalRow);
}

}  // namespace embshard::cpu
