// exchange_kernels.h — the device twins of shard/exchange_ops.h that the sharded runtime's device
// exchanges run (lib/sharded/device-exchange.ts): strided fp32 block copies (packing and unpacking
// messages), row copies through an index list (a relay's rows of each requester), the pooling of
// unique rows into bags, the division of mean bags by their lengths, and the gradient sums of distinct
// rows. copy_blocks: block k copies rows × cols values
// from src (element srcOffset + r·srcStride + c) to dst (dstOffset + r·dstStride + c), or adds them
// there. Blocks run in list order, so values added into one element from several blocks are summed in
// that order (the order of the host path's unpacks: bitwise the same sums). Free of CUDA headers, so the
// addon's plain C++ files can include it.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/types.h"

namespace embshard::cuda {

struct CopyBlock {
  int64_t srcOffset, srcStride, dstOffset, dstStride, rows, cols;
  bool add;
};

// Runs the blocks in order on `device`, then waits for them (CUDA_ERROR on failure). Values are read as
// `srcType` and written as `dstType` (fp32, or fp16 / bf16 wire values: core/init.h's load_value /
// store_value, the host packing's rounding to nearest even); adding needs an fp32 dst. The caller has
// checked that every block lies within both buffers.
void copy_blocks(int device, const void* src, DType srcType, void* dst, DType dstType, const CopyBlock* blocks, size_t n);

// Rows through an index list, for j < rows: Gather: dst row j ← src row idx[j]; Scatter: dst row idx[j] ←
// src row j; ScatterAdd: dst row idx[j] += src row j (rows of `cols` values from element offset + row ·
// stride). A scatter's idx holds distinct rows (a requester's distinct ids among its node's, the
// positions of a sequence's ids), so no two threads touch one value: one call adds in a fixed order, and
// calls run in the caller's order. Types as copy_blocks. Waits for the kernel.
enum class IndexMode : uint8_t { Gather = 0, Scatter = 1, ScatterAdd = 2 };
void index_rows(int device, const void* src, DType srcType, int64_t srcOffset, int64_t srcStride, const int32_t* idx, int64_t rows,
                int64_t cols, void* dst, DType dstType, int64_t dstOffset, int64_t dstStride, IndexMode mode);

// Pools rows of a unique list into bags exactly as shard::pool_unique does on the host: for bag b (ids
// offsets[b] … offsets[b+1] − 1 of `inverse`), dst[b·stride + col + c] += w_i · rows[inverse[i]·dim + c], id
// by id in order (the host's sequence of fp32 roundings); w_i = weights[i], or 1 when weights is null.
// Waits for the kernel. The caller guarantees every index is in range.
void pool_rows(int device, const float* rows, int64_t dim, const int32_t* inverse, const int32_t* offsets, int64_t B,
               const float* weights, float* dst, int64_t stride, int64_t col);

// As shard::divide_bags on the host: for every bag b with lengths[b] > 0, m[b·stride + col + c] ←
// bag_mean(that value, lengths[b]) (core/pooling.h), c < dim. Waits for the kernel.
void divide_bags(int device, float* m, int64_t stride, int64_t col, int64_t dim, const int32_t* lengths, int64_t B);

// Whether all n values at p are finite (core/value_scan.h all_finite's twin: the engine's non-finite kernel into
// `flag`, one caller-kept uint32 in device memory, cleared first and read back). Waits for the kernel.
bool all_finite(int device, const float* p, int64_t n, uint32_t* flag);

// The gradient sum of each distinct row u < U, as shard::grad_unique adds it on the host: dst[u·dim + c] =
// Σ over j = start[u] … start[u + 1] − 1, in order, of src[row[k]·stride + col[k] + c] · scale[k] with
// k = order[j] (shard::group_rows lists each row's ids ascending, shard::grad_terms gives row and scale),
// from 0.0f: the host's sequence of fp32 roundings. Waits for the kernel.
void sum_rows(int device, const float* src, int64_t stride, const int32_t* start, const int32_t* order, const int32_t* row, const int32_t* col,
              const float* scale, int64_t U, int64_t dim, float* dst);

}  // namespace embshard::cuda
