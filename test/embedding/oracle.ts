// oracle.ts — a naive reference of the embedding math, written straight from the README's formulas
// (per-id loops, Math.fround for fp32 arithmetic, an independent fp16/bf16 rounding), used as the
// independent oracle of the native backends.

export type Pool = 'sum' | 'mean' | 'none';
export interface OTable { rows: number; dim: number; dtype: 'fp32' | 'fp16' | 'bf16'; w: Float64Array; state: Float64Array[] }
export interface OFeature { name: string; table: number; pooling: Pool }
export interface OOpt { type: 'sgd' | 'adagrad' | 'rowwise_adagrad' | 'adam'; lr: number; eps: number; beta1: number; beta2: number; weightDecay: number }

const f = Math.fround;

/** Round-to-nearest-even to IEEE binary16, computed with powers of two (independent of the native bit tricks). */
export function roundF16(x: number): number {
  x = f(x);
  if (!Number.isFinite(x) || x === 0) return x;
  const s = x < 0 ? -1 : 1;
  const a = Math.abs(x);
  if (a >= 65520) return s * Infinity;
  let e = Math.floor(Math.log2(a));
  if (2 ** e > a) e--;
  if (2 ** (e + 1) <= a) e++;
  if (e < -14) e = -14;
  const ulp = 2 ** (e - 10);
  const q = a / ulp;
  let r = Math.floor(q);
  const frac = q - r;
  if (frac > 0.5 || (frac === 0.5 && r % 2 === 1)) r++;
  return s * r * ulp;
}

/** Round-to-nearest-even to bfloat16 (8 significant bits). */
export function roundBF16(x: number): number {
  x = f(x);
  if (!Number.isFinite(x) || x === 0) return x;
  const s = x < 0 ? -1 : 1;
  const a = Math.abs(x);
  let e = Math.floor(Math.log2(a));
  if (2 ** e > a) e--;
  if (2 ** (e + 1) <= a) e++;
  if (e < -126) e = -126;
  const ulp = 2 ** (e - 7);
  const q = a / ulp;
  let r = Math.floor(q);
  const frac = q - r;
  if (frac > 0.5 || (frac === 0.5 && r % 2 === 1)) r++;
  return s * r * ulp;
}

export function roundTo(dtype: OTable['dtype'], x: number): number {
  return dtype === 'fp32' ? f(x) : dtype === 'fp16' ? roundF16(x) : roundBF16(x);
}

export interface OBatch { B: number; features: string[]; lengths: Int32Array; ids: number[]; weights?: Float32Array }

/** Bag i of slot s: [start, end) in ids. */
function bags(b: OBatch): number[] {
  const off = [0];
  for (let i = 0; i < b.lengths.length; i++) off.push(off[i]! + b.lengths[i]!);
  return off;
}

export class Oracle {
  t = 0;
  constructor(public tables: OTable[], public features: OFeature[], public opt: OOpt) {}

  pooledDim(): number {
    return this.features.filter((x) => x.pooling !== 'none').reduce((s, x) => s + this.tables[x.table]!.dim, 0);
  }

  forward(b: OBatch): { pooled: Float64Array; seq: Map<string, Float64Array> } {
    const off = bags(b);
    const P = this.pooledDim();
    const pooled = new Float64Array(b.B * P);
    const seq = new Map<string, Float64Array>();
    let col = 0;
    for (const feat of this.features) {
      const slot = b.features.indexOf(feat.name);
      const T = this.tables[feat.table]!;
      if (feat.pooling === 'none') {
        const start = off[slot * b.B]!, end = off[(slot + 1) * b.B]!;
        const v = new Float64Array((end - start) * T.dim);
        for (let i = start; i < end; i++) for (let c = 0; c < T.dim; c++) v[(i - start) * T.dim + c] = T.w[b.ids[i]! * T.dim + c]!;
        seq.set(feat.name, v);
        continue;
      }
      for (let s = 0; s < b.B; s++) {
        const bag = slot * b.B + s;
        const len = off[bag + 1]! - off[bag]!;
        for (let c = 0; c < T.dim; c++) {
          let acc = 0;
          for (let i = off[bag]!; i < off[bag + 1]!; i++) {
            const w = b.weights ? b.weights[i]! : 1;
            acc = f(acc + (b.weights ? f(w * T.w[b.ids[i]! * T.dim + c]!) : T.w[b.ids[i]! * T.dim + c]!));
          }
          if (feat.pooling === 'mean' && len > 0) acc = f(acc / len);
          pooled[s * P + col + c] = acc;
        }
      }
      col += T.dim;
    }
    return { pooled, seq };
  }

