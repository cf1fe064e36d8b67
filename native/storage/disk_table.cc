// disk_table.cc — staging a batch's rows into the cache, write-back, and row access of a disk-backed
// table (see disk_table.h).
#include "storage/disk_table.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "core/errors.h"
#include "core/init.h"
#include "core/parallel.h"

namespace embshard::storage {

namespace {
constexpr uint64_t kSpanRows = 1024;
constexpr int64_t kReadChunkRows = 1024;
}

DiskTable::DiskTable(const TableSpec& ts, uint64_t statePerRow, uint32_t optimizer, const DiskStorageSpec& s, RowInit init)
    : spec_(ts),
      init_(init),
      file_(s.file, record_layout(ts.rows, ts.dim, ts.dtype, statePerRow), optimizer),
      cache_(cache_geometry(s.cacheBytes, uint64_t(ts.dim) * dtype_size(ts.dtype) + 4 * statePerRow, ts.rows, ts.name.c_str()),
             s.policy) {}

void DiskTable::unpack(const uint8_t* rec, bool written, uint64_t row, uint8_t* wdst, float* sdst) const {
  const RecordLayout& L = file_.layout();
  if (written) {
    std::memcpy(wdst, rec, L.rowBytes);
    if (L.statePerRow) std::memcpy(sdst, rec + L.stateOffset, 4 * L.statePerRow);
    return;
  }
  for (uint32_t c = 0; c < spec_.dim; ++c)
    store_value(spec_.dtype, wdst, c,
                init_.initialize ? init_value(init_.init.kind, init_.init.a, init_.init.b, init_.seed, init_.table,
                                              row * spec_.dim + c)
                                 : 0.0f);
  if (L.statePerRow) std::memset(sdst, 0, 4 * L.statePerRow);  // no state (SGD): sdst may be null
}

void DiskTable::pack(const uint8_t* w, const float* s, uint8_t* rec) const {
  const RecordLayout& L = file_.layout();
  std::memset(rec, 0, L.recordBytes);
  std::memcpy(rec, w, L.rowBytes);
  if (L.statePerRow) std::memcpy(rec + L.stateOffset, s, 4 * L.statePerRow);
}

void DiskTable::check(const uint64_t* rows, int64_t n) {
  file_.check_intact();
  uint64_t need = 0;
  const int64_t set = cache_.overflowing_set(rows, n, &need);
  if (set >= 0)
    fail("INVALID_CONFIG",
         "table '%s': storage.cacheBytes is too small for this batch: %llu of its distinct rows map to cache set %lld, "
         "which has %llu ways (%llu slots in all); raise cacheBytes",
         spec_.name.c_str(), static_cast<unsigned long long>(need), static_cast<long long>(set),
         static_cast<unsigned long long>(cache_.geometry().ways), static_cast<unsigned long long>(cache_.geometry().slots));
}

void DiskTable::stage(const uint64_t* rows, int64_t n, bool prefetch, int64_t* slots) {
  const RecordLayout& L = file_.layout();
  const uint64_t rb = L.rowBytes, k = L.statePerRow, rec = L.recordBytes;
  cache_.plan(rows, n, /*respectPins=*/prefetch, plan_);
  // 1. misses are read in parallel and verified (a damaged file fails here, before any write)
  const int64_t nm = static_cast<int64_t>(plan_.miss.size());
  missRows_.resize(static_cast<size_t>(nm));
  for (int64_t m = 0; m < nm; ++m) missRows_[m] = rows[plan_.miss[m]];
  rec_.resize(static_cast<size_t>(nm) * rec);
  written_.resize(static_cast<size_t>(nm));
  file_.read(missRows_.data(), nm, rec_.data(), written_.data());
  // 2. dirty victims go back to the file (if this fails, their slots still hold them, dirty)
  ioRows_.clear();
  vslot_.clear();
  for (size_t m = 0; m < plan_.miss.size(); ++m)
    if (plan_.victimDirty[m]) {
      ioRows_.push_back(plan_.victim[m]);
      vslot_.push_back(plan_.slot[plan_.miss[m]]);
    }
  const int64_t nv = static_cast<int64_t>(ioRows_.size());
  if (nv > 0) {
    out_.resize(static_cast<size_t>(nv) * rec);
    tmpW_.resize(static_cast<size_t>(nv) * rb);
    tmpS_.resize(static_cast<size_t>(nv) * k);
    store_->get(vslot_.data(), nv, tmpW_.data(), tmpS_.data());
    parallel_for(nv, 256, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) pack(tmpW_.data() + i * rb, tmpS_.data() + i * k, out_.data() + i * rec);
    });
    file_.write(ioRows_.data(), nv, out_.data());
    for (int64_t s : vslot_) cache_.mark_clean(s);
  }
  // 3. the misses' rows go into their slots
  tmpW_.resize(static_cast<size_t>(nm) * rb);
  tmpS_.resize(static_cast<size_t>(nm) * k);
  vslot_.resize(static_cast<size_t>(nm));
  parallel_for(nm, 256, [&](int64_t lo, int64_t hi) {
    for (int64_t m = lo; m < hi; ++m) {
      vslot_[m] = plan_.slot[plan_.miss[m]];
      unpack(rec_.data() + m * rec, written_[m] != 0, missRows_[m], tmpW_.data() + m * rb, tmpS_.data() + m * k);
    }
  });
  if (nm > 0) store_->put(vslot_.data(), nm, tmpW_.data(), tmpS_.data());
  cache_.commit(rows, plan_, /*use=*/!prefetch);
  for (int64_t i = 0; i < n; ++i) slots[i] = plan_.slot[i];
  uint64_t evicted = 0;
  for (uint64_t v : plan_.victim) evicted += v != RowCache::kEmptySlot;
  stats_.evictions += evicted;
  stats_.writebacks += static_cast<uint64_t>(nv);
  if (prefetch) {
    stats_.prefetched += static_cast<uint64_t>(nm);
  } else {
    stats_.misses += static_cast<uint64_t>(nm);
    stats_.hits += static_cast<uint64_t>(n - nm);
  }
}

