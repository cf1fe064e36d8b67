// reference.ts — the independent oracle of the dense tests: every dense layer and the whole DLRM
// forward pass written naively from the math in float64, a central finite-difference gradient, and a
// small seeded RNG. Nothing here calls the addon.

/** mulberry32: a tiny deterministic PRNG for test data. */
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

/** Float32Array of n values uniform in [lo, hi). */
export function randArray(r: () => number, n: number, lo = -1, hi = 1): Float32Array {
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = lo + (hi - lo) * r();
  return a;
}

export type Vec = ArrayLike<number>;

/** y[B × out] = x·Wᵀ + b (W [out × in]). */
export function linear(x: Vec, B: number, inDim: number, outDim: number, W: Vec, b: Vec | null): Float64Array {
  const y = new Float64Array(B * outDim);
  for (let s = 0; s < B; s++)
    for (let o = 0; o < outDim; o++) {
      let acc = b ? b[o]! : 0;
      for (let i = 0; i < inDim; i++) acc += x[s * inDim + i]! * W[o * inDim + i]!;
      y[s * outDim + o] = acc;
    }
  return y;
}

export function relu(x: Vec): Float64Array {
  return Float64Array.from(x as ArrayLike<number>, (v) => (v > 0 ? v : 0));
}

/** DLRM dot interaction: [x, T_i·T_j for i = 1..F, j < i] with T = [x, e_1..e_F]. */
export function dotInteraction(x: Vec, e: Vec, B: number, d: number, F: number): Float64Array {
  const n = F + 1, w = d + (n * (n - 1)) / 2;
  const out = new Float64Array(B * w);
  const T = (s: number, i: number, k: number) => (i === 0 ? x[s * d + k]! : e[s * F * d + (i - 1) * d + k]!);
  for (let s = 0; s < B; s++) {
    for (let k = 0; k < d; k++) out[s * w + k] = x[s * d + k]!;
    let p = d;
    for (let i = 1; i < n; i++)
      for (let j = 0; j < i; j++) {
        let acc = 0;
        for (let k = 0; k < d; k++) acc += T(s, i, k) * T(s, j, k);
        out[s * w + p++] = acc;
      }
  }
  return out;
}

export function concat(x: Vec, e: Vec, B: number, dx: number, de: number): Float64Array {
  const out = new Float64Array(B * (dx + de));
  for (let s = 0; s < B; s++) {
    for (let k = 0; k < dx; k++) out[s * (dx + de) + k] = x[s * dx + k]!;
    for (let k = 0; k < de; k++) out[s * (dx + de) + dx + k] = e[s * de + k]!;
  }
  return out;
}

export interface CrossRef {
  V: Vec; // [r × D]
  U: Vec; // [D × r]
  b: Vec; // [D]
}

/** x_{l+1} = x0 ⊙ (U (V x_l) + b) + x_l. */
export function cross(x0: Vec, B: number, D: number, r: number, layers: CrossRef[]): Float64Array {
  let x = Float64Array.from(x0 as ArrayLike<number>);
  for (const L of layers) {
    const v = linear(x, B, D, r, L.V, null);
    const w = linear(v, B, r, D, L.U, L.b);
    const next = new Float64Array(B * D);
    for (let i = 0; i < B * D; i++) next[i] = x0[i]! * w[i]! + x[i]!;
    x = next;
  }
  return x;
}

/** Mean binary cross-entropy of logits, computed the textbook way: −y·log σ(z) − (1−y)·log(1−σ(z)). */
export function bce(z: Vec, y: Vec): number {
  let s = 0;
  for (let i = 0; i < z.length; i++) {
    const p = 1 / (1 + Math.exp(-z[i]!));
    s += -(y[i]! * Math.log(p) + (1 - y[i]!) * Math.log(1 - p));
  }
  return s / z.length;
}

export interface RefSpec {
  denseIn: number;
  bottom: number[];
  top: number[];
  numSparse: number;
  embDim: number;
  interaction: 'dot' | 'cross' | 'concat';
  crossLayers?: number;
  crossRank?: number;
}

