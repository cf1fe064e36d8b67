// precision.cc — precision names and the bf16 rounding of GEMM inputs (see precision.h).
#include "dense/precision.h"

#include <cstring>

#include "core/errors.h"
#include "core/half.h"
#include "core/parallel.h"
#include "cpu/isa.h"

namespace embshard::dense {

const char* precision_name(Precision p) { return p == Precision::BF16 ? "bf16" : "fp32"; }

Precision parse_precision(const char* name) {
  if (std::strcmp(name, "fp32") == 0) return Precision::FP32;
  if (std::strcmp(name, "bf16") == 0) return Precision::BF16;
  fail("INVALID_CONFIG", "precision must be 'fp32' | 'bf16' (got '%s')", name);
}

namespace {
// The loops, compiled per ISA (cpu/isa.h): integer arithmetic, so every copy gives the same bits.
EMBSHARD_CPU_KERNEL void to_bf16_range(const float* in, uint16_t* out, int64_t a, int64_t b) {
  for (int64_t i = a; i < b; ++i) out[i] = f32_to_bf16(in[i]);
}
EMBSHARD_CPU_KERNEL void round_to_bf16_range(const float* in, float* out, int64_t a, int64_t b) {
  for (int64_t i = a; i < b; ++i) out[i] = bf16_to_f32(f32_to_bf16(in[i]));
}
}  // namespace

void to_bf16(const float* in, int64_t n, uint16_t* out) {
  parallel_for(n, 1 << 15, [&](int64_t a, int64_t b) { to_bf16_range(in, out, a, b); });
}

void round_to_bf16(const float* in, int64_t n, float* out) {
  parallel_for(n, 1 << 15, [&](int64_t a, int64_t b) { round_to_bf16_range(in, out, a, b); });
}

}  // namespace embshard::dense