void DiskTable::read_uncached(const uint64_t* rows, int64_t n) {
  const RecordLayout& L = file_.layout();
  ioRows_.clear();
  vslot_.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    vslot_[i] = cache_.find(rows[i]);
    if (vslot_[i] < 0) ioRows_.push_back(rows[i]);
  }
  const int64_t nf = static_cast<int64_t>(ioRows_.size());
  rec_.resize(static_cast<size_t>(nf) * L.recordBytes);
  written_.resize(static_cast<size_t>(nf));
  file_.read(ioRows_.data(), nf, rec_.data(), written_.data());
  spanW_.resize(L.rowBytes);
  spanS_.resize(L.statePerRow);
}

void DiskTable::load_row(const uint64_t* rows, int64_t i, int64_t& k) {
  if (vslot_[i] >= 0) return store_->get(&vslot_[i], 1, spanW_.data(), spanS_.data());
  unpack(rec_.data() + uint64_t(k) * file_.layout().recordBytes, written_[k] != 0, rows[i], spanW_.data(), spanS_.data());
  ++k;
}

// Reads go in chunks of rows, so that a read of a whole table needs no copy of its file in memory.
void DiskTable::read_values(const uint64_t* rows, int64_t n, float* out) {
  for (int64_t at = 0; at < n; at += kReadChunkRows) {
    const int64_t m = std::min<int64_t>(kReadChunkRows, n - at);
    read_uncached(rows + at, m);
    for (int64_t i = 0, k = 0; i < m; ++i) {
      load_row(rows + at, i, k);
      for (uint32_t c = 0; c < spec_.dim; ++c) out[(at + i) * spec_.dim + c] = load_value(spec_.dtype, spanW_.data(), c);
    }
  }
}

