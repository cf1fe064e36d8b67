// optimizer.h — the dense optimizers (SGD, Adagrad, Adam) over one flat parameter buffer, using the
// same per-element rules as the embedding optimizers (core/optim.h). State layout per parameter count n:
// SGD none; Adagrad [n] accumulators (initial 0); Adam [n] first moments then [n] second moments.
#pragma once
#include <cstdint>
#include <string>

namespace embshard::dense {

enum class DenseOpt : uint8_t { SGD = 0, Adagrad = 1, Adam = 2 };

struct DenseOptConfig {
  DenseOpt type = DenseOpt::SGD;
  float lr = 0.01f;
  float eps = 1e-8f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float weightDecay = 0.0f;
};

DenseOpt parse_dense_opt(const std::string& name);  // UNSUPPORTED_OPTIMIZER for anything else
const char* dense_opt_name(DenseOpt t);
int64_t dense_state_floats(DenseOpt t, int64_t n);

// Applies one update at (1-based) step `t` with learning rate `lr` (the config's lr is the base the
// caller's schedule scales). Elementwise, so the result is independent of the thread count.
void dense_optimizer_step(const DenseOptConfig& c, float lr, int64_t t, float* params, const float* grads,
                          float* state, int64_t n);

}  // namespace embshard::dense
