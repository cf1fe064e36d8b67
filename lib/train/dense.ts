// dense.ts — the dense half of a DLRM/DCNv2 model: presets, custom layer lists, and DenseModel, a thin
// typed wrapper over the addon's DenseModel (bottom MLP → interaction → top MLP → logit, BCE loss, and a
// dense optimizer), whose forward/backward/update run off the event loop — on the CPU addon, or with
// device 'cuda:N' wholly on a GPU through the CUDA addon (native/dense/cuda/model_cuda.cu).
import { EmbshardError } from '../errors.js';
import { fieldsOf, rejectUnknownFields } from '../fields.js';
import { optimizerValues } from '../optimizer-values.js';
import { resolveBackend } from '../backends.js';
import { denseAddon, type Precision, type DenseCudaAddon, type InteractionType, type NativeCudaDenseModel, type NativeDenseModel, type NativeDenseOptimizer, type NativeTensorInfo } from './binding.js';
import type { DeviceBuffer } from '../sharded/binding.js';
import { DeviceArray } from '../device-array.js';

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
  } else if (model !== null && typeof model === 'object') {
    rejectUnknownFields(model, SPEC_FIELDS, 'model');
    base = structuredClone(model);
  }
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

/** The dense optimizer: its type and hyper-parameters (defaults filled in by the model). */
export type DenseOptimizerConfig = NativeDenseOptimizer;

const SPEC_FIELDS = fieldsOf<DenseModelSpec>({
  denseIn: true, bottom: true, top: true, numSparse: true, embDim: true, interaction: true, crossLayers: true, crossRank: true,
});

export interface DenseModelOptions {
  optimizer?: DenseOptimizerConfig;
  /** Seed of the deterministic initialisation. Default 0. */
  seed?: number;
  /**
   * 'cpu' (default) or 'cuda:N': the whole dense model (forward, backward, optimizer) on GPU N through
   * the CUDA addon, parameters kept on the device. BACKEND_UNAVAILABLE with the reason where there is none.
   */
  device?: string;
  /**
   * GEMM precision: 'fp32' (default), or 'bf16' — mixed precision as autocast runs it: every GEMM (linear
   * layers forward and backward, the dot interaction, the cross layers) takes bf16 inputs and accumulates in
   * fp32; parameters, gradients and optimizer state stay fp32. CPU only (oneDNN's AVX-512 BF16 / AMX kernels).
   */
  precision?: Precision;
  /** @internal false: zeroed parameters (a checkpoint fills them). */
  initialize?: boolean;
}

const OPTIONS_FIELDS = fieldsOf<DenseModelOptions>({ optimizer: true, seed: true, device: true, precision: true, initialize: true });
const OPTIMIZER_FIELDS = fieldsOf<DenseOptimizerConfig>({ type: true, lr: true, eps: true, beta1: true, beta2: true, weightDecay: true });

export type DenseBuffer = 'params' | 'grads' | 'state';

/** The CUDA addon's GPU dense model class for 'cuda:N', or BACKEND_UNAVAILABLE saying why not. */
function cudaDenseClass(device: string): NonNullable<DenseCudaAddon['CudaDenseModel']> {
  const addon = resolveBackend(device) as DenseCudaAddon; // BACKEND_UNAVAILABLE with the probe's reason
  if (typeof addon.CudaDenseModel !== 'function')
    throw new EmbshardError('BACKEND_UNAVAILABLE', `device '${device}': the CUDA addon was built without cuBLAS, so it has no GPU dense model (set CUBLAS_ROOT and rebuild)`);
  return addon.CudaDenseModel;
}

let slowPathWarned = false;

/** Says once on stderr when the CPU dense layers run without oneDNN (how much slower, and what to install). */
function warnSlowPath(precision: Precision): void {
  const info = denseAddon('cpu').denseOps.gemmInfo();
  if (slowPathWarned || info.backend === 'onednn') return;
  slowPathWarned = true;
  const bf16 = precision === 'bf16' ? '; precision bf16 rounds the GEMM inputs but runs fp32 GEMMs, so it gains no speed' : '';
  process.stderr.write(`embshard: the dense layers run on ${info.backend}: ${info.reason}${bf16}\n`);
}

export function isPrecision(p: unknown): p is Precision {
  return p === 'fp32' || p === 'bf16';
}

/** `p` as a precision; INVALID_CONFIG naming `field` when it is not one. */
export function checkPrecision(p: unknown, field = 'precision'): Precision {
  if (!isPrecision(p)) throw new EmbshardError('INVALID_CONFIG', `${field} must be 'fp32' | 'bf16' (got ${String(p)})`);
  return p;
}

