// metrics.test.ts — auc / expectedAUC / logloss against brute-force pairwise counts and naive sums.
import { describe, it, expect } from 'vitest';
import { auc, expectedAUC, logloss, loglossFromLogits } from '../../lib/data/metrics.js';
import { isEmbshardError } from '../../lib/errors.js';

/** A tiny deterministic LCG for test data (independent of the library's generators). */
function lcg(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 4294967296;
  };
}

function bruteAUC(s: ArrayLike<number>, y: ArrayLike<number>): number {
  let num = 0, pairs = 0;
  for (let i = 0; i < s.length; i++)
    for (let j = 0; j < s.length; j++)
      if (y[i] === 1 && y[j] === 0) {
        pairs++;
        num += s[i]! > s[j]! ? 1 : s[i] === s[j] ? 0.5 : 0;
      }
  return num / pairs;
}

function bruteExpected(s: ArrayLike<number>, p: ArrayLike<number>): number {
  let num = 0, den = 0;
  for (let i = 0; i < s.length; i++)
    for (let j = 0; j < s.length; j++) {
      if (i === j) continue;
      const w = p[i]! * (1 - p[j]!);
      den += w;
      num += w * (s[i]! > s[j]! ? 1 : s[i] === s[j] ? 0.5 : 0);
    }
  return num / den;
}

describe('auc', () => {
  it('equals the brute-force pairwise count, ties counted one half', () => {
    for (const [seed, n, levels] of [[1, 50, 0], [2, 300, 7], [3, 257, 2], [4, 1000, 0]] as const) {
      const r = lcg(seed);
      const s = new Float32Array(n), y = new Float32Array(n);
      for (let i = 0; i < n; i++) {
        y[i] = r() < 0.3 ? 1 : 0;
        // correlated scores; with `levels` > 0 heavily tied
        const v = y[i]! * 0.5 + r();
        s[i] = levels > 0 ? Math.floor(v * levels) / levels : v;
      }
      expect(auc(s, y)).toBeCloseTo(bruteAUC(s, y), 12);
    }
  });

  it('is 1 for a perfect scorer, 0 for a reversed one, ½ for a constant one', () => {
    const y = Float32Array.from([0, 1, 0, 1, 1, 0, 0]);
    const perfect = Float32Array.from(y, (v, i) => v * 10 + i * 0.01);
    expect(auc(perfect, y)).toBe(1);
    expect(auc(Float32Array.from(perfect, (v) => -v), y)).toBe(0);
    expect(auc(new Float32Array(7).fill(0.3), y)).toBe(0.5);
    // labels as scores: separable data, AUC exactly 1
    expect(auc(y, y)).toBe(1);
  });

  it('is NaN with one class only, and rejects bad labels, NaN scores and size mismatches', () => {
    expect(auc(Float32Array.from([0.1, 0.2]), Float32Array.from([1, 1]))).toBeNaN();
    expect(() => auc(Float32Array.from([0.1, 0.2]), Float32Array.from([1, 2]))).toThrow(/labels\[1\]/);
    expect(() => auc(Float32Array.from([NaN, 0.2]), Float32Array.from([1, 0]))).toThrow(/scores\[0\]/);
    try {
      auc(new Float32Array(3), new Float32Array(2));
      expect.unreachable();
    } catch (e) {
      expect(isEmbshardError(e, 'LENGTH_MISMATCH')).toBe(true);
    }
  });
});

describe('expectedAUC', () => {
  it('equals the brute-force weighted pair sum', () => {
    const r = lcg(9);
    const n = 200;
    const p = new Float64Array(n), s = new Float64Array(n);
    for (let i = 0; i < n; i++) {
      p[i] = r();
      s[i] = i % 5 === 0 ? Math.round(p[i]! * 4) / 4 : p[i]! + 0.3 * r(); // some ties
    }
    expect(expectedAUC(s, p)).toBeCloseTo(bruteExpected(s, p), 12);
  });

  it('with 0/1 probabilities is the plain AUC', () => {
    const y = Float64Array.from([0, 1, 1, 0, 1, 0, 0, 0]);
    const s = Float64Array.from([0.1, 0.4, 0.35, 0.8, 0.9, 0.2, 0.4, 0.05]);
    expect(expectedAUC(s, y)).toBeCloseTo(bruteAUC(s, y), 14);
  });
});

