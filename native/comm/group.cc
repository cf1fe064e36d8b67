// group.cc — the parts of the process-group interface shared by every implementation (see group.h):
// element types, deadlines, and the deterministic all-reduce built on all-gather.
#include "comm/group.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/errors.h"

namespace embshard::comm {

size_t elem_size(ElemType t) { return t == ElemType::F32 || t == ElemType::I32 ? 4 : 8; }

ElemType parse_elem_type(const std::string& s) {
  if (s == "f32") return ElemType::F32;
  if (s == "f64") return ElemType::F64;
  if (s == "i32") return ElemType::I32;
  if (s == "i64") return ElemType::I64;
  fail("UNSUPPORTED_DTYPE", "allReduce: data must be a Float32Array, Float64Array, Int32Array or BigInt64Array (got %s)",
       s.c_str());
}

ReduceOp parse_reduce_op(const std::string& s) {
  if (s == "sum") return ReduceOp::Sum;
  if (s == "max") return ReduceOp::Max;
  if (s == "min") return ReduceOp::Min;
  fail("INVALID_ARGUMENT", "allReduce: op must be 'sum', 'max' or 'min' (got '%s')", s.c_str());
}

Deadline Deadline::after(double timeoutMs) {
  auto span = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(timeoutMs));
  return Deadline{Clock::now() + span, timeoutMs};
}

namespace {
template <typename T>
void reduce_typed(const T* src, int n, int64_t count, ReduceOp op, T* dst) {
  for (int64_t i = 0; i < count; ++i) {
    T acc = src[i];
    for (int r = 1; r < n; ++r) {
      T v = src[static_cast<int64_t>(r) * count + i];
      if (op == ReduceOp::Sum) acc = acc + v;
      else if (op == ReduceOp::Max) acc = std::max(acc, v);
      else acc = std::min(acc, v);
    }
    dst[i] = acc;
  }
}
}  // namespace

void reduce_in_rank_order(const void* src, int n, int64_t count, ElemType t, ReduceOp op, void* dst) {
  switch (t) {
    case ElemType::F32: reduce_typed(static_cast<const float*>(src), n, count, op, static_cast<float*>(dst)); break;
    case ElemType::F64: reduce_typed(static_cast<const double*>(src), n, count, op, static_cast<double*>(dst)); break;
    case ElemType::I32: reduce_typed(static_cast<const int32_t*>(src), n, count, op, static_cast<int32_t*>(dst)); break;
    case ElemType::I64: reduce_typed(static_cast<const int64_t*>(src), n, count, op, static_cast<int64_t*>(dst)); break;
  }
}

void Group::all_reduce(void* data, int64_t count, ElemType t, ReduceOp op, const Deadline& d) {
  const int64_t bytes = count * static_cast<int64_t>(elem_size(t));
  std::vector<int64_t> each(static_cast<size_t>(size_), bytes);
  std::vector<uint8_t> all(static_cast<size_t>(bytes) * static_cast<size_t>(size_));
  all_gather_v(static_cast<const uint8_t*>(data), bytes, all.data(), each.data(), d);
  reduce_in_rank_order(all.data(), size_, count, t, op, data);
}

}  // namespace embshard::comm
