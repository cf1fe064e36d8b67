// rank_view.cc — one rank's share of a Herald step plan and the copy segments that execute it (rank_view.h).
// The orders reproduce the step's one record order: peers ascending, records ascending within a peer.
#include "herald/rank_view.h"

#include <algorithm>
#include <cstring>

#include "core/errors.h"
#include "herald/scheduler.h"

namespace embshard::herald {

namespace {

constexpr int64_t kMaxFloats = (int64_t(1) << 31) - 1;

int32_t checked(int64_t x, const char* what) {
  if (x > kMaxFloats) throw Error("INVALID_SIZE", format("herald: %s exceeds 2^31 floats", what));
  return static_cast<int32_t>(x);
}

// Indices i < n with sel(i), ordered by peer(i) (stable: record order within a peer).
template <typename Sel, typename Peer>
std::vector<int32_t> by_peer(size_t n, int32_t W, Sel sel, Peer peer) {
  std::vector<int32_t> start(W + 1, 0);
  for (size_t i = 0; i < n; ++i)
    if (sel(i)) start[peer(i) + 1]++;
  for (int32_t p = 0; p < W; ++p) start[p + 1] += start[p];
  std::vector<int32_t> out(start[W]);
  for (size_t i = 0; i < n; ++i)
    if (sel(i)) out[start[peer(i)]++] = static_cast<int32_t>(i);
  return out;
}

void seg(std::vector<int32_t>& s, int32_t dst, int64_t dstOff, int32_t src, int64_t srcOff, int32_t len) {
  s.insert(s.end(), {dst, checked(dstOff, "a destination offset"), src, checked(srcOff, "a source offset"), len});
}

}  // namespace

void rank_view(const StepOut& p, int32_t me, int32_t W, const std::vector<ViewTable>& tab, int32_t P, RankView& v) {
  const int32_t T = static_cast<int32_t>(tab.size());
  const size_t X = p.xMove.size(), G = p.gTable.size();
  auto size = [&](size_t i) -> int64_t {
    const ViewTable& t = tab[p.xTable[i]];
    return t.dim + (p.xMove[i] ? t.stateWidth : 0);
  };
  v.sendCounts.assign(W, 0);
  v.recvCounts.assign(W, 0);
  // ---- send: values (and moves' state) read per table in send order, laid out record by record
  {
    std::vector<std::vector<int64_t>> ids(T), sids(T);
    const auto order = by_peer(X, W, [&](size_t i) { return p.xFrom[i] == me; }, [&](size_t i) { return p.xTo[i]; });
    int64_t o = 0;
    for (int32_t i : order) {
      const int32_t t = p.xTable[i], to = p.xTo[i];
      const ViewTable& vt = tab[t];
      const int64_t id = p.xFromId[i];
      seg(v.sendSegs, 0, o, 2 * t, static_cast<int64_t>(ids[t].size()) * vt.dim, vt.dim);
      ids[t].push_back(id);
      o += vt.dim;
      if (p.xMove[i] && vt.stateWidth) {
        seg(v.sendSegs, 0, o, 2 * t + 1, static_cast<int64_t>(sids[t].size()) * vt.stateWidth, vt.stateWidth);
        sids[t].push_back(id);
        o += vt.stateWidth;
      }
      v.sendCounts[to] += static_cast<double>(size(i));
      // a row moved out of a cache slot frees it
      if (p.xMove[i] && to != me && id >= vt.owned) {
        v.freeSlots.push_back(vt.slotBase + static_cast<int32_t>(id - vt.owned));
        v.freeKeys.push_back(p.xKey[i]);
      }
    }
    checked(o, "the send buffer");
    v.sendStart.assign(T + 1, 0);
    v.sendStateStart.assign(T + 1, 0);
    for (int32_t t = 0; t < T; ++t) {
      v.sendIds.insert(v.sendIds.end(), ids[t].begin(), ids[t].end());
      v.sendStateIds.insert(v.sendStateIds.end(), sids[t].begin(), sids[t].end());
      v.sendStart[t + 1] = static_cast<int32_t>(v.sendIds.size());
      v.sendStateStart[t + 1] = static_cast<int32_t>(v.sendStateIds.size());
    }
  }
  // ---- receive: moves and copies per table in record order; the data arrives peer by peer
  {
    std::vector<int32_t> idx(X, -1), moves(T, 0), copies(T, 0);
    std::vector<std::vector<int64_t>> mv(T);
    for (size_t i = 0; i < X; ++i) {
      if (p.xTo[i] != me) continue;
      const int32_t t = p.xTable[i];
      if (p.xMove[i]) {
        idx[i] = moves[t]++;
        const int64_t id = p.xToId[i];
        mv[t].push_back(id);
        if (id >= tab[t].owned) {
          v.holdSlots.push_back(tab[t].slotBase + static_cast<int32_t>(id - tab[t].owned));
          v.holdKeys.push_back(p.xKey[i]);
        }
      } else idx[i] = copies[t]++;
    }
    v.moveStart.assign(T + 1, 0);
    v.copyStart.assign(T + 1, 0);
    for (int32_t t = 0; t < T; ++t) {
      checked(static_cast<int64_t>(moves[t]) * std::max(tab[t].dim, tab[t].stateWidth), "a table's moved rows");
      checked(static_cast<int64_t>(copies[t]) * tab[t].dim, "a table's copies");
      v.moveIds.insert(v.moveIds.end(), mv[t].begin(), mv[t].end());
      v.moveStart[t + 1] = v.moveStart[t] + moves[t];
      v.copyStart[t + 1] = v.copyStart[t] + copies[t];
    }
    const auto order = by_peer(X, W, [&](size_t i) { return p.xTo[i] == me; }, [&](size_t i) { return p.xFrom[i]; });
    int64_t o = 0;
    for (int32_t i : order) {
      const int32_t t = p.xTable[i];
      const ViewTable& vt = tab[t];
      const int64_t k = idx[i];
      if (p.xMove[i]) {
        seg(v.recvSegs, 3 * t, k * vt.dim, 0, o, vt.dim);
        if (vt.stateWidth) seg(v.recvSegs, 3 * t + 1, k * vt.stateWidth, 0, o + vt.dim, vt.stateWidth);
      } else seg(v.recvSegs, 3 * t + 2, k * vt.dim, 0, o, vt.dim);
      o += size(i);
      v.recvCounts[p.xFrom[i]] += static_cast<double>(size(i));
    }
    checked(o, "the received rows");
  }
  // ---- the forward's reads
  v.engStart.assign(T + 1, 0);
  v.copyPos.assign(v.copyStart[T], -1);
  for (int32_t t = 0; t < T; ++t) {
    const int32_t a = p.readStart[static_cast<size_t>(me) * T + t], b = p.readStart[static_cast<size_t>(me) * T + t + 1];
    int32_t nc = 0;
    for (int32_t j = 0; j < b - a; ++j) {
      const int32_t l = p.readLoc[a + j];
      if (l >= 0) {
        v.engIds.push_back(l);
        v.engPos.push_back(j);
      } else {
        const int32_t c = -l - 1;
        if (c >= v.copyStart[t + 1] - v.copyStart[t]) throw Error("INTERNAL", "herald: a read names a copy the plan does not send");
        v.copyPos[v.copyStart[t] + c] = j;
        nc++;
      }
    }
    if (nc != v.copyStart[t + 1] - v.copyStart[t]) throw Error("INTERNAL", "herald: the plan's copies and reads disagree");
    v.engStart[t + 1] = static_cast<int32_t>(v.engIds.size());
  }
  // ---- gradients: send, peer by peer
  v.gradSendCounts.assign(W, 0);
  v.gradRecvCounts.assign(W, 0);
  {
    const auto order = by_peer(G, W, [&](size_t i) { return p.gFrom[i] == me; }, [&](size_t i) { return p.gTo[i]; });
    int64_t o = 0;
    for (int32_t i : order) {
      const int32_t t = p.gTable[i], d = tab[t].dim;
      seg(v.gradSendSegs, 0, o, t, static_cast<int64_t>(p.gPos[i]) * d, d);
      o += d;
      v.gradSendCounts[p.gTo[i]] += d;
    }
    checked(o, "the gradient message");
  }
  // ---- the owner side: contributions per table, source rank by source rank
  {
    struct Contribution {
      int64_t id;
      int32_t src;
      int64_t off;
    };
    std::vector<std::vector<Contribution>> per(T);
    const auto order = by_peer(G, W, [&](size_t i) { return p.gTo[i] == me; }, [&](size_t i) { return p.gFrom[i]; });
    std::vector<int64_t> off(order.size());
    int64_t o = 0;
    for (size_t k = 0; k < order.size(); ++k) {
      const int32_t i = order[k];
      off[k] = o;
      o += tab[p.gTable[i]].dim;
      v.gradRecvCounts[p.gFrom[i]] += tab[p.gTable[i]].dim;
    }
    checked(o, "the received gradients");
    size_t k = 0;
    for (int32_t src = 0; src < W; ++src) {
      if (src == me) {
        for (int32_t t = 0; t < T; ++t) {
          const int32_t a = p.readStart[static_cast<size_t>(me) * T + t], b = p.readStart[static_cast<size_t>(me) * T + t + 1];
          for (int32_t j = 0; j < b - a; ++j)
            if (p.readLoc[a + j] >= 0) per[t].push_back({p.readLoc[a + j], t, static_cast<int64_t>(j) * tab[t].dim});
        }
        continue;
      }
      for (; k < order.size() && p.gFrom[order[k]] == src; ++k) per[p.gTable[order[k]]].push_back({p.gToId[order[k]], T, off[k]});
    }
    v.updStart.assign(T + 1, 0);
    v.updDistinct.assign(T, 0);
    int64_t rows = 1;
    for (int32_t t = 0; t < T; ++t) rows = std::max<int64_t>(rows, static_cast<int64_t>(per[t].size()));
    checked(rows * P, "the backward's pooled gradient");
    v.updRows = static_cast<int32_t>(rows);
    std::vector<int64_t> ids;
    for (int32_t t = 0; t < T; ++t) {
      ids.clear();
      for (size_t j = 0; j < per[t].size(); ++j) {
        const Contribution& c = per[t][j];
        v.updIds.push_back(c.id);
        ids.push_back(c.id);
        seg(v.updSegs, 0, static_cast<int64_t>(j) * P + tab[t].col, c.src, c.off, tab[t].dim);
      }
      std::sort(ids.begin(), ids.end());
      v.updDistinct[t] = static_cast<int32_t>(std::unique(ids.begin(), ids.end()) - ids.begin());
      v.updStart[t + 1] = static_cast<int32_t>(v.updIds.size());
    }
  }
}

void copy_segments(const int32_t* segs, int64_t n, float* const* dsts, const int64_t* dstSize, int32_t nDst, const float* const* srcs,
                   const int64_t* srcSize, int32_t nSrc, const char* what) {
  for (int64_t k = 0; k < n; ++k) {
    const int32_t* s = segs + 5 * k;
    const bool ok = s[0] >= 0 && s[0] < nDst && s[2] >= 0 && s[2] < nSrc && s[1] >= 0 && s[3] >= 0 && s[4] >= 0 &&
                    static_cast<int64_t>(s[1]) + s[4] <= dstSize[s[0]] && static_cast<int64_t>(s[3]) + s[4] <= srcSize[s[2]];
    if (!ok) throw Error("INVALID_ARGUMENT", format("%s: copy segment %lld is outside its buffers", what, static_cast<long long>(k)));
  }
  for (int64_t k = 0; k < n; ++k) {
    const int32_t* s = segs + 5 * k;
    std::memcpy(dsts[s[0]] + s[1], srcs[s[2]] + s[3], static_cast<size_t>(s[4]) * sizeof(float));
  }
}

void apply_slots(double* slotKey, int64_t slots, const int32_t* freeSlots, const double* freeKeys, int64_t nFree, const int32_t* holdSlots,
                 const double* holdKeys, int64_t nHold) {
  for (int64_t k = 0; k < nFree; ++k)
    if (freeSlots[k] < 0 || freeSlots[k] >= slots) throw Error("INVALID_ARGUMENT", "herald: a freed cache slot is outside the cache");
  for (int64_t k = 0; k < nHold; ++k)
    if (holdSlots[k] < 0 || holdSlots[k] >= slots) throw Error("INVALID_ARGUMENT", "herald: a held cache slot is outside the cache");
  for (int64_t k = 0; k < nFree; ++k)
    if (slotKey[freeSlots[k]] == freeKeys[k]) slotKey[freeSlots[k]] = -1;
  for (int64_t k = 0; k < nHold; ++k) slotKey[holdSlots[k]] = holdKeys[k];
}

}  // namespace embshard::herald
