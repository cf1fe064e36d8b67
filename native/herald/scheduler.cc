// scheduler.cc — Herald's embedding scheduler (scheduler.h): allocation, cache simulation and the step's
// communication plan, in the exact order lib/herald/scheduler.ts documents.
#include "herald/scheduler.h"

#include <algorithm>

#include "core/errors.h"

namespace embshard::herald {

namespace {
// x = v, its old value recorded in `log` when there is one
template <typename T>
inline void set(std::vector<std::pair<T*, T>>* log, T& x, T v) {
  if (log) log->emplace_back(&x, x);
  x = v;
}
}  // namespace

void Scheduler::Cache::unlink(int32_t s, Journal* j) {
  auto* L = j ? &j->links : nullptr;
  const int32_t p = prev[s], n = next[s];
  if (p >= 0) set(L, next[p], n); else set(L, head, n);
  if (n >= 0) set(L, prev[n], p); else set(L, tail, p);
  set(L, prev[s], -1);
  set(L, next[s], -1);
}

void Scheduler::Cache::append(int32_t s, int64_t k, Journal* j) {
  auto* L = j ? &j->links : nullptr;
  set(j ? &j->keys : nullptr, key[s], k);
  set(L, prev[s], tail);
  set(L, next[s], -1);
  if (tail >= 0) set(L, next[tail], s); else set(L, head, s);
  set(L, tail, s);
}

void Scheduler::pushFree(Cache& c, int32_t s) {
  if (j_) j_->frees.emplace_back(&c, s);
  c.free.push_back(s);
}

int32_t Scheduler::popFree(Cache& c) {
  const int32_t s = c.free.back();
  if (j_) j_->frees.emplace_back(&c, -1 - s);
  c.free.pop_back();
  return s;
}

void Scheduler::homePut(uint64_t key, uint32_t slot) {
  if (j_) j_->homes.emplace_back(key, home_.find(key));
  home_.put(key, slot);
}

void Scheduler::homeErase(uint64_t key) {
  if (j_) j_->homes.emplace_back(key, home_.find(key));
  home_.erase(key);
}

void Scheduler::undo(const Journal& j) {
  for (auto e = j.links.rbegin(); e != j.links.rend(); ++e) *e->first = e->second;
  for (auto e = j.keys.rbegin(); e != j.keys.rend(); ++e) *e->first = e->second;
  for (auto e = j.frees.rbegin(); e != j.frees.rend(); ++e) {
    if (e->second >= 0) e->first->free.pop_back();
    else e->first->free.push_back(-1 - e->second);
  }
  for (auto e = j.homes.rbegin(); e != j.homes.rend(); ++e) {
    if (e->second == IdIndex::kNone) home_.erase(e->first);
    else home_.put(e->first, e->second);
  }
}

void Scheduler::commit() {
  if (!journals_.empty()) journals_.pop_front();
}

void Scheduler::rollback() {
  while (!journals_.empty()) {
    undo(journals_.back());
    journals_.pop_back();
  }
}

Scheduler::Scheduler(int32_t world, int32_t batchSize, std::vector<TableInfo> tables, std::vector<std::string> names, ViewSpec view, bool undo)
    : W_(world), B_(batchSize), T_(static_cast<int32_t>(tables.size())), viewSpec_(std::move(view)), tables_(std::move(tables)), names_(std::move(names)), undo_(undo) {
  if (viewSpec_.rank >= W_ || (viewSpec_.rank >= 0 && static_cast<int32_t>(viewSpec_.cols.size()) != T_))
    throw Error("INVALID_ARGUMENT", "herald: the view's rank must be in the world and name every table's column");
  int64_t perRank = 0;
  for (const TableInfo& t : tables_) perRank += t.slots;
  if (viewSpec_.rank >= 0 && perRank > INT32_MAX) throw Error("INVALID_SIZE", "herald: a rank's cache slots of all tables must stay below 2^31");
  rowBase_.assign(T_ + 1, 0);
  lo_.assign(static_cast<size_t>(T_) * (W_ + 1), 0);
  caches_.resize(static_cast<size_t>(W_) * T_);
  cacheBase_.assign(static_cast<size_t>(W_) * T_, 0);
  uint64_t total = 0;
  for (int32_t w = 0; w < W_; ++w)
    for (int32_t t = 0; t < T_; ++t) {
      cacheBase_[static_cast<size_t>(w) * T_ + t] = static_cast<uint32_t>(total);
      total += static_cast<uint64_t>(tables_[t].slots);
      if (total >= IdIndex::kNone) throw Error("INVALID_SIZE", "herald: world × cache slots of all tables must stay below 2^32");
    }
  slotRank_.resize(total);
  slotNo_.resize(total);
  for (int32_t w = 0; w < W_; ++w)
    for (int32_t t = 0; t < T_; ++t)
      for (int32_t s = 0; s < tables_[t].slots; ++s) {
        slotRank_[slotKey(w, t, s)] = w;
        slotNo_[slotKey(w, t, s)] = s;
      }
  home_.reset(total);
  for (int32_t t = 0; t < T_; ++t) {
    rowBase_[t + 1] = rowBase_[t] + tables_[t].rows;
    for (int32_t p = 0; p <= W_; ++p) lo_[static_cast<size_t>(t) * (W_ + 1) + p] = tables_[t].rows * p / W_;
    for (int32_t w = 0; w < W_; ++w) {
      Cache& c = cache(w, t);
      const int32_t n = tables_[t].slots;
      c.key.assign(n, -1);
      c.prev.assign(n, -1);
      c.next.assign(n, -1);
      c.free.resize(n);
      for (int32_t k = 0; k < n; ++k) c.free[k] = n - 1 - k;
    }
  }
}

int32_t Scheduler::ownerOf(int32_t t, int64_t row) const {
  const int64_t* l = &lo_[static_cast<size_t>(t) * (W_ + 1)];
  const int32_t p = static_cast<int32_t>(std::upper_bound(l, l + W_, row) - l) - 1;
  return p < 0 ? 0 : p;
}

int32_t Scheduler::tableOf(int64_t key) const {
  return static_cast<int32_t>(std::upper_bound(rowBase_.begin() + 1, rowBase_.begin() + T_, key) - (rowBase_.begin() + 1));
}

namespace {
inline int64_t id_at(const void* ids, IdType type, int64_t i) {
  switch (type) {
    case IdType::I64: return static_cast<const int64_t*>(ids)[i];
    case IdType::I32: return static_cast<const int32_t*>(ids)[i];
    default: return static_cast<const uint32_t*>(ids)[i];
  }
}
}  // namespace

void Scheduler::schedule(int64_t step, const std::vector<FeatureSpan>& feats, const int32_t* assign, StepOut& out) {
  out.view = RankView{};
  if (undo_) j_ = &journals_.emplace_back();
  try {
    plan(step, feats, assign, out);  // with a view rank, fills the view's inverse
    view(out);
  } catch (...) {
    if (j_) {  // a step that failed leaves the state as it was
      undo(*j_);
      journals_.pop_back();
      j_ = nullptr;
    }
    throw;
  }
  j_ = nullptr;
}

void Scheduler::view(StepOut& out) const {
  const int32_t me = viewSpec_.rank;
  if (me < 0) return;
  std::vector<ViewTable> vt(T_);
  int64_t slotBase = 0;
  for (int32_t t = 0; t < T_; ++t) {
    vt[t] = {tables_[t].dim, tables_[t].stateWidth, lo(t, me + 1) - lo(t, me), static_cast<int32_t>(slotBase), viewSpec_.cols[t]};
    slotBase += tables_[t].slots;
  }
  rank_view(out, me, W_, vt, viewSpec_.pooledDim, out.view);
  out.hasView = true;
}

void Scheduler::plan(int64_t step, const std::vector<FeatureSpan>& feats, const int32_t* assignIn, StepOut& out) {
  const int32_t W = W_, B = B_, T = T_;
  const int64_t G = static_cast<int64_t>(W) * B;
  // ---- every sample's keys (checked before any state changes)
  std::vector<int64_t> start(G + 1, 0);
  for (const FeatureSpan& f : feats) {
    int64_t total = 0;
    for (int64_t b = 0; b < G; ++b) {
      if (f.lengths[b] < 0) throw Error("INVALID_ARGUMENT", format("herald: table '%s': negative bag length", names_[f.table].c_str()));
      start[b + 1] += f.lengths[b];
      total += f.lengths[b];
    }
    if (total != f.n) throw Error("LENGTH_MISMATCH", format("herald: table '%s': the lengths sum to %lld but there are %lld ids", names_[f.table].c_str(), static_cast<long long>(total), static_cast<long long>(f.n)));
  }
  for (int64_t b = 0; b < G; ++b) start[b + 1] += start[b];
  std::vector<int64_t> keys(start[G]);
  {
    std::vector<int64_t> at(start.begin(), start.end() - 1);
    for (const FeatureSpan& f : feats) {
      const int64_t rows = tables_[f.table].rows, base = rowBase_[f.table];
      int64_t i = 0;
      for (int64_t b = 0; b < G; ++b)
        for (int32_t k = 0; k < f.lengths[b]; ++k, ++i) {
          const int64_t id = id_at(f.ids, f.idType, i);
          if (!(id >= 0 && id < rows))
            throw Error("ID_OUT_OF_RANGE", format("herald: table '%s' (%lld rows): id %lld is outside [0, %lld)", names_[f.table].c_str(),
                                                  static_cast<long long>(rows), static_cast<long long>(id), static_cast<long long>(rows)));
          keys[at[b]++] = base + id;
        }
    }
  }
  double* counts = out.counts;
  std::fill(counts, counts + 9, 0.0);
  enum { MOVES, EVICTIONS, COPIES, GRADS, ROWS, BYTES, READS, HITS, SCORE };
  // ---- the batch's distinct rows: every key occurrence → its distinct row k; each row's location looked up once
  const int64_t E = static_cast<int64_t>(keys.size());
  IdIndex& batchRows = batchRows_;  // key → k (a member: its memory is reused step after step)
  batchRows.reset(static_cast<uint64_t>(E));
  std::vector<int32_t> kid(E);
  std::vector<int64_t> kkey;
  constexpr int64_t kAhead = 8;
  for (int64_t e = 0; e < E; ++e) {
    if (e + kAhead < E) batchRows.prefetch(static_cast<uint64_t>(keys[e + kAhead]));
    uint32_t v = batchRows.find(static_cast<uint64_t>(keys[e]));
    if (v == IdIndex::kNone) {
      v = static_cast<uint32_t>(kkey.size());
      batchRows.put(static_cast<uint64_t>(keys[e]), v);
      kkey.push_back(keys[e]);
    }
    kid[e] = static_cast<int32_t>(v);
  }
  const int32_t K = static_cast<int32_t>(kkey.size());
  std::vector<uint32_t> held(K);  // the numbered cache slot holding row k before this step (kNone: at its owner)
  std::vector<int32_t> heldBy(K);  // the rank whose cache holds it (−1: none)
  for (int32_t k = 0; k < K; ++k) {
    if (k + kAhead < K) home_.prefetch(static_cast<uint64_t>(kkey[k + kAhead]));
    held[k] = home_.find(static_cast<uint64_t>(kkey[k]));
    heldBy[k] = held[k] == IdIndex::kNone ? -1 : slotRank_[held[k]];
  }
  auto holder = [&](int32_t k) { return heldBy[k]; };
  // ---- allocation
  std::vector<int32_t> assign(G);
  std::vector<int32_t> fill(W, 0);
  if (assignIn) {
    for (int64_t i = 0; i < G; ++i) {
      assign[i] = assignIn[i];
      for (int64_t e = start[i]; e < start[i + 1]; ++e)
        if (holder(kid[e]) == assign[i]) counts[SCORE]++;
    }
  } else {
    std::vector<int32_t> sc(W, 0), touched;
    const int32_t first = static_cast<int32_t>(step % W);
    for (int64_t i = 0; i < G; ++i) {
      for (int64_t e = start[i]; e < start[i + 1]; ++e) {
        const int32_t h = holder(kid[e]);
        if (h >= 0 && sc[h]++ == 0) touched.push_back(h);
      }
      int32_t best = -1, bs = -1;
      for (int32_t j = 0; j < W; ++j) {
        const int32_t r = (first + j) % W;
        if (fill[r] < B && sc[r] > bs) {
          best = r;
          bs = sc[r];
        }
      }
      assign[i] = best;
      fill[best]++;
      counts[SCORE] += bs;
      for (int32_t h : touched) sc[h] = 0;
      touched.clear();
    }
  }
  out.samples.assign(G, 0);
  std::fill(fill.begin(), fill.end(), 0);
  for (int64_t i = 0; i < G; ++i) {
    const int32_t w = assign[i];
    out.samples[static_cast<size_t>(w) * B + fill[w]++] = static_cast<int32_t>(i);
  }
  // ---- readers of every row: the last one, whether there are several, and every rank's rows (first-read order)
  std::vector<int32_t> last(K, -1);
  std::vector<uint8_t> several(K, 0);
  std::vector<int32_t> readerCount(K + 1, 0);
  std::vector<std::vector<int32_t>> mine(W);
  for (int32_t w = 0; w < W; ++w)
    for (int32_t j = 0; j < B; ++j) {
      const int32_t i = out.samples[static_cast<size_t>(w) * B + j];
      for (int64_t e = start[i]; e < start[i + 1]; ++e) {
        const int32_t k = kid[e];
        if (last[k] == w) continue;
        if (last[k] >= 0) several[k] = 1;
        last[k] = w;
        mine[w].push_back(k);
        readerCount[k + 1]++;
      }
    }
  // the rows in key order, each with its table and owner, and its readers in rank order
  std::vector<int32_t> order(K);
  {
    std::vector<std::pair<int64_t, int32_t>> byKey(K);
    for (int32_t k = 0; k < K; ++k) byKey[k] = {kkey[k], k};
    std::sort(byKey.begin(), byKey.end());
    for (int32_t r = 0; r < K; ++r) order[r] = byKey[r].second;
  }
  std::vector<int32_t> ktab(K), kown(K);
  for (int32_t r = 0, t = 0; r < K; ++r) {
    const int32_t k = order[r];
    while (kkey[k] >= rowBase_[t + 1]) ++t;
    ktab[k] = t;
    kown[k] = ownerOf(t, kkey[k] - rowBase_[t]);
  }
  for (int32_t k = 0; k < K; ++k) readerCount[k + 1] += readerCount[k];
  std::vector<int32_t> readers(readerCount[K]);
  {
    std::vector<int32_t> at(readerCount.begin(), readerCount.end() - 1);
    for (int32_t w = 0; w < W; ++w)
      for (int32_t k : mine[w]) readers[at[k]++] = w;
  }
  for (int32_t w = 0; w < W; ++w) mine[w].clear();
  for (int32_t r = 0; r < K; ++r) {  // every rank's rows, in key order
    const int32_t k = order[r];
    for (int32_t q = readerCount[k]; q < readerCount[k + 1]; ++q) mine[readers[q]].push_back(k);
  }
  if (viewSpec_.rank >= 0) {
    // the view rank's batch: every id's position among the rank's distinct rows of its table (ascending),
    // feature by feature, its samples in order
    const int32_t me = viewSpec_.rank;
    std::vector<int32_t> pos(K, -1);
    for (size_t a = 0, j = 0; j < mine[me].size(); ++j) {
      if (j > 0 && ktab[mine[me][j]] != ktab[mine[me][j - 1]]) a = j;
      pos[mine[me][j]] = static_cast<int32_t>(j - a);
    }
    std::vector<int64_t> cur(start.begin(), start.end() - 1);
    RankView& v = out.view;
    v.inverseStart.assign(feats.size() + 1, 0);
    for (size_t fi = 0; fi < feats.size(); ++fi) {
      for (int32_t j = 0; j < B; ++j) {
        const int32_t b = out.samples[static_cast<size_t>(me) * B + j];
        for (int32_t q = 0; q < feats[fi].lengths[b]; ++q) v.inverse.push_back(pos[kid[cur[b]++]]);
      }
      v.inverseStart[fi + 1] = static_cast<int32_t>(v.inverse.size());
    }
  }

  auto rowBytes = [&](int32_t t) { return static_cast<double>(tables_[t].dim + tables_[t].stateWidth) * 4; };
  auto push = [&](bool mv, int64_t key, int32_t t, int32_t from, int32_t to, int64_t fromId, int64_t toId) {
    out.xMove.push_back(mv ? 1 : 0);
    out.xKey.push_back(static_cast<double>(key));
    out.xTable.push_back(t);
    out.xFrom.push_back(from);
    out.xTo.push_back(to);
    out.xFromId.push_back(static_cast<int32_t>(fromId));
    out.xToId.push_back(static_cast<int32_t>(toId));
  };
  auto move = [&](int64_t key, int32_t t, int32_t from, int32_t to, int64_t fromId, int64_t toId) {
    push(true, key, t, from, to, fromId, toId);
    if (from != to) {
      counts[MOVES]++;
      counts[BYTES] += rowBytes(t);
    }
  };
  std::vector<uint32_t> cur(held);  // where row k lives as the step's moves go (numbered slot; kNone: at its owner)
  // a checked-out row goes home to its owner
  auto flush = [&](int32_t k) {
    const int64_t x = kkey[k];
    const int32_t t = ktab[k], o = kown[k], h = slotRank_[cur[k]], slot = slotNo_[cur[k]];
    move(x, t, h, o, slotId(h, t, slot), x - rowBase_[t] - lo(t, o));
    Cache& c = cache(h, t);
    c.unlink(slot, j_);
    pushFree(c, slot);
    homeErase(static_cast<uint64_t>(x));
    cur[k] = IdIndex::kNone;
  };
  // ---- 1: rows held in a cache: kept (their only reader holds them), or sent home
  for (int32_t r = 0; r < K; ++r) {
    const int32_t k = order[r];
    if (held[k] == IdIndex::kNone) continue;
    const int32_t h = slotRank_[held[k]], u = last[k];
    if (!several[k] && u == h) {
      Cache& c = cache(h, ktab[k]);
      const int32_t s = slotNo_[held[k]];
      c.unlink(s, j_);
      c.append(s, kkey[k], j_);  // most recently used
    } else if (several[k] || u == kown[k]) flush(k);
  }
  // ---- 2: rows with one reader that is not their owner: moved into the reader's cache when it has room
  auto alloc = [&](int32_t w, int32_t t) -> int32_t {
    Cache& c = cache(w, t);
    if (!c.free.empty()) return popFree(c);
    if (c.head < 0) return -1;
    const int32_t s = c.head;
    const int64_t y = c.key[s];
    if (batchRows.find(static_cast<uint64_t>(y)) != IdIndex::kNone) return -1;  // read this step: nothing to evict
    const int32_t oy = ownerOf(t, y - rowBase_[t]);
    move(y, t, w, oy, slotId(w, t, s), y - rowBase_[t] - lo(t, oy));
    counts[EVICTIONS]++;
    c.unlink(s, j_);
    homeErase(static_cast<uint64_t>(y));
    return s;
  };
  for (int32_t r = 0; r < K; ++r) {
    const int32_t k = order[r];
    if (several[k]) continue;
    const int64_t x = kkey[k];
    const int32_t u = last[k], t = ktab[k], o = kown[k];
    const int64_t row = x - rowBase_[t];
    const uint32_t gx = cur[k];
    const int32_t h = gx == IdIndex::kNone ? o : slotRank_[gx];
    if (u == o || h == u) continue;
    const int32_t s = alloc(u, t);
    if (s >= 0) {
      if (h == o) move(x, t, o, u, row - lo(t, o), slotId(u, t, s));
      else {
        const int32_t hs = slotNo_[gx];
        move(x, t, h, u, slotId(h, t, hs), slotId(u, t, s));
        Cache& ch = cache(h, t);
        ch.unlink(hs, j_);
        pushFree(ch, hs);
      }
      cache(u, t).append(s, x, j_);
      cur[k] = slotKey(u, t, s);
      homePut(static_cast<uint64_t>(x), cur[k]);
    } else if (h != o) flush(k);  // no room: the owner applies its update
  }
  // ---- 3: every rank's reads: local (owned at home, or in its cache) or a copy from where the row lived
  out.readStart.assign(static_cast<size_t>(W) * T + 1, 0);
  for (int32_t w = 0; w < W; ++w) {
    const std::vector<int32_t>& list = mine[w];
    size_t a = 0;
    for (int32_t t = 0; t < T; ++t) {
      size_t b = a;
      while (b < list.size() && ktab[list[b]] == t) ++b;
      int32_t copies = 0;
      for (size_t j = 0; j < b - a; ++j) {
        const int32_t k = list[a + j];
        const int64_t x = kkey[k], row = x - rowBase_[t];
        const int32_t o = kown[k];
        const uint32_t gp = held[k];
        const int32_t p = gp == IdIndex::kNone ? o : slotRank_[gp];
        counts[READS]++;
        if (p == w) counts[HITS]++;
        const uint32_t gh = cur[k];
        out.readRows.push_back(static_cast<double>(row));
        if (gh != IdIndex::kNone && slotRank_[gh] == w) out.readLoc.push_back(slotId(w, t, slotNo_[gh]));
        else if (gh == IdIndex::kNone && o == w) out.readLoc.push_back(static_cast<int32_t>(row - lo(t, w)));
        else {
          out.readLoc.push_back(-(1 + copies++));
          push(false, x, t, p, w, p == o ? row - lo(t, o) : slotId(p, t, slotNo_[gp]), -1);
          if (p != w) counts[COPIES]++;
          out.gTable.push_back(t);
          out.gFrom.push_back(w);
          out.gTo.push_back(o);
          out.gToId.push_back(static_cast<int32_t>(row - lo(t, o)));
          out.gPos.push_back(static_cast<int32_t>(j));
          counts[GRADS]++;
          counts[BYTES] += static_cast<double>(tables_[t].dim) * 4 * (p != w ? 2 : 1);
        }
      }
      out.readStart[static_cast<size_t>(w) * T + t + 1] = static_cast<int32_t>(out.readRows.size());
      a = b;
    }
  }
  counts[ROWS] = counts[MOVES] + counts[COPIES] + counts[GRADS];
}

}  // namespace embshard::herald