// A write: the records of the rows that are not resident are read and verified first (a damaged one
// fails the write before any row changes), each row is rewritten in order (`put(i, w, s)` overwrites its
// weights or its state wholly), resident rows in their cache slots, the others in the records already
// read, and those records go back in one batch, each row's once: for a row given twice, the record of its
// last occurrence, which holds the last write of the part `put` writes and the rest as it was read.
template <typename F>
void DiskTable::overwrite_rows(const uint64_t* rows, int64_t n, F&& put) {
  const uint64_t rb = file_.layout().recordBytes;
  read_uncached(rows, n);
  std::unordered_map<uint64_t, int64_t> last;  // file row -> its last occurrence among ioRows_
  for (int64_t i = 0, k = 0; i < n; ++i) {
    load_row(rows, i, k);
    put(i, spanW_.data(), spanS_.data());
    if (vslot_[i] >= 0) {
      store_->put(&vslot_[i], 1, spanW_.data(), spanS_.data());
      cache_.mark_dirty(vslot_[i]);
    } else {
      pack(spanW_.data(), spanS_.data(), rec_.data() + uint64_t(k - 1) * rb);
      last[rows[i]] = k - 1;
    }
  }
  int64_t nw = 0;
  for (int64_t k = 0; k < static_cast<int64_t>(ioRows_.size()); ++k) {
    if (last[ioRows_[k]] != k) continue;
    if (nw != k) {
      ioRows_[nw] = ioRows_[k];
      std::memmove(rec_.data() + uint64_t(nw) * rb, rec_.data() + uint64_t(k) * rb, rb);
    }
    ++nw;
  }
  file_.write(ioRows_.data(), nw, rec_.data());
}

void DiskTable::write_values(const uint64_t* rows, int64_t n, const float* in) {
  overwrite_rows(rows, n, [&](int64_t i, uint8_t* w, float*) {
    for (uint32_t c = 0; c < spec_.dim; ++c) store_value(spec_.dtype, w, c, in[i * spec_.dim + c]);
  });
}

void DiskTable::read_state(const uint64_t* rows, int64_t n, float* out) {
  const uint64_t k = file_.layout().statePerRow;
  if (k == 0) return;  // no optimizer state (SGD)
  for (int64_t at = 0; at < n; at += kReadChunkRows) {
    const int64_t m = std::min<int64_t>(kReadChunkRows, n - at);
    read_uncached(rows + at, m);
    for (int64_t i = 0, r = 0; i < m; ++i) {
      load_row(rows + at, i, r);
      std::memcpy(out + (at + i) * k, spanS_.data(), 4 * k);
    }
  }
}

void DiskTable::write_state(const uint64_t* rows, int64_t n, const float* in) {
  const uint64_t k = file_.layout().statePerRow;
  if (k == 0) return;  // no optimizer state (SGD): nothing to write
  overwrite_rows(rows, n, [&](int64_t i, uint8_t*, float* st) { std::memcpy(st, in + i * k, 4 * k); });
}

void DiskTable::load_span(uint64_t first, uint64_t n) {
  const RecordLayout& L = file_.layout();
  rec_.resize(n * L.recordBytes);
  written_.resize(n);
  spanW_.resize(n * L.rowBytes);
  spanS_.resize(n * L.statePerRow);
  file_.read_span(first, n, rec_.data(), written_.data());
  for (uint64_t i = 0; i < n; ++i) {
    const int64_t s = cache_.find(first + i);
    if (s >= 0) {
      store_->get(&s, 1, spanW_.data() + i * L.rowBytes, spanS_.data() + i * L.statePerRow);
    } else {
      unpack(rec_.data() + i * L.recordBytes, written_[i] != 0, first + i, spanW_.data() + i * L.rowBytes,
             spanS_.data() + i * L.statePerRow);
    }
  }
}

