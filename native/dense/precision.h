// precision.h — the dense layers' compute precision. FP32: fp32 GEMM inputs. BF16 (mixed precision, as
// autocast / HugeCTR run it): every GEMM's inputs are rounded to bf16 (round-to-nearest-even, 8-bit
// mantissa), products are accumulated in fp32 and written as fp32; weights, gradients, optimizer state and
// every elementwise op stay fp32. to_bf16 is the one rounding both GEMM backends use.
#pragma once
#include <cstdint>

namespace embshard::dense {

enum class Precision : uint8_t { FP32 = 0, BF16 = 1 };

const char* precision_name(Precision p);
Precision parse_precision(const char* name);  // INVALID_CONFIG for anything but 'fp32' | 'bf16'

// out[i] = bf16(in[i]) for i < n (threaded; elementwise, so thread-count free).
void to_bf16(const float* in, int64_t n, uint16_t* out);
// out[i] = fp32(bf16(in[i])): the same rounding kept in fp32 storage (the fallback GEMM's bf16 inputs).
void round_to_bf16(const float* in, int64_t n, float* out);

}  // namespace embshard::dense