export class DenseModel {
  readonly spec: DenseModelSpec;
  readonly optimizer: Required<DenseOptimizerConfig>;
  readonly seed: number;
  /** 'cpu' or 'cuda:N'. */
  readonly device: string;
  /** GEMM precision ('fp32' | 'bf16'). */
  readonly precision: Precision;
  /** The native model: the CPU one (JS-owned buffers) or the GPU one (device buffers). */
  readonly native: NativeDenseModel | NativeCudaDenseModel;
  private readonly gpu: NativeCudaDenseModel | undefined;
  /** GPU only: host copies, refreshed by each read of params/grads/state. */
  private readonly mirror: Partial<Record<DenseBuffer, Float32Array>> = {};
  /** The dense input of a forwardBottom whose output is kept (dropped by any other call or a parameter write). */
  private bottomFor: Float32Array | undefined;
  /** Forward / backward / update calls not settled yet: the buffers are not to be written meanwhile. */
  private inFlight = 0;

  constructor(model: PresetName | DenseModelSpec, options: DenseModelOptions = {}) {
    rejectUnknownFields(options, OPTIONS_FIELDS, 'options');
    if (options.optimizer !== undefined) rejectUnknownFields(options.optimizer, OPTIMIZER_FIELDS, 'optimizer');
    this.spec = resolveDenseSpec(model);
    const device = options.device ?? 'cpu';
    if (device !== 'cpu' && !/^cuda:\d+$/.test(device))
      throw new EmbshardError('BACKEND_UNAVAILABLE', `unknown device '${String(device)}' for the dense model (expected 'cpu' or 'cuda:N')`);
    const preset = typeof model === 'string' ? PRESETS[model] : undefined;
    const o = options.optimizer ?? preset?.optimizer ?? { type: 'adagrad', lr: 0.01 };
    this.optimizer = { type: o.type, ...optimizerValues(o, 'optimizer') };
    this.seed = options.seed ?? 0;
    this.device = device;
    const precision = checkPrecision(options.precision ?? 'fp32');
    if (precision !== 'fp32' && device !== 'cpu')
      throw new EmbshardError('BACKEND_UNAVAILABLE', `precision '${precision}' runs on the CPU only; the GPU dense model computes in fp32`);
    this.precision = precision;
    const config = { ...this.spec, seed: this.seed, optimizer: this.optimizer, precision, initialize: options.initialize ?? true };
    if (device === 'cpu') {
      warnSlowPath(precision);
      this.native = new (denseAddon('cpu').DenseModel)(config);
      this.gpu = undefined;
    } else {
      const Cls = cudaDenseClass(device);
      this.gpu = new Cls({ ...config, device: Number(device.slice(5)) });
      this.native = this.gpu;
    }
  }

