// dense.ts — the dense half of a DLRM/DCNv2 model: presets, custom layer lists, and DenseModel, a thin
// typed wrapper over the addon's DenseModel (bottom MLP → interaction → top MLP → logit, BCE loss, and a
// dense optimizer), whose forward/backward/update run off the event loop.
import { EmbshardError } from '../errors.js';
import { denseAddon, type DenseOptimizerType, type InteractionType, type NativeDenseModel, type NativeDenseOptimizer, type NativeTensorInfo } from './binding.js';

/** A dense architecture. Widths are the outputs of each layer; the input widths follow from them. */
export interface DenseModelSpec {
  /** Dense features per sample (Criteo: 13). */
  denseIn: number;
  /** Bottom MLP output widths (each Linear + ReLU); the last is the embedding dim for 'dot'. */
  bottom: number[];
  /** Top MLP output widths (Linear + ReLU, the last Linear only); must end in 1. */
  top: number[];
  /** Pooled embedding features the model consumes. */
  numSparse: number;
  /** Width of each pooled embedding. */
  embDim: number;
  interaction: InteractionType;
  /** DCNv2 cross layers (interaction 'cross'). */
  crossLayers?: number;
  /** DCNv2 low rank (interaction 'cross'). */
  crossRank?: number;
}

export type PresetName = 'dlrm-criteo-kaggle' | 'dlrm-dcnv2' | 'dlrm-benchmark';

/** Presets with their reference optimizers (facebookresearch/dlrm scripts and MLPerf's DCNv2 reference). */
export const PRESETS: Readonly<Record<PresetName, { spec: DenseModelSpec; optimizer: NativeDenseOptimizer; embeddingLr: number }>> = Object.freeze({
  // dlrm_s_criteo_kaggle.sh: dim 16, bottom 13-512-256-64-16, top 512-256-1, SGD lr 0.1.
  'dlrm-criteo-kaggle': {
    spec: { denseIn: 13, bottom: [512, 256, 64, 16], top: [512, 256, 1], numSparse: 26, embDim: 16, interaction: 'dot' },
    optimizer: { type: 'sgd', lr: 0.1 },
    embeddingLr: 0.1,
  },
  // MLPerf DLRM-DCNv2: dim 128, bottom 13-512-256-128, 3 cross layers of rank 512, top 1024-1024-512-256-1, Adagrad lr 0.005.
  'dlrm-dcnv2': {
    spec: { denseIn: 13, bottom: [512, 256, 128], top: [1024, 1024, 512, 256, 1], numSparse: 26, embDim: 128, interaction: 'cross', crossLayers: 3, crossRank: 512 },
    optimizer: { type: 'adagrad', lr: 0.005, eps: 1e-8 },
    embeddingLr: 0.005,
  },
  // dlrm_s_benchmark.sh: 8 tables, dim 64, bottom 512-512-64 (512 dense inputs), top 1024-1024-1024-1.
  'dlrm-benchmark': {
    spec: { denseIn: 512, bottom: [512, 64], top: [1024, 1024, 1024, 1], numSparse: 8, embDim: 64, interaction: 'dot' },
    optimizer: { type: 'sgd', lr: 0.01 },
    embeddingLr: 0.01,
  },
});

export function isPresetName(s: unknown): s is PresetName {
  return typeof s === 'string' && Object.prototype.hasOwnProperty.call(PRESETS, s);
}

/** Parses a DLRM-style layer list '13-512-256-64-16' into numbers, naming `field` on failure. */
export function parseLayers(s: string, field = 'layers'): number[] {
  const parts = s.split('-');
  const out = parts.map((p) => Number(p));
  if (parts.length === 0 || out.some((n, i) => !/^\d+$/.test(parts[i]!) || !Number.isSafeInteger(n) || n <= 0))
    throw new EmbshardError('INVALID_CONFIG', `${field} '${s}' is not a list of positive widths like 512-256-1`);
  return out;
}

