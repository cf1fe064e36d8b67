// precision.cc — precision names and the bf16 rounding of GEMM inputs (see precision.h).
#include "dense/precision.h"

#include <cstring>

#include "core/errors.h"
#include "core/half.h"
#include "core/parallel.h"

namespace embshard::dense {

const char* precision_name(Precision p) { return p == Precision::BF16 ? "bf16" : "fp32"; }

Precision parse_precision(const char* name) {
  if (std::strcmp(name, "fp32") == 0) return Precision::FP32;
  if (std::strcmp(name, "bf16") == 0) return Precision::BF16;
  fail("INVALID_CONFIG", "precision must be 'fp32' | 'bf16' (got '%s')", name);
}

void to_bf16(const float* in, int64_t n, uint16_t* out) {
  parallel_for(n, 1 << 15, [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) out[i] = f32_to_bf16(in[i]);
  });
}

void round_to_bf16(const float* in, int64_t n, float* out) {
  parallel_for(n, 1 << 15, [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) out[i] = bf16_to_f32(f32_to_bf16(in[i]));
  });
}

}  // namespace embshard::dense
