// synthetic-oracle.ts — a naive per-value TypeScript reading of the synthetic source's documented formulas
// (lib/data/synthetic.ts header, lib/random/zipf.ts, lib/data/planted.ts, synthetic-sessions.ts), used by
// the tests as the oracle of the native generator: the same hashes, Zipf rank, scatter, bag lengths, dense
// counts and planted logit, one value at a time, with V8's own Math functions.
import { draw32, hash2, hashIndex, unit } from '../../lib/random/rng.js';
import { makeScatter, scatter, zipfParams, zipfRank } from '../../lib/random/zipf.js';
import { sigmoid } from '../../lib/data/planted.js';
import { SessionModel } from '../../lib/data/synthetic-sessions.js';
import type { SyntheticGenerator } from '../../lib/data/synthetic.js';

export interface OracleBatch {
  lengths: Int32Array;
  ids: Int32Array;
  dense: Float32Array;
  labels: Float32Array;
  planted: Float32Array;
}

/** The session of global sample i (synthetic-sessions.ts's formula). */
function sessionOf(m: SessionModel, i: number): number {
  const A = m.cfg.concurrent;
  const j = (hashIndex(m.slotKey, i) >>> 0) % A;
  const off = (hash2(m.offsetKey, j) >>> 0) % m.window;
  return Math.floor((i + off) / m.window) * A + j;
}

/** Local batch k of the generator's configuration, recomputed from the formulas. */
export function oracleBatch(gen: SyntheticGenerator, k: number): OracleBatch {
  const c = gen.cfg, m = gen.model;
  const B = c.batchSize, F = c.features.length, D = c.numDense;
  const first = gen.sampleIndex(k, 0);
  const sessions = c.sessions ? new SessionModel(c.sessions, c.seed, F) : null;
  const lengths = new Int32Array(F * B);
  const keys: number[] = [];
  for (let f = 0; f < F; f++) {
    const h = c.hotness[f]!;
    for (let b = 0; b < B; b++) {
      const own = hashIndex(hash2(c.seed, 0x100 + f), first + b);
      const key = sessions?.sessionField[f] ? hashIndex(sessions.bagKeys[f]!, sessionOf(sessions, first + b)) : own;
      keys.push(key);
      lengths[f * B + b] = c.lengths === 'fixed' ? h : 1 + Math.floor(unit(draw32(key, 1 << 20)) * (2 * h - 1));
    }
  }
  const ids: number[] = [];
  const logit = new Float64Array(B).fill(gen.logitOffset);
  for (let f = 0; f < F; f++) {
    const n = c.cardinalities[f]!, rows = c.tableRows[f]!;
    const z = zipfParams(n, c.alpha);
    const sc = c.scatter ? makeScatter(n, c.seed, f) : { n, a: 1, c: 0 };
    for (let b = 0; b < B; b++) {
      let acc = 0;
      for (let t = 0; t < lengths[f * B + b]!; t++) {
        const raw = scatter(sc, zipfRank(z, unit(draw32(keys[f * B + b]!, t))));
        const id = raw < rows ? raw : raw % rows;
        ids.push(id);
        acc += m.hiddenScore(f, id);
      }
      logit[b] += m.sparseCoef[f]! * acc;
    }
  }
  const dense = new Float32Array(B * D);
  for (let b = 0; b < B; b++) {
    const key = hashIndex(hash2(c.seed, 0xde), first + b);
    let lin = 0;
    for (let j = 0; j < D; j++) {
      const x = Math.log1p(Math.floor(Math.log(unit(draw32(key, j))) / Math.log(m.denseQ[j]!)));
      dense[b * D + j] = x;
      lin += m.denseCoef[j]! * (x - m.denseMean[j]!);
    }
    logit[b] += lin;
  }
  const labels = new Float32Array(B), planted = new Float32Array(B);
  for (let b = 0; b < B; b++) {
    const p = sigmoid(logit[b]!);
    planted[b] = p;
    labels[b] = unit(hashIndex(hash2(c.seed, 0x1abe1), first + b)) < p ? 1 : 0;
  }
  return { lengths, ids: Int32Array.from(ids), dense, labels, planted };
}