void DiskTable::store_span(uint64_t first, uint64_t n) {
  const RecordLayout& L = file_.layout();
  rec_.resize(n * L.recordBytes);
  for (uint64_t i = 0; i < n; ++i) {
    pack(spanW_.data() + i * L.rowBytes, spanS_.data() + i * L.statePerRow, rec_.data() + i * L.recordBytes);
    const int64_t s = cache_.find(first + i);
    if (s >= 0)  // the file now has the row: the cached copy is clean
      store_->put(&s, 1, spanW_.data() + i * L.rowBytes, spanS_.data() + i * L.statePerRow);
  }
  file_.write_span(first, n, rec_.data());
  for (uint64_t i = 0; i < n; ++i)
    if (int64_t s = cache_.find(first + i); s >= 0) cache_.mark_clean(s);
}

template <typename F>
void DiskTable::walk_spans(bool state, uint64_t off, uint64_t bytes, F&& fn) {
  const RecordLayout& L = file_.layout();
  const uint64_t per = state ? 4 * L.statePerRow : L.rowBytes;
  if (per == 0 || bytes == 0) return;
  uint64_t row = off / per, done = 0;
  while (bytes > 0) {
    const uint64_t n = std::min<uint64_t>(kSpanRows, L.rows - row);
    load_span(row, n);
    uint8_t* span = state ? reinterpret_cast<uint8_t*>(spanS_.data()) : spanW_.data();
    const uint64_t skip = off - row * per, take = std::min<uint64_t>(bytes, n * per - skip);
    fn(row, n, span + skip, take, done);
    off += take, bytes -= take, done += take, row += n;
  }
}

void DiskTable::read_raw(bool state, uint64_t off, uint64_t bytes, uint8_t* dst) {
  walk_spans(state, off, bytes, [&](uint64_t, uint64_t, const uint8_t* span, uint64_t take, uint64_t done) {
    std::memcpy(dst + done, span, take);
  });
}

void DiskTable::write_raw(bool state, uint64_t off, uint64_t bytes, const uint8_t* src) {
  walk_spans(state, off, bytes, [&](uint64_t row, uint64_t n, uint8_t* span, uint64_t take, uint64_t done) {
    std::memcpy(span, src + done, take);
    store_span(row, n);
  });
}

void DiskTable::flush() {
  const RecordLayout& L = file_.layout();
  ioRows_.clear();
  std::vector<int64_t> ds;
  for (uint64_t s = 0; s < slots(); ++s)
    if (cache_.tag(static_cast<int64_t>(s)) != RowCache::kEmptySlot && cache_.dirty(static_cast<int64_t>(s))) {
      ioRows_.push_back(cache_.tag(static_cast<int64_t>(s)));
      ds.push_back(static_cast<int64_t>(s));
    }
  // in chunks, so the write-back buffer stays a constant size
  for (size_t c0 = 0; c0 < ds.size(); c0 += kSpanRows) {
    const int64_t n = static_cast<int64_t>(std::min<size_t>(kSpanRows, ds.size() - c0));
    rec_.resize(static_cast<size_t>(n) * L.recordBytes);
    tmpW_.resize(static_cast<size_t>(n) * L.rowBytes);
    tmpS_.resize(static_cast<size_t>(n) * L.statePerRow);
    store_->get(ds.data() + c0, n, tmpW_.data(), tmpS_.data());
    parallel_for(n, 256, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) pack(tmpW_.data() + i * L.rowBytes, tmpS_.data() + i * L.statePerRow, rec_.data() + i * L.recordBytes);
    });
    file_.write(ioRows_.data() + c0, n, rec_.data());
  }
  for (int64_t s : ds) cache_.mark_clean(s);
  file_.sync();
  stats_.writebacks += ds.size();
}

DiskStats DiskTable::stats() const {
  DiskStats s = stats_;
  s.bytesRead = file_.bytes_read();
  s.bytesWritten = file_.bytes_written();
  return s;
}

}  // namespace embshard::storage