  backward(b: OBatch, gPooled: Float32Array, gSeq: Map<string, Float32Array>): void {
    const off = bags(b);
    const P = this.pooledDim();
    this.t++;
    // contributions per (table,row) in id order
    const acc = new Map<string, { table: number; row: number; g: Float64Array }>();
    const colOf = new Map<string, number>();
    let col = 0;
    for (const feat of this.features) if (feat.pooling !== 'none') { colOf.set(feat.name, col); col += this.tables[feat.table]!.dim; }
    // id order: slots in batch order, bags in order, ids in order
    for (let slot = 0; slot < b.features.length; slot++) {
      const feat = this.features.find((x) => x.name === b.features[slot])!;
      const T = this.tables[feat.table]!;
      for (let s = 0; s < b.B; s++) {
        const bag = slot * b.B + s;
        const len = off[bag + 1]! - off[bag]!;
        for (let i = off[bag]!; i < off[bag + 1]!; i++) {
          const key = `${feat.table}:${b.ids[i]}`;
          let e = acc.get(key);
          if (!e) acc.set(key, (e = { table: feat.table, row: b.ids[i]!, g: new Float64Array(T.dim) }));
          for (let c = 0; c < T.dim; c++) {
            let g: number;
            if (feat.pooling === 'none') {
              g = gSeq.get(feat.name)![(i - off[slot * b.B]!) * T.dim + c]!;
            } else {
              const w = b.weights ? b.weights[i]! : 1;
              const scale = feat.pooling === 'mean' ? f(w / len) : w;
              g = f(gPooled[s * P + colOf.get(feat.name)! + c]! * scale);
            }
            e.g[c] = f(e.g[c]! + g);
          }
        }
      }
    }
    const o = this.opt;
    // bias corrections 1 - β^t of the fp32 β, exact, rounded once to fp32
    const bc1 = f(1 - Math.pow(f(o.beta1), this.t));
    const bc2 = f(1 - Math.pow(f(o.beta2), this.t));
    for (const { table, row, g } of acc.values()) {
      const T = this.tables[table]!;
      const D = T.dim;
      const gd = new Float64Array(D);
      for (let c = 0; c < D; c++) gd[c] = o.weightDecay ? f(g[c]! + f(o.weightDecay * T.w[row * D + c]!)) : g[c]!;
      if (o.type === 'rowwise_adagrad') {
        // The documented order: 16 partial sums (column c goes to partial c mod 16, columns ascending),
        // then halves folded onto the lower half (8, 4, 2, 1) until one sum is left.
        let parts: number[] = new Array<number>(16).fill(0);
        for (let c = 0; c < D; c++) parts[c % 16] = f(parts[c % 16]! + f(gd[c]! * gd[c]!));
        while (parts.length > 1) {
          const half = parts.length / 2;
          parts = parts.slice(0, half).map((x, j) => f(x + parts[j + half]!));
        }
        const sq = parts[0]!;
        T.state[0]![row] = f(T.state[0]![row]! + f(sq / D));
      }
      for (let c = 0; c < D; c++) {
        const w = T.w[row * D + c]!;
        const gc = gd[c]!;
        let nw: number;
        if (o.type === 'sgd') nw = f(w - f(o.lr * gc));
        else if (o.type === 'adagrad') {
          const s = (T.state[0]![row * D + c] = f(T.state[0]![row * D + c]! + f(gc * gc)));
          nw = f(w - f(f(o.lr * gc) / f(f(Math.sqrt(s)) + o.eps)));
        } else if (o.type === 'rowwise_adagrad') {
          nw = f(w - f(f(o.lr * gc) / f(f(Math.sqrt(T.state[0]![row]!)) + o.eps)));
        } else {
          const m = (T.state[0]![row * D + c] = f(f(o.beta1 * T.state[0]![row * D + c]!) + f(f(1 - o.beta1) * gc)));
          const v = (T.state[1]![row * D + c] = f(f(o.beta2 * T.state[1]![row * D + c]!) + f(f(f(1 - o.beta2) * gc) * gc)));
          const mhat = f(m / bc1), vhat = f(v / bc2);
          nw = f(w - f(f(o.lr * mhat) / f(f(Math.sqrt(vhat)) + o.eps)));
        }
        T.w[row * D + c] = roundTo(T.dtype, nw);
      }
    }
  }
}

/** Max over i of |a-b| / (atol + rtol·|b|); ≤ 1 means within tolerance. */
export function worst(a: ArrayLike<number>, b: ArrayLike<number>, rtol: number, atol: number): number {
  if (a.length !== b.length) return Infinity;
  let m = 0;
  for (let i = 0; i < a.length; i++) {
    const d = Math.abs(a[i]! - b[i]!) / (atol + rtol * Math.abs(b[i]!));
    if (!(d <= m)) m = Number.isNaN(d) ? Infinity : Math.max(m, d);
  }
  return m;
}

/** Deterministic PRNG for test inputs (mulberry32). */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
