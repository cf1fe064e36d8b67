// kernels.h — what the CUDA engine (cuda_engine.cu) hands to the kernels: plain descriptors of tables
// and batch slots, the argument blocks of each kernel, and the host-side launchers (defined in
// forward.cu, backward.cu, rows.cu). Every launcher only enqueues work on the given stream.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "core/types.h"

namespace embshard::cuda {

// A table in the fused arenas (copied from Layout / TableSpec).
struct TableDesc {
  uint64_t weightOffset;  // bytes into the weight arena
  uint64_t rowBytes;
  uint64_t stateOffset;   // floats into the state arena
  uint64_t statePerRow;
  uint64_t rowBase;       // first global row (linearised key space)
  uint64_t rows;
  uint32_t dim;
  DType dtype;
};

// A slot of a prepared batch: the collection feature it carries, resolved to its table.
struct SlotDesc {
  uint64_t weightOffset;  // of the slot's table
  uint64_t rowBytes;
  uint64_t rowBase;
  int64_t outCol;     // pooled column offset; -1 for a sequence feature
  int64_t seqOffset;  // sequence features: first float of this feature in the packed sequence buffer
  int64_t begin;      // first id of the slot in the batch
  uint32_t table;
  uint32_t dim;
  DType dtype;
  Pooling pooling;
};

struct ForwardArgs {
  const uint8_t* arena;
  const uint64_t* rows;     // [N]
  const int64_t* offsets;   // [F*B + 1]
  const float* weights;     // [N] or null
  const SlotDesc* slots;    // [F]
  int64_t B;
  int64_t numBags;          // F * B
  int64_t pooledDim;
  float* pooled;            // [B × pooledDim]
  float* seq;               // packed sequence outputs
};

// Lanes per bag for a launch: enough 16-byte vectors to cover the widest row, 1..32.
int forward_group_size(const SlotDesc* slots, int32_t F);
void launch_forward(const ForwardArgs& a, int groupSize, cudaStream_t s);

// Sets *flag = 1 when any of p[0..n) is NaN or ±Inf.
void launch_nonfinite(const float* p, int64_t n, uint32_t* flag, cudaStream_t s);

// The long-segment split: a row with more than kHotChunk contributions is summed as partial sums of
// kHotChunk contributions each (one warp each, in parallel), then the partials in chunk order.
constexpr uint32_t kHotChunk = 1024;

// Device buffers of one backward pass (all sized for N ids, see backward_scratch_bytes).
struct BackwardBuffers {
  uint64_t* keys;        // [N] linearised ids
  uint64_t* sortedKeys;  // [N]
  uint32_t* pos;         // [N] id positions
  uint32_t* sortedPos;   // [N]
  int32_t* bagOf;        // [N] bag of each id position
  uint64_t* uniqueKeys;  // [N] one per run
  uint32_t* runCount;    // [N + 1]
  uint32_t* runStart;    // [N + 1] exclusive scan of runCount
  uint32_t* chunkCount;  // [N + 1] hot chunks per run
  uint32_t* chunkEnd;    // [N + 1] inclusive scan of chunkCount
  uint32_t* counters;    // [4] numRuns, nonFinite flag, total hot chunks
  void* cubTemp;
  size_t cubTempBytes;
};

// Bytes of device scratch for a backward pass over N ids, and the buffers carved out of it.
uint64_t backward_scratch_bytes(int64_t N, int endBit);
BackwardBuffers carve_backward_buffers(void* scratch, int64_t N, int endBit);

struct BackwardArgs {
  uint8_t* arena;
  float* state;
  const TableDesc* tables;
  const SlotDesc* slots;
  const int64_t* offsets;
  const float* weights;     // [N] or null
  const float* pooledGrad;  // [B × pooledDim] or null
  const float* seqGrad;     // packed sequence gradients
  int64_t B;
  int64_t pooledDim;
  uint32_t maxDim;
  // sort / run-length results
  const int32_t* bagOf;
  const uint32_t* sortedPos;
  const uint64_t* uniqueKeys;
  const uint32_t* runCount;
  const uint32_t* runStart;
  const uint32_t* chunkEnd;   // inclusive scan of hot chunks per run
  const uint32_t* chunkRun;   // [numChunks] run of each hot chunk
  float* partials;            // [numChunks × maxDim]
  uint32_t numRuns;
  uint32_t numChunks;
  // optimizer
  OptType opt;
  float lr, eps, beta1, beta2, weightDecay, bc1, bc2;
  bool stochasticRounding;
  uint64_t seed;
  uint64_t step;  // the 1-based step being applied
};

// 1. keys / positions / bag of every id, 2. stable radix sort, 3. run-length encode, 4. run starts and
// hot-chunk counts; leaves numRuns in counters[0] and the hot-chunk total in counters[2].
void launch_sort_and_runs(const uint64_t* rows, const int64_t* offsets, const SlotDesc* slots, int64_t B, int64_t numBags,
                          int64_t N, int endBit, const BackwardBuffers& buf, cudaStream_t s);
// With numRuns / numChunks known on the host: fills chunkRun, sums the hot chunks, updates every row.
void launch_update(const BackwardArgs& a, uint32_t* chunkRun, cudaStream_t s);

// Row access: out[k, :] = row rows[k] of table t in fp32; table[rows[k], :] = values[k, :].
void launch_gather_rows(const uint8_t* arena, TableDesc t, const uint64_t* rows, int64_t n, float* out, cudaStream_t s);
void launch_scatter_rows(uint8_t* arena, TableDesc t, const uint64_t* rows, int64_t n, const float* values, cudaStream_t s);
void launch_gather_state(const float* state, TableDesc t, const uint64_t* rows, int64_t n, float* out, cudaStream_t s);
void launch_scatter_state(float* state, TableDesc t, const uint64_t* rows, int64_t n, const float* values, cudaStream_t s);
// Fills table `index` with init_value (used for uniform / constant init, whose device arithmetic is
// bitwise the host's; normal init needs logf / cosf, so cuda_engine.cu computes it on the host).
void launch_init_table(uint8_t* arena, TableDesc t, uint32_t index, InitSpec init, uint64_t seed, cudaStream_t s);

}  // namespace embshard::cuda
