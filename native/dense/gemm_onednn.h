// gemm_onednn.h — the oneDNN backend of gemm() (dense/gemm.h): one matmul primitive per distinct call
// shape (dims, strides, transposes, precision, epilogue), created once and cached; bias and ReLU run as
// the primitive's post-ops, beta as a sum post-op, batches as a 3-D (batched) matmul. bf16 inputs are
// rounded into per-thread scratch, so oneDNN runs its bf16 kernels (AVX-512 BF16 / AMX where the CPU has
// them, chosen at run time) with fp32 accumulation and fp32 output. Compiled empty without oneDNN.
#pragma once
#include <string>

#include "dense/gemm.h"

namespace embshard::dense {

bool onednn_built();
// Runs g; false when oneDNN is not built in or has no kernel for the call on this CPU.
bool onednn_gemm(const GemmCall& g);
// oneDNN's version and the instruction set it dispatches to on this CPU, e.g. "oneDNN 2.6.3, avx512_core_bf16".
std::string onednn_description();

}  // namespace embshard::dense