/** Tensor layout of the dense model, in the order the native model documents (bottom, cross, top). */
export function refTensors(s: RefSpec): { name: string; offset: number; size: number }[] {
  const out: { name: string; offset: number; size: number }[] = [];
  let off = 0;
  const add = (name: string, size: number) => {
    out.push({ name, offset: off, size });
    off += size;
  };
  let inDim = s.denseIn;
  s.bottom.forEach((w, i) => {
    add(`bottom.${i}.weight`, w * inDim);
    add(`bottom.${i}.bias`, w);
    inDim = w;
  });
  const d = s.bottom[s.bottom.length - 1]!;
  const D = s.interaction === 'dot' ? d + ((s.numSparse + 1) * s.numSparse) / 2 : d + s.numSparse * s.embDim;
  for (let l = 0; l < (s.interaction === 'cross' ? s.crossLayers! : 0); l++) {
    add(`cross.${l}.V`, s.crossRank! * D);
    add(`cross.${l}.U`, D * s.crossRank!);
    add(`cross.${l}.bias`, D);
  }
  inDim = D;
  s.top.forEach((w, i) => {
    add(`top.${i}.weight`, w * inDim);
    add(`top.${i}.bias`, w);
    inDim = w;
  });
  return out;
}

/** Logits of the whole dense model (bottom MLP → interaction → [cross] → top MLP). */
export function denseForward(s: RefSpec, params: Vec, dense: Vec, sparse: Vec, B: number): Float64Array {
  const t = new Map(refTensors(s).map((x) => [x.name, x]));
  const view = (name: string) => {
    const x = t.get(name)!;
    return Array.prototype.slice.call(params, x.offset, x.offset + x.size) as number[];
  };
  let h: Vec = dense;
  let inDim = s.denseIn;
  s.bottom.forEach((w, i) => {
    h = relu(linear(h, B, inDim, w, view(`bottom.${i}.weight`), view(`bottom.${i}.bias`)));
    inDim = w;
  });
  const d = inDim;
  let z: Float64Array = s.interaction === 'dot' ? dotInteraction(h, sparse, B, d, s.numSparse) : concat(h, sparse, B, d, s.numSparse * s.embDim);
  const D = z.length / B;
  if (s.interaction === 'cross') {
    const layers: CrossRef[] = [];
    for (let l = 0; l < s.crossLayers!; l++) layers.push({ V: view(`cross.${l}.V`), U: view(`cross.${l}.U`), b: view(`cross.${l}.bias`) });
    z = cross(z, B, D, s.crossRank!, layers);
  }
  let g: Float64Array = z;
  inDim = D;
  s.top.forEach((w, i) => {
    g = linear(g, B, inDim, w, view(`top.${i}.weight`), view(`top.${i}.bias`));
    if (i + 1 < s.top.length) g = relu(g);
    inDim = w;
  });
  return g;
}

/** Central finite difference of f at every index of x (x is perturbed in place and restored). */
export function fdGradient(f: () => number, x: Float64Array, h = 1e-6): Float64Array {
  const g = new Float64Array(x.length);
  for (let i = 0; i < x.length; i++) {
    const v = x[i]!;
    x[i] = v + h;
    const up = f();
    x[i] = v - h;
    const down = f();
    x[i] = v;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

/** ‖a − b‖₂ / ‖b‖₂. */
export function relNorm(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let num = 0, den = 0;
  for (let i = 0; i < a.length; i++) {
    num += (a[i]! - b[i]!) ** 2;
    den += b[i]! ** 2;
  }
  return Math.sqrt(num / den);
}

/** Largest |a − b| / (atol + rtol·|b|) — a value ≤ 1 means every element is within tolerance. */
export function worstRatio(a: Vec, b: Vec, atol: number, rtol: number): number {
  if (a.length !== b.length) return Infinity;
  let worst = 0;
  for (let i = 0; i < a.length; i++) {
    const r = Math.abs(a[i]! - b[i]!) / (atol + rtol * Math.abs(b[i]!));
    if (Number.isNaN(r)) return Infinity;
    if (r > worst) worst = r;
  }
  return worst;
}

/**
 * x rounded to bfloat16 (8 significant bits, round to nearest, ties to even), computed from the
 * definition: the two neighbours m·2^(e−7) around x with e = ⌊log2 |x|⌋, the nearer one (the even m on a tie).
 */
export function bf16(x: number): number {
  if (x === 0 || !Number.isFinite(x)) return x;
  const a = Math.abs(x);
  let e = Math.floor(Math.log2(a));
  if (2 ** e > a) e--;
  if (2 ** (e + 1) <= a) e++;
  const ulp = 2 ** (e - 7);
  const q = a / ulp; // in [128, 256)
  let m = Math.floor(q);
  const rest = q - m;
  if (rest > 0.5 || (rest === 0.5 && m % 2 === 1)) m++;
  return Math.sign(x) * m * ulp;
}

/** Every element rounded to bf16 (kept as float32, which holds bf16 values exactly). */
export function bf16Array(x: ArrayLike<number>): Float32Array {
  return Float32Array.from(x, bf16);
}