/** Resolves a preset name (optionally overridden) or a custom spec, validating every field. */
export function resolveDenseSpec(model: PresetName | DenseModelSpec, overrides: Partial<DenseModelSpec> = {}): DenseModelSpec {
  let base: DenseModelSpec;
  if (typeof model === 'string') {
    if (!isPresetName(model))
      throw new EmbshardError('INVALID_CONFIG', `model '${model}' is not a preset (${Object.keys(PRESETS).join(', ')}) or a layer spec`);
    base = structuredClone(PRESETS[model].spec);
  } else if (model !== null && typeof model === 'object') base = structuredClone(model);
  else throw new EmbshardError('INVALID_CONFIG', 'model must be a preset name or a { denseIn, bottom, top, ... } spec');
  const s: DenseModelSpec = { ...base, ...overrides };
  const int = (v: unknown, field: string, min: number): number => {
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min)
      throw new EmbshardError('INVALID_CONFIG', `model.${field} must be an integer >= ${min} (got ${String(v)})`);
    return v;
  };
  int(s.denseIn, 'denseIn', 1);
  int(s.numSparse, 'numSparse', 0);
  int(s.embDim, 'embDim', 1);
  for (const k of ['bottom', 'top'] as const) {
    if (!Array.isArray(s[k]) || s[k].length === 0) throw new EmbshardError('INVALID_CONFIG', `model.${k} must be a non-empty array of widths`);
    s[k].forEach((w, i) => int(w, `${k}[${i}]`, 1));
  }
  if (s.top[s.top.length - 1] !== 1) throw new EmbshardError('INVALID_CONFIG', `model.top must end in 1 (the logit), got ${s.top.join('-')}`);
  if (s.interaction !== 'dot' && s.interaction !== 'cross' && s.interaction !== 'concat')
    throw new EmbshardError('INVALID_CONFIG', `model.interaction must be 'dot' | 'cross' | 'concat' (got ${String(s.interaction)})`);
  if (s.interaction === 'dot' && s.numSparse > 0 && s.embDim !== s.bottom[s.bottom.length - 1])
    throw new EmbshardError('INVALID_CONFIG', `model.embDim (${s.embDim}) must equal the last bottom width (${s.bottom[s.bottom.length - 1]}) for the dot interaction`);
  if (s.interaction === 'cross') {
    int(s.crossLayers, 'crossLayers', 1);
    int(s.crossRank, 'crossRank', 1);
  }
  return s;
}

export interface DenseOptimizerConfig {
  type: DenseOptimizerType;
  lr: number;
  eps?: number;
  beta1?: number;
  beta2?: number;
  weightDecay?: number;
}

export interface DenseModelOptions {
  optimizer?: DenseOptimizerConfig;
  /** Seed of the deterministic initialisation. Default 0. */
  seed?: number;
  /** Only 'cpu' runs the dense model today (see docs/training.md). Default 'cpu'. */
  device?: string;
  /** @internal false: zeroed parameters (a checkpoint fills them). */
  initialize?: boolean;
}

export class DenseModel {
  readonly spec: DenseModelSpec;
  readonly optimizer: Required<DenseOptimizerConfig>;
  readonly seed: number;
  readonly native: NativeDenseModel;

  constructor(model: PresetName | DenseModelSpec, options: DenseModelOptions = {}) {
    this.spec = resolveDenseSpec(model);
    const device = options.device ?? 'cpu';
    if (device !== 'cpu')
      throw new EmbshardError('BACKEND_UNAVAILABLE', `the dense model runs on 'cpu' only in this build (got device '${device}')`);
    const preset = typeof model === 'string' ? PRESETS[model] : undefined;
    const o = options.optimizer ?? preset?.optimizer ?? { type: 'adagrad', lr: 0.01 };
    this.optimizer = { type: o.type, lr: o.lr, eps: o.eps ?? 1e-8, beta1: o.beta1 ?? 0.9, beta2: o.beta2 ?? 0.999, weightDecay: o.weightDecay ?? 0 };
    this.seed = options.seed ?? 0;
    const addon = denseAddon(device);
    this.native = new addon.DenseModel({
      ...this.spec,
      seed: this.seed,
      optimizer: this.optimizer,
      initialize: options.initialize ?? true,
    });
  }

  get params(): Float32Array {
    return this.native.params;
  }
  get grads(): Float32Array {
    return this.native.grads;
  }
  get state(): Float32Array {
    return this.native.state;
  }
  get tensors(): readonly NativeTensorInfo[] {
    return this.native.tensors;
  }
  get step(): number {
    return this.native.step;
  }
  set step(t: number) {
    this.native.step = t;
  }
  /** Width of the pooled-embedding input: numSparse × embDim. */
  get sparseWidth(): number {
    return this.native.sparseWidth;
  }

  /** A view (no copy) of one parameter tensor, e.g. 'top.0.weight' ([out × in], row-major). */
  tensor(name: string, of: 'params' | 'grads' = 'params'): Float32Array {
    const t = this.native.tensors.find((x) => x.name === name);
    if (!t) throw new EmbshardError('INVALID_ARGUMENT', `the dense model has no tensor '${name}'`);
    return (of === 'params' ? this.params : this.grads).subarray(t.offset, t.offset + t.size);
  }

  /** Logits [B] of a batch: dense [B × denseIn], pooled [B × sparseWidth]. */
  forward(dense: Float32Array, pooled: Float32Array | null, batchSize: number): Promise<Float32Array> {
    return this.native.forward(dense, pooled, batchSize);
  }

  /** Mean BCE loss; grads ← gradScale·∂loss/∂params; sparseGrad ← gradScale·∂loss/∂pooled. */
  forwardBackward(
    dense: Float32Array,
    pooled: Float32Array | null,
    labels: Float32Array,
    batchSize: number,
    options: { sparseGrad?: Float32Array | null; logits?: Float32Array | null; gradScale?: number } = {},
  ): Promise<{ loss: number; forwardMs: number; backwardMs: number }> {
    return this.native.forwardBackward(dense, pooled, labels, batchSize, options);
  }

  /** One optimizer update with the current gradients (lr defaults to the configured one). */
  update(lr?: number): Promise<void> {
    return this.native.update(lr);
  }
}
