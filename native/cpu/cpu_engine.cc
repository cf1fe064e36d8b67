// cpu_engine.cc — CPU engine construction, initialisation and row / raw access (kernels live in
// forward.cc and backward.cc).
#include "cpu/cpu_engine.h"

#include <algorithm>
#include <cstring>

#include "core/errors.h"
#include "core/init.h"
#include "core/parallel.h"

namespace embshard {

namespace {

// The weights' bytes, once both arenas together are known to fit the machine's memory and swap (each is
// checked alone when it is made; together past it, committing their pages would end the process).
uint64_t weight_bytes_fitting(const CollectionSpec& spec, const Layout& layout) {
  const uint64_t w = layout.weightBytes, s = layout.stateFloats * 4, limit = host_memory_limit();
  if (w <= limit && s <= limit && w + s > limit)
    fail("ALLOC_FAILED", "cannot allocate %llu bytes of weights and %llu bytes of optimizer state (%s): together past the %llu bytes of this machine's memory and swap",
         static_cast<unsigned long long>(w), static_cast<unsigned long long>(s), arena_description(spec, layout, false).c_str(),
         static_cast<unsigned long long>(limit));
  return w;
}

}  // namespace

CpuEngine::CpuEngine(const CollectionSpec& spec, const Layout& layout, bool initialize)
    : Engine(spec, layout),
      weights_(weight_bytes_fitting(spec, layout), arena_description(spec, layout, false)),
      state_(layout.stateFloats * 4, arena_description(spec, layout, true)) {
  // Commit every page now (zero state, and zero weights when a checkpoint will fill them), so the first
  // training steps do not pay page faults and an over-committed machine fails here, not mid-step.
  parallel_for(static_cast<int64_t>(state_.size() >> 16) + 1, 16, [&](int64_t lo, int64_t hi) {
    uint64_t b = static_cast<uint64_t>(lo) << 16, e = std::min<uint64_t>(static_cast<uint64_t>(hi) << 16, state_.size());
    if (b < e) std::memset(state_.data() + b, 0, e - b);
  });
  if (initialize) initialize_tables();
  else
    parallel_for(static_cast<int64_t>(weights_.size() >> 16) + 1, 16, [&](int64_t lo, int64_t hi) {
      uint64_t b = static_cast<uint64_t>(lo) << 16, e = std::min<uint64_t>(static_cast<uint64_t>(hi) << 16, weights_.size());
      if (b < e) std::memset(weights_.data() + b, 0, e - b);
    });
}

void CpuEngine::initialize_tables() {
  for (uint32_t t = 0; t < spec_.tables.size(); ++t) {
    const TableSpec& ts = spec_.tables[t];
    uint8_t* base = table_weights(t);
    const uint64_t rowBytes = layout_.tables[t].rowBytes;
    parallel_for(static_cast<int64_t>(ts.rows), 4096, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        uint8_t* row = base + static_cast<uint64_t>(r) * rowBytes;
        for (uint32_t c = 0; c < ts.dim; ++c)
          store_value(ts.dtype, row, c,
                      init_value(ts.init.kind, ts.init.a, ts.init.b, spec_.seed, t, static_cast<uint64_t>(r) * ts.dim + c));
      }
    });
  }
}

void CpuEngine::read_rows(uint32_t table, const uint64_t* rows, int64_t n, float* out) {
  const TableSpec& ts = spec_.tables[table];
  const uint8_t* base = table_weights(table);
  const uint64_t rb = layout_.tables[table].rowBytes;
  parallel_for(n, 1024, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const uint8_t* row = base + rows[i] * rb;
      for (uint32_t c = 0; c < ts.dim; ++c) out[i * ts.dim + c] = load_value(ts.dtype, row, c);
    }
  });
}

void CpuEngine::write_rows(uint32_t table, const uint64_t* rows, int64_t n, const float* values) {
  // Sequential: with duplicate ids the last write wins, as documented.
  const TableSpec& ts = spec_.tables[table];
  uint8_t* base = table_weights(table);
  const uint64_t rb = layout_.tables[table].rowBytes;
  for (int64_t i = 0; i < n; ++i) {
    uint8_t* row = base + rows[i] * rb;
    for (uint32_t c = 0; c < ts.dim; ++c) store_value(ts.dtype, row, c, values[i * ts.dim + c]);
  }
}

void CpuEngine::read_state(uint32_t table, const uint64_t* rows, int64_t n, float* out) {
  const uint64_t k = layout_.tables[table].statePerRow;
  if (k == 0) return;  // no optimizer state (SGD): nothing to read, and no state arena to read from
  const float* s = table_state(table);
  for (int64_t i = 0; i < n; ++i) std::memcpy(out + i * k, s + rows[i] * k, k * 4);
}

void CpuEngine::write_state(uint32_t table, const uint64_t* rows, int64_t n, const float* values) {
  const uint64_t k = layout_.tables[table].statePerRow;
  if (k == 0) return;  // no optimizer state (SGD): nothing to write
  float* s = table_state(table);
  for (int64_t i = 0; i < n; ++i) std::memcpy(s + rows[i] * k, values + i * k, k * 4);
}

void CpuEngine::read_raw(Arena a, uint64_t offset, uint64_t bytes, void* dst) {
  const HostArena& ar = a == Arena::Weights ? weights_ : state_;
  if (offset > ar.size() || bytes > ar.size() - offset) fail("INTERNAL", "raw read past the end of an arena");
  std::memcpy(dst, ar.data() + offset, bytes);
}

void CpuEngine::write_raw(Arena a, uint64_t offset, uint64_t bytes, const void* src) {
  HostArena& ar = a == Arena::Weights ? weights_ : state_;
  if (offset > ar.size() || bytes > ar.size() - offset) fail("INTERNAL", "raw write past the end of an arena");
  std::memcpy(ar.data() + offset, src, bytes);
}

std::unique_ptr<Engine> make_cpu_engine(const CollectionSpec& spec, const Layout& layout, bool initialize) {
  return std::make_unique<CpuEngine>(spec, layout, initialize);
}

}  // namespace embshard
