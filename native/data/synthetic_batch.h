// synthetic_batch.h — the per-value work of the synthetic Criteo-like source (lib/data/synthetic.ts): bag
// lengths, Zipf-drawn ids, count-like dense features and labels of the planted model, for one batch. Every
// value is a pure function of (the spec, global sample index), computed with the same 32-bit hashes and
// double arithmetic, in the same order, as the definition in synthetic.ts; the spec's derived constants
// (Zipf spans, scatters, planted coefficients, log q) are computed once in TypeScript and passed in.
#pragma once
#include <cstdint>
#include <vector>

namespace embshard::data {

struct SynthFeature {
  uint32_t key;       // bag-key stream of the feature
  int32_t hot;        // mean (or fixed) bag length h
  bool alphaOne;      // Zipf α = 1: X = e^(u·span)
  double span, inv;   // Zipf: X = (u·span + 1)^inv (α ≠ 1)
  int64_t n;          // cardinality
  int64_t a, c;       // scatter: raw = (a·rank + c) mod n
  int64_t rows;       // id = raw mod rows
  double coef;        // planted sparse coefficient
  bool session;       // a session field (its bag key is its session's)
  uint32_t sessionKey;
};

struct SynthSpec {
  std::vector<SynthFeature> features;
  bool fixedLengths = false;
  uint32_t plantedKey = 0;
  double logitOffset = 0;
  uint32_t denseKey = 0, labelKey = 0;
  std::vector<double> denseCoef, denseMean, logQ;  // per dense feature
  std::vector<double> log1pOf;                      // log1p(k) for small counts k (as TypeScript computes it)
  // sessions (concurrent = 0: none)
  int64_t concurrent = 0, window = 0;
  uint32_t slotKey = 0, offsetKey = 0;
};

// Pass 1: each bag's length and key, feature-major ([F × B]); returns the total number of ids.
int64_t synth_lengths(const SynthSpec& s, int64_t first, int64_t B, int32_t* lengths, uint32_t* bagKeys);

// Pass 2: the ids (feature-major, bag by bag), dense [B × D], labels and planted probabilities [B].
void synth_fill(const SynthSpec& s, int64_t first, int64_t B, const int32_t* lengths, const uint32_t* bagKeys, int32_t* ids,
                float* dense, float* labels, float* planted);

}  // namespace embshard::data
