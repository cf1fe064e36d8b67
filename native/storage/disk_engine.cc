// disk_engine.cc — the CPU engine of collections with disk-backed tables (see disk_engine.h).
#include "storage/disk_engine.h"

#include <algorithm>
#include <cstring>

#include "core/errors.h"
#include "core/parallel.h"
#include "cpu/radix_sort.h"
#include "storage/slot_store.h"

namespace embshard::storage {

CollectionSpec cache_spec(const CollectionSpec& spec, const std::vector<std::unique_ptr<DiskTable>>& disk) {
  CollectionSpec inner = spec;
  for (size_t t = 0; t < spec.tables.size(); ++t)
    if (disk[t]) {
      inner.tables[t].rows = disk[t]->slots();
      inner.tables[t].idPolicy = IdPolicy::Error;  // ids are slots, always in range
    }
  return inner;
}

DiskEngine::DiskEngine(const CollectionSpec& spec, const Layout& layout,
                       const std::vector<std::unique_ptr<DiskStorageSpec>>& disk, bool initialize,
                       const InnerEngineFactory& makeInner)
    : Engine(spec, layout) {
  if (spec.optimizer.stochasticRounding)
    fail("INVALID_CONFIG", "optimizer.stochasticRounding is not supported with disk-backed tables (storage.kind 'disk')");
  disk_.resize(spec.tables.size());
  for (uint32_t t = 0; t < spec.tables.size(); ++t) {
    if (!disk[t]) continue;
    RowInit init{spec.tables[t].init, spec.seed, t, initialize};
    disk_[t] = std::make_unique<DiskTable>(spec.tables[t], layout.tables[t].statePerRow,
                                           static_cast<uint32_t>(spec.optimizer.type), *disk[t], init);
  }
  const CollectionSpec inner = cache_spec(spec, disk_);
  inner_ = makeInner(inner, make_layout(inner), initialize);
  auto* cpu = dynamic_cast<CpuEngine*>(inner_.get());
  for (uint32_t t = 0; t < spec.tables.size(); ++t) {
    if (!disk_[t]) continue;
    if (cpu)
      disk_[t]->attach(std::make_unique<HostSlots>(cpu->table_weights(t), cpu->table_state(t), cpu->layout().tables[t].rowBytes,
                                                   cpu->layout().tables[t].statePerRow));
    else
      disk_[t]->attach(std::make_unique<EngineSlots>(*inner_, t));
  }
  for (const FeatureSpec& f : spec.features) featureTable_.push_back(f.table);
  uniq_.resize(spec.tables.size());
  rank_.resize(spec.tables.size());
  slots_.resize(spec.tables.size());
}

void DiskEngine::collect(const PreparedBatch& b) {
  // One pass over the ids with an open-addressing table per disk table: each id's first-seen index
  // (posIdx_), the distinct rows in first-seen order; then those rows sorted (uniq_) with, for each
  // first-seen index, its place in the sorted order (rank_[t]).
  posIdx_.resize(static_cast<size_t>(b.numIds()));
  for (uint32_t t = 0; t < disk_.size(); ++t) {
    if (!disk_[t]) continue;
    int64_t n = 0;
    for (int32_t s = 0; s < b.F; ++s)
      if (featureTable_[b.feature[s]] == t) n += b.slotEnd(s) - b.slotBegin(s);
    int bits = 4;
    while ((int64_t(1) << bits) < 2 * n) ++bits;
    const uint64_t mask = (uint64_t(1) << bits) - 1;
    hkey_.assign(mask + 1, ~uint64_t(0));
    hval_.resize(mask + 1);
    first_.clear();
    for (int32_t s = 0; s < b.F; ++s) {
      if (featureTable_[b.feature[s]] != t) continue;
      for (int64_t i = b.slotBegin(s); i < b.slotEnd(s); ++i) {
        const uint64_t r = b.rows[i];
        uint64_t h = (r * 0x9E3779B97F4A7C15ull) >> (64 - bits);
        while (hkey_[h] != r && hkey_[h] != ~uint64_t(0)) h = (h + 1) & mask;
        if (hkey_[h] != r) {
          hkey_[h] = r;
          hval_[h] = static_cast<uint32_t>(first_.size());
          first_.push_back(r);
        }
        posIdx_[i] = hval_[h];
      }
    }
    // (row, first-seen index) pairs radix-sorted by row (as many bits as the table's row numbers have)
    const size_t u = first_.size();
    sortKeys_.assign(first_.begin(), first_.end());
    sortVals_.resize(u);
    for (size_t k = 0; k < u; ++k) sortVals_[k] = static_cast<uint32_t>(k);
    tmpKeys_.resize(u);
    tmpVals_.resize(u);
    const bool inTmp = radix_sort_pairs<uint64_t>(sortKeys_.data(), sortVals_.data(), tmpKeys_.data(), tmpVals_.data(),
                                                   static_cast<int64_t>(u), key_bits(spec_.tables[t].rows));
    const uint64_t* keys = inTmp ? tmpKeys_.data() : sortKeys_.data();
    const uint32_t* vals = inTmp ? tmpVals_.data() : sortVals_.data();
    uniq_[t].assign(keys, keys + u);
    rank_[t].resize(u);
    for (size_t k = 0; k < u; ++k) rank_[t][vals[k]] = static_cast<uint32_t>(k);
  }
}

void DiskEngine::stage_batch(const PreparedBatch& b, bool pin) {
  collect(b);
  // every check of every table before any table changes
  for (uint32_t t = 0; t < disk_.size(); ++t)
    if (disk_[t]) disk_[t]->check(uniq_[t].data(), static_cast<int64_t>(uniq_[t].size()));
  for (uint32_t t = 0; t < disk_.size(); ++t) {
    if (!disk_[t]) continue;
    slots_[t].resize(uniq_[t].size());
    disk_[t]->stage(uniq_[t].data(), static_cast<int64_t>(uniq_[t].size()), /*prefetch=*/false, slots_[t].data());
    if (pin) disk_[t]->pin_last();
  }
  // the batch as the inner engine sees it: same bags, ids rewritten to slots (memory tables: their row)
  ids_.resize(static_cast<size_t>(b.numIds()));
  for (int32_t s = 0; s < b.F; ++s) {
    const uint32_t t = featureTable_[b.feature[s]];
    const int64_t lo = b.slotBegin(s), hi = b.slotEnd(s);
    if (!disk_[t]) {
      for (int64_t i = lo; i < hi; ++i) ids_[i] = static_cast<int64_t>(b.rows[i]);
      continue;
    }
    const std::vector<uint32_t>& rk = rank_[t];
    const std::vector<int64_t>& sl = slots_[t];
    for (int64_t i = lo; i < hi; ++i) ids_[i] = sl[rk[posIdx_[i]]];
  }
  inner_batch_.B = b.B;
  inner_batch_.F = b.F;
  inner_batch_.feature = b.feature;
  inner_batch_.slotOf = b.slotOf;
  inner_batch_.offsets = b.offsets;
  // an inner engine that does not resolve raw ids itself takes them resolved
  if (inner_->capabilities().resolvesIds) inner_batch_.rows.clear();
  else inner_batch_.rows.assign(ids_.begin(), ids_.end());
  inner_batch_.weights = b.weights;
  inner_batch_.rawIds = ids_.data();
  inner_batch_.idType = IdType::I64;
}

void DiskEngine::sync_inner() {
  inner_->set_step(step_);
  inner_->set_learning_rate(spec_.optimizer.lr);
}

template <typename F>
void DiskEngine::staged_forward(const PreparedBatch& b, F&& inner) {
  stagedSerial_ = 0;
  stage_batch(b, /*pin=*/true);
  stagedSerial_ = b.serial;
  inner(inner_batch_);
}

void DiskEngine::forward(const PreparedBatch& b, float* pooled, float* const* seq) {
  staged_forward(b, [&](const PreparedBatch& ib) { inner_->forward(ib, pooled, seq); });
}

void DiskEngine::forward_device(const PreparedBatch& b, float* pooled, float* seq) {
  staged_forward(b, [&](const PreparedBatch& ib) { inner_->forward_device(ib, pooled, seq); });
}

template <typename F>
BackwardResult DiskEngine::staged_backward(const PreparedBatch& b, F&& inner) {
  // The forward of this very batch staged and pinned its rows (nothing but a prefetch, which keeps
  // pinned rows, ran since): its slots still hold. Otherwise stage again. The batch is known by its
  // serial, unique per prepare_batch: a batch prepared later into a recycled PreparedBatch at the same
  // address has another.
  const bool reuse = b.serial != 0 && stagedSerial_ == b.serial;
  stagedSerial_ = 0;
  if (!reuse) stage_batch(b, /*pin=*/false);
  sync_inner();
  BackwardResult r = inner(inner_batch_);
  step_ = inner_->step();
  for (uint32_t t = 0; t < disk_.size(); ++t) {
    if (!disk_[t]) continue;
    if (!r.skipped) disk_[t]->mark_dirty(slots_[t].data(), static_cast<int64_t>(slots_[t].size()));
    disk_[t]->unpin();
  }
  return r;
}

BackwardResult DiskEngine::backward(const PreparedBatch& b, const float* pooledGrad, const float* const* seqGrad) {
  return staged_backward(b, [&](const PreparedBatch& ib) { return inner_->backward(ib, pooledGrad, seqGrad); });
}

BackwardResult DiskEngine::backward_device(const PreparedBatch& b, const float* pooledGrad, const float* seqGrad) {
  return staged_backward(b, [&](const PreparedBatch& ib) { return inner_->backward_device(ib, pooledGrad, seqGrad); });
}

void DiskEngine::prefetch(const PreparedBatch& b) {
  collect(b);
  std::vector<int64_t> slots;
  for (uint32_t t = 0; t < disk_.size(); ++t) {
    if (!disk_[t]) continue;
    slots.resize(uniq_[t].size());
    disk_[t]->stage(uniq_[t].data(), static_cast<int64_t>(uniq_[t].size()), /*prefetch=*/true, slots.data());
  }
  // uniq_ now describes the prefetched batch; a pending backward restages only if its forward's
  // batch is gone (the staged serial stays: the pinned slots are untouched and slots_ / ids_ still hold)
}

void DiskEngine::flush() {
  for (auto& d : disk_)
    if (d) d->flush();
}

std::vector<const DiskTable*> DiskEngine::disk_tables() const {
  std::vector<const DiskTable*> v;
  for (auto& d : disk_) v.push_back(d.get());
  return v;
}

uint64_t DiskEngine::cache_bytes() const {
  uint64_t total = 0;
  for (uint32_t t = 0; t < disk_.size(); ++t)
    if (disk_[t]) total += disk_[t]->slots() * (inner_->layout().tables[t].rowBytes + 4 * layout_.tables[t].statePerRow + kSlotMetaBytes);
  return total;
}

void DiskEngine::read_rows(uint32_t table, const uint64_t* rows, int64_t n, float* out) {
  if (disk_[table]) disk_[table]->read_values(rows, n, out);
  else inner_->read_rows(table, rows, n, out);
}
void DiskEngine::write_rows(uint32_t table, const uint64_t* rows, int64_t n, const float* values) {
  if (disk_[table]) disk_[table]->write_values(rows, n, values);
  else inner_->write_rows(table, rows, n, values);
}
void DiskEngine::read_state(uint32_t table, const uint64_t* rows, int64_t n, float* out) {
  if (disk_[table]) disk_[table]->read_state(rows, n, out);
  else inner_->read_state(table, rows, n, out);
}
void DiskEngine::write_state(uint32_t table, const uint64_t* rows, int64_t n, const float* values) {
  if (disk_[table]) disk_[table]->write_state(rows, n, values);
  else inner_->write_state(table, rows, n, values);
}

namespace {
// Table t's byte range in an arena of layout L: [begin, end) including its padding, and its data bytes.
struct Region {
  uint64_t begin, end, data;
};
Region region(const Layout& L, const CollectionSpec& spec, Arena a, uint32_t t) {
  const TableStorage& ts = L.tables[t];
  const bool st = a == Arena::State;
  const uint64_t begin = st ? ts.stateOffset * 4 : ts.weightOffset;
  const uint64_t data = spec.tables[t].rows * (st ? ts.statePerRow * 4 : ts.rowBytes);
  uint64_t end;
  if (t + 1 < L.tables.size()) end = st ? L.tables[t + 1].stateOffset * 4 : L.tables[t + 1].weightOffset;
  else end = st ? L.stateFloats * 4 : L.weightBytes;
  return {begin, end, data};
}
}  // namespace

// Walks the tables that bytes [offset, offset + bytes) of arena `a` (outer layout) cover: fn(t, rel,
// take, done) for each, rel = offset into table t's region, done = bytes of the range already walked.
template <typename F>
void DiskEngine::walk_raw(Arena a, uint64_t offset, uint64_t bytes, F&& fn) const {
  const uint64_t total = a == Arena::Weights ? layout_.weightBytes : layout_.stateFloats * 4;
  if (offset > total || bytes > total - offset) fail("INTERNAL", "raw access past the end of an arena");
  uint64_t done = 0;
  for (uint32_t t = 0; t < spec_.tables.size() && bytes > 0; ++t) {
    const Region r = region(layout_, spec_, a, t);
    if (offset >= r.end) continue;
    const uint64_t take = std::min(bytes, r.end - offset);
    fn(t, offset - r.begin, take, done, r.data);
    offset += take, bytes -= take, done += take;
  }
}

void DiskEngine::read_raw(Arena a, uint64_t offset, uint64_t bytes, void* dst) {
  auto* out = static_cast<uint8_t*>(dst);
  walk_raw(a, offset, bytes, [&](uint32_t t, uint64_t rel, uint64_t take, uint64_t done, uint64_t data) {
    if (!disk_[t]) return inner_->read_raw(a, region(inner_->layout(), inner_->spec(), a, t).begin + rel, take, out + done);
    const uint64_t inData = rel < data ? std::min(take, data - rel) : 0;
    disk_[t]->read_raw(a == Arena::State, rel, inData, out + done);
    std::memset(out + done + inData, 0, take - inData);  // padding
  });
}

void DiskEngine::write_raw(Arena a, uint64_t offset, uint64_t bytes, const void* src) {
  const auto* in = static_cast<const uint8_t*>(src);
  walk_raw(a, offset, bytes, [&](uint32_t t, uint64_t rel, uint64_t take, uint64_t done, uint64_t data) {
    if (!disk_[t]) return inner_->write_raw(a, region(inner_->layout(), inner_->spec(), a, t).begin + rel, take, in + done);
    disk_[t]->write_raw(a == Arena::State, rel, rel < data ? std::min(take, data - rel) : 0, in + done);
  });
}

}  // namespace embshard::storage
