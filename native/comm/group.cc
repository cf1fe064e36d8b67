// group.cc — the parts of the process-group interface shared by every implementation (see group.h):
// element types, deadlines, and the all-reduces built on all-to-all-v / all-gather-v.
#include "comm/group.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/errors.h"

namespace embshard::comm {

size_t elem_size(ElemType t) { return t == ElemType::U16 ? 2 : t == ElemType::F32 || t == ElemType::I32 ? 4 : 8; }

namespace {
// the names of ElemType and ReduceOp, in their enums' order
constexpr const char* kElemTypeNames[] = {"f32", "f64", "i32", "i64", "u16"};
constexpr const char* kReduceOpNames[] = {"sum", "max", "min"};
}  // namespace

const char* elem_type_name(ElemType t) { return kElemTypeNames[static_cast<int>(t)]; }

const char* reduce_op_name(ReduceOp op) { return kReduceOpNames[static_cast<int>(op)]; }

ElemType parse_elem_type(const std::string& s) {
  for (int i = 0; i < 5; ++i)
    if (s == kElemTypeNames[i]) return static_cast<ElemType>(i);
  fail("UNSUPPORTED_DTYPE", "allReduce: data must be a Float32Array, Float64Array, Int32Array or BigInt64Array (got %s)",
       s.c_str());
}

ReduceOp parse_reduce_op(const std::string& s) {
  for (int i = 0; i < 3; ++i)
    if (s == kReduceOpNames[i]) return static_cast<ReduceOp>(i);
  fail("INVALID_ARGUMENT", "allReduce: op must be 'sum', 'max' or 'min' (got '%s')", s.c_str());
}

Deadline Deadline::after(double timeoutMs) {
  // The clock counts nanoseconds in 64 bits: a longer span would wrap round to a deadline already passed.
  const Clock::time_point now = Clock::now();
  const double room = std::chrono::duration<double, std::milli>(Clock::time_point::max() - now).count() / 2;
  if (!(timeoutMs < room)) return Deadline{now + (Clock::time_point::max() - now) / 2, timeoutMs};
  auto span = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(timeoutMs));
  return Deadline{now + span, timeoutMs};
}

namespace {
template <typename T>
T add(T a, T b) {
  // integers wrap modulo 2^bits, as MPI and NCCL sums do in practice (signed overflow is undefined in C++)
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}

template <typename T>
void reduce_typed(const T* src, int n, int64_t count, ReduceOp op, T* dst) {
  for (int64_t i = 0; i < count; ++i) {
    T acc = src[i];
    for (int r = 1; r < n; ++r) {
      T v = src[static_cast<int64_t>(r) * count + i];
      if (op == ReduceOp::Sum) acc = add(acc, v);
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
    case ElemType::U16: fail("UNSUPPORTED_DTYPE", "u16 values are moved by collectives, never reduced");
  }
}

std::unique_ptr<Started> Group::start_all_to_all_v(const uint8_t*, const int64_t*, const int64_t*, uint8_t*, const int64_t*,
                                                  const int64_t*) {
  return nullptr;
}

std::unique_ptr<Started> Group::start_all_gather_v(const uint8_t*, int64_t, uint8_t*, const int64_t*) { return nullptr; }

void Group::all_reduce_device(void*, int64_t, ElemType, ReduceOp, int, const Deadline&) {
  fail("BACKEND_UNAVAILABLE", "rank %d: allReduceDevice needs a group whose transport reads device memory (NCCL); this is a %s group",
       rank_, kind());
}

void Group::all_to_all_v_device(const uint8_t*, const int64_t*, const int64_t*, uint8_t*, const int64_t*, const int64_t*, int,
                                const Deadline&) {
  fail("BACKEND_UNAVAILABLE", "rank %d: allToAllDevice needs a group whose transport reads device memory (NCCL); this is a %s group",
       rank_, kind());
}

void Group::all_gather_v_device(const uint8_t*, int64_t, uint8_t*, const int64_t*, int, const Deadline&) {
  fail("BACKEND_UNAVAILABLE", "rank %d: allGatherDevice needs a group whose transport reads device memory (NCCL); this is a %s group",
       rank_, kind());
}

void Group::all_reduce(void* data, int64_t count, ElemType t, ReduceOp op, bool deterministic, const Deadline& d) {
  const int64_t es = static_cast<int64_t>(elem_size(t));
  const int64_t bytes = count * es;
  const size_t n = static_cast<size_t>(size_);
  if (deterministic) {
    std::vector<int64_t> each(n, bytes);
    std::vector<uint8_t> all(static_cast<size_t>(bytes) * n);
    all_gather_v(static_cast<const uint8_t*>(data), bytes, all.data(), each.data(), d);
    reduce_in_rank_order(all.data(), size_, count, t, op, data);
    return;
  }
  // Reduce-scatter: chunk p of every rank goes to rank p, which reduces the contributions in rank order.
  auto* buf = static_cast<uint8_t*>(data);
  const Chunk mine = chunk_of(count, size_, rank_);
  const int64_t mineBytes = (mine.end - mine.begin) * es;
  std::vector<int64_t> sendBytes(n), sendOff(n), recvBytes(n), recvOff(n), chunkBytes(n);
  for (size_t p = 0; p < n; ++p) {
    const Chunk c = chunk_of(count, size_, static_cast<int>(p));
    sendBytes[p] = (c.end - c.begin) * es;
    sendOff[p] = c.begin * es;
    recvBytes[p] = mineBytes;
    recvOff[p] = static_cast<int64_t>(p) * mineBytes;
    chunkBytes[p] = sendBytes[p];
  }
  std::vector<uint8_t> parts(static_cast<size_t>(mineBytes) * n);
  all_to_all_v(buf, sendBytes.data(), sendOff.data(), parts.data(), recvBytes.data(), recvOff.data(), d);
  std::vector<uint8_t> reduced(static_cast<size_t>(mineBytes));
  reduce_in_rank_order(parts.data(), size_, mine.end - mine.begin, t, op, reduced.data());
  // All-gather: every rank's reduced chunk lands at its place in `data` (chunks are contiguous in rank order).
  all_gather_v(reduced.data(), mineBytes, buf, chunkBytes.data(), d);
}

}  // namespace embshard::comm
