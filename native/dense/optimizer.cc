// optimizer.cc — dense SGD / Adagrad / Adam (see optimizer.h).
#include "dense/optimizer.h"

#include <cmath>

#include "core/errors.h"
#include "core/optim.h"
#include "core/parallel.h"

namespace embshard::dense {

DenseOpt parse_dense_opt(const std::string& name) {
  if (name == "sgd") return DenseOpt::SGD;
  if (name == "adagrad") return DenseOpt::Adagrad;
  if (name == "adam") return DenseOpt::Adam;
  fail("UNSUPPORTED_OPTIMIZER", "optimizer.type '%s' is not a dense optimizer (sgd | adagrad | adam)", name.c_str());
}

const char* dense_opt_name(DenseOpt t) {
  switch (t) {
    case DenseOpt::SGD: return "sgd";
    case DenseOpt::Adagrad: return "adagrad";
    case DenseOpt::Adam: return "adam";
  }
  return "?";
}

int64_t dense_state_floats(DenseOpt t, int64_t n) {
  return t == DenseOpt::SGD ? 0 : t == DenseOpt::Adagrad ? n : 2 * n;
}

void dense_optimizer_step(const DenseOptConfig& c, float lr, int64_t t, float* params, const float* grads,
                          float* state, int64_t n) {
  const float wd = c.weightDecay;
  switch (c.type) {
    case DenseOpt::SGD:
      parallel_for(n, 1 << 15, [&](int64_t a, int64_t b) {
        for (int64_t i = a; i < b; ++i) params[i] = sgd_step(params[i], apply_weight_decay(grads[i], params[i], wd), lr);
      });
      break;
    case DenseOpt::Adagrad:
      parallel_for(n, 1 << 15, [&](int64_t a, int64_t b) {
        for (int64_t i = a; i < b; ++i)
          params[i] = adagrad_step(params[i], apply_weight_decay(grads[i], params[i], wd), state[i], lr, c.eps);
      });
      break;
    case DenseOpt::Adam: {
      const float bc1 = adam_bias_correction(c.beta1, t);
      const float bc2 = adam_bias_correction(c.beta2, t);
      float* m = state;
      float* v = state + n;
      parallel_for(n, 1 << 15, [&](int64_t a, int64_t b) {
        for (int64_t i = a; i < b; ++i)
          params[i] = adam_step(params[i], apply_weight_decay(grads[i], params[i], wd), m[i], v[i], lr, c.beta1,
                                c.beta2, c.eps, bc1, bc2);
      });
      break;
    }
  }
}

}  // namespace embshard::dense
