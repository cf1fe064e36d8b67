// binding.ts — types of the dense half of the addon (native/addon/dense_model.cc, dense_ops.cc), and
// the typed loader for it. lib/train code never touches the addon untyped.
import type { Addon } from '../binding.js';
import { resolveBackend } from '../backends.js';
import type { DenseModelSpec } from './dense.js';
import type { DeviceBuffer } from '../sharded/binding.js';
import type { NativeDeviceArray } from '../device-array.js';

export type DenseOptimizerType = 'sgd' | 'adagrad' | 'adam';
export type InteractionType = 'dot' | 'cross' | 'concat';

export interface NativeDenseOptimizer {
  type: DenseOptimizerType;
  lr: number;
  eps?: number;
  beta1?: number;
  beta2?: number;
  weightDecay?: number;
}

export interface NativeDenseConfig extends DenseModelSpec {
  seed: number;
  optimizer: NativeDenseOptimizer;
  /** GEMM precision; default 'fp32'. */
  precision?: Precision;
  /** false: leave parameters zeroed (a checkpoint load fills them). Default true. */
  initialize?: boolean;
}

export interface NativeTensorInfo {
  name: string;
  offset: number;
  size: number;
  shape: number[];
}

export interface NativeForwardBackwardResult {
  loss: number;
  forwardMs: number;
  backwardMs: number;
}

/** What the CPU and the CUDA dense model share: the layout and the calls, off the event loop. */
export interface NativeDenseModelCalls {
  readonly tensors: NativeTensorInfo[];
  readonly sparseWidth: number;
  readonly interactionWidth: number;
  /** Updates applied so far (Adam's t). */
  step: number;
  /** The bottom MLP alone, kept for the next forwardBackward with `bottomReady` on the same dense array. */
  forwardBottom(dense: Float32Array, batchSize: number): Promise<{ forwardMs: number }>;
  /** `sparse` (and `sparseGrad`): host arrays, or (GPU model) native DeviceArrays on the model's device. */
  forward(dense: Float32Array, sparse: Float32Array | NativeDeviceArray | null, batchSize: number): Promise<Float32Array>;
  forwardBackward(
    dense: Float32Array,
    sparse: Float32Array | NativeDeviceArray | null,
    labels: Float32Array,
    batchSize: number,
    options?: { sparseGrad?: Float32Array | NativeDeviceArray | null; logits?: Float32Array | null; gradScale?: number; bottomReady?: boolean },
  ): Promise<NativeForwardBackwardResult>;
  update(lr?: number): Promise<void>;
  /** Frees the model's memory (GPU: device memory) now, or when the call in flight settles; later calls are DISPOSED. */
  dispose(): void;
}

export interface NativeDenseModel extends NativeDenseModelCalls {
  /** All parameters, flat, in `tensors` order (JS-owned; written in place by update()). */
  readonly params: Float32Array;
  /** Gradients of the last forwardBackward (overwritten by each call). */
  readonly grads: Float32Array;
  /** Optimizer state: adagrad [n], adam [n] m then [n] v, sgd []. */
  readonly state: Float32Array;
}

/** The whole dense model on one GPU (CUDA addon, native/addon/dense_cuda_model.cc): the same config,
 * tensors and calls as NativeDenseModel, but params/grads/state live on the device and move only
 * through read()/write() (synchronous whole-buffer copies). */
export interface NativeCudaDenseModel extends NativeDenseModelCalls {
  readonly paramCount: number;
  readonly stateCount: number;
  /** The CUDA device index. */
  readonly device: number;
  read(which: 'params' | 'grads' | 'state', dst: Float32Array): void;
  /** The gradients in device memory, for an in-place device all-reduce (no host copy). */
  deviceGrads(): DeviceBuffer;
  write(which: 'params' | 'grads' | 'state', src: Float32Array): void;
}

export interface CrossLayerArrays {
  V: Float32Array;
  U: Float32Array;
  b: Float32Array;
}

/** The dense layers' compute precision: fp32, or bf16 GEMM inputs with fp32 accumulation (weights stay fp32). */
export type Precision = 'fp32' | 'bf16';
export type GemmBackendName = 'onednn' | 'openblas' | 'naive';

export interface GemmOptions {
  /** Run on this backend instead of the default one. */
  backend?: GemmBackendName;
  precision?: Precision;
  /** [N], added to every row (needs alpha 1). */
  bias?: Float32Array | null;
  relu?: boolean;
  /** Independent products; A, B, C hold this many matrices each. Default 1. */
  batch?: number;
}

export interface GemmInfo {
  /** the backend the dense layers run on */
  backend: GemmBackendName;
  /** why that one (and, for oneDNN, its version and the instruction set it picked) */
  reason: string;
  built: Record<GemmBackendName, boolean>;
}

/** Synchronous single-layer kernels, for checks against references and small utilities. */
export interface DenseOps {
  /** C_i = act(alpha·op(A_i)·op(B_i) + bias + beta·C_i) for each of `batch` matrices stored back to back. */
  gemm(transA: boolean, transB: boolean, M: number, N: number, K: number, alpha: number, A: Float32Array, B: Float32Array, beta: number, C: Float32Array, options?: GemmOptions): void;
  gemmInfo(): GemmInfo;
  /** Every dense layer on one backend (null: the default again); INVALID_ARGUMENT when it is not built in. */
  forceGemmBackend(backend: GemmBackendName | null): void;
  linearForward(x: Float32Array, B: number, inDim: number, outDim: number, W: Float32Array, b: Float32Array | null, relu?: boolean, precision?: Precision): Float32Array;
  linearBackward(x: Float32Array, dy: Float32Array, B: number, inDim: number, outDim: number, W: Float32Array, precision?: Precision): { dW: Float32Array; db: Float32Array; dx: Float32Array };
  reluForward(x: Float32Array): Float32Array;
  reluBackward(y: Float32Array, dy: Float32Array): Float32Array;
  dotInteractionForward(x: Float32Array, e: Float32Array, B: number, d: number, F: number, precision?: Precision): Float32Array;
  dotInteractionBackward(x: Float32Array, e: Float32Array, dout: Float32Array, B: number, d: number, F: number, precision?: Precision): { dx: Float32Array; de: Float32Array };
  crossForward(x0: Float32Array, B: number, D: number, r: number, layers: CrossLayerArrays[], precision?: Precision): Float32Array;
  crossBackward(x0: Float32Array, dout: Float32Array, B: number, D: number, r: number, layers: CrossLayerArrays[], precision?: Precision): { dx0: Float32Array; layers: CrossLayerArrays[] };
  bce(z: Float32Array, y: Float32Array): { loss: number; dz: Float32Array };
  optimizerStep(config: NativeDenseOptimizer, t: number, params: Float32Array, grads: Float32Array, state: Float32Array): void;
  /** The index of the first value of `a` outside [lo, hi] (NaN is outside every range; lo, hi finite), or -1. */
  firstOutside(a: Float32Array, lo: number, hi: number): number;
}

export interface DenseAddon extends Addon {
  DenseModel: new (config: NativeDenseConfig) => NativeDenseModel;
  denseOps: DenseOps;
}

export interface DenseCudaAddon extends Addon {
  /** Present when the CUDA addon was built with cuBLAS (the GPU dense layers). */
  CudaDenseModel?: new (config: NativeDenseConfig & { device: number }) => NativeCudaDenseModel;
}

/** The addon serving `device` ('cpu' or 'cuda:N'), typed with the dense parts. */
export function denseAddon(device = 'cpu'): DenseAddon {
  return resolveBackend(device) as DenseAddon;
}
