// metrics.ts — evaluation metrics of a click model: ROC AUC (ties count one half, the Mann–Whitney
// statistic), its expectation under known click probabilities, and binary cross-entropy. O(n log n) with
// native typed-array sorts; no per-element objects.
import { EmbshardError } from '../errors.js';

type Scores = Float32Array | Float64Array;

function checkPair(scores: Scores, labels: Float32Array | Float64Array, what = 'labels'): void {
  if (!(scores instanceof Float32Array || scores instanceof Float64Array))
    throw new EmbshardError('INVALID_ARGUMENT', 'scores must be a Float32Array or Float64Array');
  if (!(labels instanceof Float32Array || labels instanceof Float64Array))
    throw new EmbshardError('INVALID_ARGUMENT', `${what} must be a Float32Array or Float64Array`);
  if (scores.length !== labels.length)
    throw new EmbshardError('LENGTH_MISMATCH', `scores has ${scores.length} entries but ${what} has ${labels.length}`);
}

/** Σ over (x in a, y in b) of [x > y] + ½[x = y], both sorted ascending. */
function pairCount(a: Float64Array, b: Float64Array): number {
  let sum = 0;
  let lo = 0, hi = 0; // b[0, lo) < x ; b[0, hi) <= x
  for (let i = 0; i < a.length; i++) {
    const x = a[i]!;
    while (lo < b.length && b[lo]! < x) lo++;
    if (hi < lo) hi = lo;
    while (hi < b.length && b[hi]! <= x) hi++;
    sum += lo + 0.5 * (hi - lo);
  }
  return sum;
}

/**
 * ROC AUC of `scores` against 0/1 `labels`: the probability that a random positive outranks a random
 * negative, ties counted one half. NaN when one class is absent. Throws on a label other than 0 or 1 or
 * a NaN score.
 */
export function auc(scores: Scores, labels: Float32Array | Float64Array): number {
  checkPair(scores, labels);
  let np = 0;
  for (let i = 0; i < labels.length; i++) {
    const y = labels[i]!;
    if (y === 1) np++;
    else if (y !== 0) throw new EmbshardError('INVALID_ARGUMENT', `labels[${i}] is ${y}; labels must be 0 or 1`);
    if (Number.isNaN(scores[i]!)) throw new EmbshardError('INVALID_ARGUMENT', `scores[${i}] is NaN`);
  }
  const nn = labels.length - np;
  if (np === 0 || nn === 0) return NaN;
  const pos = new Float64Array(np), neg = new Float64Array(nn);
  for (let i = 0, a = 0, b = 0; i < labels.length; i++) {
    if (labels[i] === 1) pos[a++] = scores[i]!;
    else neg[b++] = scores[i]!;
  }
  pos.sort();
  neg.sort();
  return pairCount(pos, neg) / (np * nn);
}

/**
 * Expected AUC of `scores` when sample i clicks with probability probs[i], independently:
 * Σ_{i≠j} p_i (1 − p_j) ([s_i > s_j] + ½[s_i = s_j]) / Σ_{i≠j} p_i (1 − p_j) — the ratio of expectations,
 * which the AUC of a large sample approaches. With scores = probs it is the planted (Bayes) AUC.
 */
export function expectedAUC(scores: Scores, probs: Float32Array | Float64Array): number {
  checkPair(scores, probs, 'probs');
  const n = scores.length;
  for (let i = 0; i < n; i++) {
    const p = probs[i]!;
    if (!(p >= 0 && p <= 1)) throw new EmbshardError('INVALID_ARGUMENT', `probs[${i}] is ${p}; probabilities must lie in [0, 1]`);
    if (Number.isNaN(scores[i]!)) throw new EmbshardError('INVALID_ARGUMENT', `scores[${i}] is NaN`);
  }
  // Sort indices by score (ascending) through a packed order: sort scores, then group equal scores.
  const order = new Uint32Array(n);
  for (let i = 0; i < n; i++) order[i] = i;
  order.sort((a, b) => scores[a]! - scores[b]!);
  let num = 0, negBelow = 0, sumP = 0, sumQ = 0, self = 0;
  for (let i = 0; i < n; ) {
    let j = i, tp = 0, tq = 0;
    while (j < n && scores[order[j]!] === scores[order[i]!]) {
      const p = probs[order[j]!]!;
      tp += p;
      tq += 1 - p;
      self += p * (1 - p);
      j++;
    }
    // pairs (pos in group, neg strictly below) + ½ (pos, neg in same group, excluding i = j)
    num += tp * negBelow + 0.5 * (tp * tq);
    negBelow += tq;
    sumP += tp;
    sumQ += tq;
    i = j;
  }
  num -= 0.5 * self; // remove the i = j terms counted in the same-group half
  const den = sumP * sumQ - self;
  return den > 0 ? num / den : NaN;
}

/** Throws unless labels[i] lies in [0, 1] (a 0 / 1 label, or a soft one: a click probability). */
function checkLabel(y: number, i: number): void {
  if (!(y >= 0 && y <= 1)) throw new EmbshardError('INVALID_ARGUMENT', `labels[${i}] is ${y}; labels must lie in [0, 1]`);
}

/**
 * Mean binary cross-entropy −[y ln p + (1−y) ln(1−p)] of probabilities p against labels y in [0, 1] (0 / 1
 * or soft), with p clipped to [eps, 1 − eps] (eps default 1e-7, as Keras/torchmetrics do) so a confident
 * miss is finite.
 */
export function logloss(probs: Scores, labels: Float32Array | Float64Array, eps = 1e-7): number {
  checkPair(probs, labels);
  if (typeof eps !== 'number' || !(eps >= 0 && eps < 0.5)) throw new EmbshardError('INVALID_ARGUMENT', `eps must be a number in [0, 0.5) (got ${String(eps)})`);
  if (labels.length === 0) return NaN;
  let s = 0;
  for (let i = 0; i < labels.length; i++) {
    const y = labels[i]!;
    checkLabel(y, i);
    let p = probs[i]!;
    if (!(p >= 0 && p <= 1)) throw new EmbshardError('INVALID_ARGUMENT', `probs[${i}] is ${p}; probabilities must lie in [0, 1]`);
    p = p < eps ? eps : p > 1 - eps ? 1 - eps : p;
    s -= (y === 0 ? 0 : y * Math.log(p)) + (y === 1 ? 0 : (1 - y) * Math.log1p(-p));
  }
  return s / labels.length;
}

/**
 * Mean binary cross-entropy from logits z (p = sigmoid(z)) against labels y in [0, 1] (0 / 1 or soft),
 * computed stably as (1 − y)·max(z, 0) + y·max(−z, 0) + ln(1 + e^−|z|): an infinite logit costs 0 when it
 * agrees with its label and +∞ when it contradicts it. Throws on a NaN logit.
 */
export function loglossFromLogits(logits: Scores, labels: Float32Array | Float64Array): number {
  checkPair(logits, labels);
  if (labels.length === 0) return NaN;
  let s = 0;
  for (let i = 0; i < labels.length; i++) {
    const y = labels[i]!, z = logits[i]!;
    checkLabel(y, i);
    if (Number.isNaN(z)) throw new EmbshardError('INVALID_ARGUMENT', `logits[${i}] is NaN`);
    // the y = 1 and y = 0 terms are skipped, not multiplied by 0: 0 · ∞ would be NaN
    s += (y === 1 ? 0 : (1 - y) * Math.max(z, 0)) + (y === 0 ? 0 : y * Math.max(-z, 0)) + Math.log1p(Math.exp(-Math.abs(z)));
  }
  return s / labels.length;
}