describe('logloss', () => {
  it('matches the naive mean of −[y ln p + (1−y) ln(1−p)]', () => {
    const r = lcg(5);
    const n = 500;
    const p = new Float64Array(n), y = new Float32Array(n);
    for (let i = 0; i < n; i++) {
      p[i] = 0.01 + 0.98 * r();
      y[i] = r() < p[i]! ? 1 : 0;
    }
    let naive = 0;
    for (let i = 0; i < n; i++) naive += -(y[i]! * Math.log(p[i]!) + (1 - y[i]!) * Math.log(1 - p[i]!));
    expect(logloss(p, y)).toBeCloseTo(naive / n, 12);
    const z = Float64Array.from(p, (v) => Math.log(v / (1 - v)));
    expect(loglossFromLogits(z, y)).toBeCloseTo(naive / n, 10);
  });

  it('takes soft labels (click probabilities): the naive mean of −[y ln p + (1−y) ln(1−p)] with y in [0, 1]', () => {
    const r = lcg(11);
    const n = 300;
    const p = new Float64Array(n), y = new Float32Array(n);
    for (let i = 0; i < n; i++) {
      p[i] = 0.02 + 0.96 * r();
      y[i] = i % 5 === 0 ? 0 : i % 5 === 1 ? 1 : r();
    }
    let naive = 0;
    for (let i = 0; i < n; i++) naive += -(y[i]! * Math.log(p[i]!) + (1 - y[i]!) * Math.log(1 - p[i]!));
    expect(logloss(p, y)).toBeCloseTo(naive / n, 12);
    expect(loglossFromLogits(Float64Array.from(p, (v) => Math.log(v / (1 - v))), y)).toBeCloseTo(naive / n, 10);
    // a label outside [0, 1] or NaN names its place
    for (const bad of [1.5, -0.1, NaN]) {
      const yb = Float32Array.from([0, 1, bad]);
      expect(() => logloss(Float64Array.from([0.5, 0.5, 0.5]), yb)).toThrow(/labels\[2\] is .*; labels must lie in \[0, 1\]/);
      expect(() => loglossFromLogits(Float64Array.from([0, 0, 0]), yb)).toThrow(/labels\[2\]/);
    }
  });

  it('clips p to [eps, 1 − eps]: a confident miss costs −ln(eps)', () => {
    expect(logloss(Float32Array.from([0]), Float32Array.from([1]))).toBeCloseTo(-Math.log(1e-7), 9);
    expect(logloss(Float32Array.from([0.5, 0.5]), Float32Array.from([1, 0]))).toBeCloseTo(Math.LN2, 14);
    expect(loglossFromLogits(Float64Array.from([-1000]), Float32Array.from([1]))).toBeCloseTo(1000, 9);
    expect(() => logloss(Float32Array.from([1.5]), Float32Array.from([1]))).toThrow(/probs\[0\]/);
  });

  it('takes infinite logits (an overflowed model): 0 when they agree with the label, +∞ when they contradict it', () => {
    // the naive definition with the convention 0 · ln 0 = 0, p = sigmoid(z) computed directly
    const naive = (z: number, y: number): number => {
      const p = 1 / (1 + Math.exp(-z));
      return (y > 0 ? -y * Math.log(p) : 0) + (y < 1 ? -(1 - y) * Math.log(1 - p) : 0);
    };
    const cases: [number, number][] = [[Infinity, 1], [-Infinity, 0], [Infinity, 0], [-Infinity, 1], [Infinity, 0.25], [-Infinity, 0.75], [3, 1], [-2, 0.3]];
    for (const [z, y] of cases) {
      for (const Z of [Float32Array, Float64Array]) {
        const got = loglossFromLogits(Z.from([z]), Float32Array.from([y]));
        const want = naive(z, Math.fround(y));
        expect(Number.isNaN(got), `z ${z}, y ${y}`).toBe(false);
        if (Number.isFinite(want)) expect(got, `z ${z}, y ${y}`).toBeCloseTo(want, 6);
        else expect(got, `z ${z}, y ${y}`).toBe(want);
      }
    }
    // the mean over agreeing infinite logits and finite ones
    const z = Float32Array.from([Infinity, -Infinity, 0.5]), y = Float32Array.from([1, 0, 1]);
    expect(loglossFromLogits(z, y)).toBeCloseTo(naive(0.5, 1) / 3, 12);
  });

  it('rejects a NaN logit and an eps outside [0, ½), naming them', () => {
    expect(() => loglossFromLogits(Float32Array.from([0, NaN]), Float32Array.from([1, 0]))).toThrow(/logits\[1\] is NaN/);
    for (const eps of [-1e-3, 0.5, 0.7, NaN]) {
      let err: unknown;
      try {
        logloss(Float32Array.from([0.5, 0.9]), Float32Array.from([1, 0]), eps);
      } catch (e) {
        err = e;
      }
      expect(isEmbshardError(err) && err.code === 'INVALID_ARGUMENT' && /eps/.test(err.message), `eps ${eps}`).toBe(true);
    }
    expect(logloss(Float32Array.from([1]), Float32Array.from([1]), 0)).toBe(0);
  });
});