  /**
   * All parameters, flat, in `tensors` order. On the CPU the live buffer (written in place by update());
   * on a GPU a host copy read from the device now — change the model with setParams().
   */
  get params(): Float32Array {
    return this.read('params');
  }
  /** Gradients of the last forwardBackward (CPU: live; GPU: a copy read now). */
  get grads(): Float32Array {
    return this.read('grads');
  }
  /** Optimizer state: adagrad [n], adam [n] m then [n] v, sgd [] (CPU: live; GPU: a copy read now). */
  get state(): Float32Array {
    return this.read('state');
  }
  /** Overwrites all parameters (same length as params); INVALID_ARGUMENT while a call is in flight, as for the other writes. */
  setParams(src: Float32Array): void {
    this.write('params', src);
  }
  /** Overwrites the gradients (e.g. after an all-reduce of a GPU model's grads copy). */
  setGrads(src: Float32Array): void {
    this.write('grads', src);
  }
  /** Overwrites the optimizer state. */
  setState(src: Float32Array): void {
    this.write('state', src);
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
  /**
   * GPU only: the gradients in device memory, for ProcessGroup.allReduceDevice (an NCCL all-reduce with no
   * host copy); undefined on the CPU.
   */
  deviceGrads(): DeviceBuffer | undefined {
    return this.gpu?.deviceGrads();
  }

  /** Width of the pooled-embedding input: numSparse × embDim. */
  get sparseWidth(): number {
    return this.native.sparseWidth;
  }

  /** A view (no copy) of one parameter tensor, e.g. 'top.0.weight' ([out × in], row-major); on a GPU, of a copy. */
  tensor(name: string, of: 'params' | 'grads' = 'params'): Float32Array {
    const t = this.native.tensors.find((x) => x.name === name);
    if (!t) throw new EmbshardError('INVALID_ARGUMENT', `the dense model has no tensor '${name}'`);
    return (of === 'params' ? this.params : this.grads).subarray(t.offset, t.offset + t.size);
  }

  /**
   * Logits [B] of a batch: dense [B × denseIn] and pooled [B × sparseWidth], both finite (a NaN / ±Inf value
   * is INVALID_ARGUMENT naming it: a top ReLU would turn it into a finite, wrong logit). On a GPU `pooled`
   * may be a DeviceArray (f32) on the model's device, e.g. an embedding collection's device output: no
   * host copy, and read where it lies, unchecked.
   */
  forward(dense: Float32Array, pooled: Float32Array | DeviceArray | null, batchSize: number): Promise<Float32Array> {
    this.bottomFor = undefined;
    return this.track(this.native.forward(dense, this.sparseArg(pooled, 'pooled'), batchSize));
  }

  /**
   * The bottom MLP alone over dense [B × denseIn]: it needs no embeddings, so it can run while they are
   * looked up and exchanged. Its output is kept for the next forwardBackward(…, { bottomReady: true }) on
   * the same `dense` array (any other call, update or parameter write in between drops it).
   */
  forwardBottom(dense: Float32Array, batchSize: number): Promise<{ forwardMs: number }> {
    this.bottomFor = undefined;
    return this.track(this.native.forwardBottom(dense, batchSize)).then((r) => {
      this.bottomFor = dense;
      return r;
    });
  }

  /**
   * Mean BCE loss; grads ← gradScale·∂loss/∂params; sparseGrad ← gradScale·∂loss/∂pooled. `bottomReady`:
   * use forwardBottom's output (the same numbers; INVALID_ARGUMENT unless it ran on this `dense` and size).
   * On a GPU `pooled` and `sparseGrad` may be DeviceArrays (f32, B × sparseWidth) on the model's device:
   * the pooled embeddings are read and their gradients written there, with no host copy. `logits` and
   * `sparseGrad` must not share memory with the inputs or each other (INVALID_ARGUMENT).
   */
  forwardBackward(
    dense: Float32Array,
    pooled: Float32Array | DeviceArray | null,
    labels: Float32Array,
    batchSize: number,
    options: { sparseGrad?: Float32Array | DeviceArray | null; logits?: Float32Array | null; gradScale?: number; bottomReady?: boolean } = {},
  ): Promise<{ loss: number; forwardMs: number; backwardMs: number }> {
    const kept = this.bottomFor;
    this.bottomFor = undefined;
    if (options.bottomReady && kept !== dense)
      return Promise.reject(new EmbshardError('INVALID_ARGUMENT', 'bottomReady: forwardBottom has not run on this dense array since the last call'));
    const sparse = this.sparseArg(pooled, 'pooled');
    const sparseGrad = this.sparseArg(options.sparseGrad ?? null, 'sparseGrad');
    return this.track(this.native.forwardBackward(dense, sparse, labels, batchSize, { ...options, sparseGrad }));
  }

  /** One optimizer update with the current gradients (lr defaults to the configured one). */
  update(lr?: number): Promise<void> {
    this.bottomFor = undefined;
    return this.track(this.native.update(lr));
  }

  /**
   * Frees the model's native memory (on a GPU its device memory: parameters, gradients, optimizer state
   * and activations) now, or when the call in flight settles; any later call raises DISPOSED. Memory is
   * otherwise freed only when the garbage collector finalizes the model, which a process reloading GPU
   * models cannot wait for.
   */
  dispose(): void {
    this.bottomFor = undefined;
    this.native.dispose();
  }

  /** A started native call's promise, marking the model busy until it settles. */
  private track<T>(call: Promise<T>): Promise<T> {
    this.inFlight++;
    return call.finally(() => {
      this.inFlight--;
    });
  }

  /** A DeviceArray as the native object the GPU model reads; INVALID_ARGUMENT on the CPU model. */
  private sparseArg<T>(v: T | DeviceArray, field: string): T | NonNullable<DeviceArray['native']> {
    if (!(v instanceof DeviceArray)) return v;
    if (!this.gpu) throw new EmbshardError('INVALID_ARGUMENT', `${field}: a DeviceArray needs the dense model on a GPU (device 'cuda:N'); this one is on the CPU`);
    return v.native;
  }

  private read(which: DenseBuffer): Float32Array {
    if (!this.gpu) return (this.native as NativeDenseModel)[which];
    const n = which === 'state' ? this.gpu.stateCount : this.gpu.paramCount;
    const m = this.mirror[which] ?? (this.mirror[which] = new Float32Array(n));
    this.gpu.read(which, m);
    return m;
  }

  private write(which: DenseBuffer, src: Float32Array): void {
    if (!(src instanceof Float32Array)) throw new EmbshardError('INVALID_ARGUMENT', `${which} must be a Float32Array`);
    // the call in flight reads (and update writes) these buffers on another thread: a write now would tear them
    if (this.inFlight > 0)
      throw new EmbshardError('INVALID_ARGUMENT', `${which} cannot be set while a forward / backward / update call is in flight (await it first)`);
    if (which === 'params') this.bottomFor = undefined;
    if (this.gpu) {
      this.gpu.write(which, src); // LENGTH_MISMATCH naming the buffer before any copy
      return;
    }
    const live = (this.native as NativeDenseModel)[which];
    if (src.length !== live.length)
      throw new EmbshardError('LENGTH_MISMATCH', `${which} has ${src.length} elements; the model has ${live.length}`);
    if (src !== live) live.set(src);
  }
}
