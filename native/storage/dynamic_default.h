// dynamic_default.h — what a dynamic table's ids without a row read (admission.default): 'zero' (the
// sink row) or 'hashed', the init row of the raw id itself, a pure function of (seed, table, id):
//   default[c] = round_dtype(init_value(kind, a, b, seed, table, id * dim + c))   (core/init.h)
// which is exactly the row the id is given when it is admitted, so its value does not jump then. The
// engine reads the sink (zero) for such ids; these functions put the defaults into its outputs after
// the forward, on the host (both engines return their outputs in host memory):
//   pooled[b] += (sum over the bag's ids i not held, in order, of w_i * default_i) / (mean ? len : 1)
//   sequence rows of ids not held = default_i
// Gradients of these ids go to the sink and are dropped: a default never changes.
#pragma once
#include <cstdint>

#include "storage/dynamic_map.h"

namespace embshard {

// How one batch feature's outputs take the defaults of `map`'s table.
struct DefaultTarget {
  int32_t column = -2;  // the feature's first column in the pooled output; -1: a sequence; -2: not this table
  bool mean = false;
  float* sequence = nullptr;  // a sequence feature's values [Σ its lengths × dim]
};

// The init row of raw id `id` in fp32, before rounding to the table dtype (admitted rows: the engine rounds).
void init_row(const DynamicSpec& spec, uint64_t id, float* out);
// The default row of `id` as the table stores it (rounded to spec.dtype).
void default_row(const DynamicSpec& spec, uint64_t id, float* out);

// Adds the defaults of the batch positions whose slot is the sink (slots [ids.n], lengths [F × B]
// feature-major, weights [ids.n] or null) into `pooled` [B × pooledDim] and the sequence targets.
void add_defaults(const DynamicSpec& spec, int64_t sink, const RawIds& ids, const int64_t* slots, const int32_t* lengths,
                  int64_t F, int64_t B, const float* weights, const DefaultTarget* targets, float* pooled, int64_t pooledDim);

// Rows read by raw id (`out` [n × dim], the engine's rows of `slots`): those whose slot is the sink get their default.
void fill_defaults(const DynamicSpec& spec, int64_t sink, const RawIds& ids, const int64_t* slots, float* out);

}  // namespace embshard
