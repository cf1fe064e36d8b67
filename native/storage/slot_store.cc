// slot_store.cc — cache data in host arenas or behind an engine's row access (see slot_store.h).
#include "storage/slot_store.h"

#include <cstring>

#include "core/init.h"
#include "core/parallel.h"

namespace embshard::storage {

void HostSlots::get(const int64_t* slots, int64_t n, uint8_t* w, float* s) {
  parallel_for(n, 1024, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      std::memcpy(w + i * rb_, w_ + slots[i] * rb_, rb_);
      if (k_) std::memcpy(s + i * k_, s_ + slots[i] * k_, 4 * k_);  // no state (SGD): no state arrays
    }
  });
}

void HostSlots::put(const int64_t* slots, int64_t n, const uint8_t* w, const float* s) {
  parallel_for(n, 1024, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      std::memcpy(w_ + slots[i] * rb_, w + i * rb_, rb_);
      if (k_) std::memcpy(s_ + slots[i] * k_, s + i * k_, 4 * k_);
    }
  });
}

void EngineSlots::get(const int64_t* slots, int64_t n, uint8_t* w, float* s) {
  const TableSpec& ts = e_.spec().tables[t_];
  const uint64_t rb = uint64_t(ts.dim) * dtype_size(ts.dtype);
  rows_.assign(slots, slots + n);
  vals_.resize(static_cast<size_t>(n) * ts.dim);
  e_.read_rows(t_, rows_.data(), n, vals_.data());
  for (int64_t i = 0; i < n; ++i)
    for (uint32_t c = 0; c < ts.dim; ++c) store_value(ts.dtype, w + i * rb, c, vals_[i * ts.dim + c]);
  if (e_.layout().tables[t_].statePerRow > 0) e_.read_state(t_, rows_.data(), n, s);
}

void EngineSlots::put(const int64_t* slots, int64_t n, const uint8_t* w, const float* s) {
  const TableSpec& ts = e_.spec().tables[t_];
  const uint64_t rb = uint64_t(ts.dim) * dtype_size(ts.dtype);
  rows_.assign(slots, slots + n);
  vals_.resize(static_cast<size_t>(n) * ts.dim);
  for (int64_t i = 0; i < n; ++i)
    for (uint32_t c = 0; c < ts.dim; ++c) vals_[i * ts.dim + c] = load_value(ts.dtype, w + i * rb, c);
  e_.write_rows(t_, rows_.data(), n, vals_.data());
  if (e_.layout().tables[t_].statePerRow > 0) e_.write_state(t_, rows_.data(), n, s);
}

}  // namespace embshard::storage
