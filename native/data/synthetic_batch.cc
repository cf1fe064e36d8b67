// synthetic_batch.cc — see synthetic_batch.h. The hashes are lib/random/rng.ts's (murmur3's finalizer,
// 32-bit wrap-around arithmetic); the Zipf rank, scatter and planted score are lib/random/zipf.ts's and
// lib/data/planted.ts's.
#include "data/synthetic_batch.h"

#include <cmath>

namespace embshard::data {

namespace {

inline uint32_t fmix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}

inline uint32_t hash2(uint32_t a, uint32_t b) { return fmix32((fmix32(a) ^ 0x9e3779b9u) * 0x01000193u + b); }

inline uint32_t hash3(uint32_t a, uint32_t b, uint32_t c) { return hash2(hash2(a, b), c); }

// i: a non-negative safe integer
inline uint32_t hash_index(uint32_t key, int64_t i) {
  return hash3(key, static_cast<uint32_t>(uint64_t(i)), static_cast<uint32_t>(uint64_t(i) >> 32));
}

inline uint32_t draw32(uint32_t key, uint32_t k) { return fmix32(key + (k + 1u) * 0x9e3779b9u); }

inline double unit(uint32_t x) { return (static_cast<double>(x) + 0.5) * 2.3283064365386963e-10; }

inline double triangular(uint32_t x) {
  const double a = (static_cast<double>(x & 0xffffu) + 0.5) * (1.0 / 65536);
  const double b = (static_cast<double>(x >> 16) + 0.5) * (1.0 / 65536);
  return (a + b - 1) * 2.449489742783178;
}

inline double sigmoid(double x) { return x >= 0 ? 1 / (1 + std::exp(-x)) : std::exp(x) / (1 + std::exp(x)); }

// The session of global sample i (synthetic-sessions.ts).
inline int64_t session_of(const SynthSpec& s, int64_t i) {
  const int64_t j = static_cast<int64_t>(hash_index(s.slotKey, i) % static_cast<uint64_t>(s.concurrent));
  const int64_t off = static_cast<int64_t>(hash2(s.offsetKey, static_cast<uint32_t>(j)) % static_cast<uint64_t>(s.window));
  return ((i + off) / s.window) * s.concurrent + j;
}

}  // namespace

int64_t synth_lengths(const SynthSpec& s, int64_t first, int64_t B, int32_t* lengths, uint32_t* bagKeys) {
  int64_t total = 0;
  const int64_t F = static_cast<int64_t>(s.features.size());
  for (int64_t f = 0; f < F; ++f) {
    const SynthFeature& p = s.features[f];
    const double span = 2.0 * p.hot - 1;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t i = first + b;
      const uint32_t key = s.concurrent > 0 && p.session ? hash_index(p.sessionKey, session_of(s, i)) : hash_index(p.key, i);
      bagKeys[f * B + b] = key;
      const int32_t len = s.fixedLengths ? p.hot : 1 + static_cast<int32_t>(std::floor(unit(draw32(key, 1u << 20)) * span));
      lengths[f * B + b] = len;
      total += len;
    }
  }
  return total;
}

void synth_fill(const SynthSpec& s, int64_t first, int64_t B, const int32_t* lengths, const uint32_t* bagKeys, int32_t* ids,
                float* dense, float* labels, float* planted) {
  std::vector<double> logit(static_cast<size_t>(B), s.logitOffset);
  const int64_t F = static_cast<int64_t>(s.features.size());
  int64_t pos = 0;
  for (int64_t f = 0; f < F; ++f) {
    const SynthFeature& p = s.features[f];
    const uint32_t scoreKey = hash2(s.plantedKey, static_cast<uint32_t>(f));
    for (int64_t b = 0; b < B; ++b) {
      const uint32_t key = bagKeys[f * B + b];
      const int32_t len = lengths[f * B + b];
      double acc = 0;
      for (int32_t t = 0; t < len; ++t) {
        const double u = unit(draw32(key, static_cast<uint32_t>(t)));
        const double x = p.alphaOne ? std::exp(u * p.span) : std::pow(u * p.span + 1, p.inv);
        double r = std::floor(x) - 1;
        if (r < 0) r = 0;
        else if (r >= static_cast<double>(p.n)) r = static_cast<double>(p.n - 1);
        const int64_t raw = (p.a * static_cast<int64_t>(r) + p.c) % p.n;
        const int64_t id = raw < p.rows ? raw : raw % p.rows;
        ids[pos++] = static_cast<int32_t>(id);
        acc += triangular(hash2(scoreKey, static_cast<uint32_t>(id)));
      }
      logit[b] += p.coef * acc;
    }
  }
  const int64_t D = static_cast<int64_t>(s.logQ.size());
  const int64_t nLog = static_cast<int64_t>(s.log1pOf.size());
  for (int64_t b = 0; b < B; ++b) {
    const uint32_t key = hash_index(s.denseKey, first + b);
    double lin = 0;
    for (int64_t j = 0; j < D; ++j) {
      const double cnt = std::floor(std::log(unit(draw32(key, static_cast<uint32_t>(j)))) / s.logQ[j]);
      const double x = cnt >= 0 && cnt < static_cast<double>(nLog) ? s.log1pOf[static_cast<size_t>(cnt)] : std::log1p(cnt);
      dense[b * D + j] = static_cast<float>(x);
      lin += s.denseCoef[j] * (x - s.denseMean[j]);
    }
    logit[b] += lin;
  }
  for (int64_t b = 0; b < B; ++b) {
    const double pr = sigmoid(logit[b]);
    planted[b] = static_cast<float>(pr);
    labels[b] = unit(hash_index(s.labelKey, first + b)) < pr ? 1.0f : 0.0f;
  }
}

}  // namespace embshard::data
