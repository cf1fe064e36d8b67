// binding.ts — hand-written types of what the process-group and shard-helper parts of the addon export
// (native/addon/group_*.cc, native/addon/shard_*.cc). lib/sharded code casts loadAddon() to these.
import type { Addon } from '../binding.js';

/** Any typed array a collective moves byte for byte. */
export type CommArray =
  | Float32Array
  | Float64Array
  | Int8Array
  | Uint8Array
  | Int16Array
  | Uint16Array
  | Int32Array
  | Uint32Array
  | BigInt64Array
  | BigUint64Array;

/**
 * A buffer in a GPU's memory, handed between parts of the CUDA addon without a host copy (a GPU dense
 * model's gradients: DenseModel.deviceGrads()). `owner` keeps the memory alive.
 */
export interface DeviceBuffer {
  readonly handle: unknown;
  /** CUDA device ordinal */
  readonly device: number;
  /** fp32 elements */
  readonly count: number;
  readonly owner: object;
}

export interface NativeExchangeResult {
  data: ArrayBuffer;
  /** bytes received from each rank */
  counts: Float64Array;
}

export interface NativeGroup {
  readonly rank: number;
  readonly size: number;
  readonly ranksPerNode: number;
  readonly kind: 'inprocess' | 'mpi' | 'nccl';
  ready(): Promise<void>;
  /** recvBytes: what every rank sends here, when known (skips the count exchange) */
  allToAllV(send: CommArray, sendBytes: Float64Array, timeoutMs: number, recvBytes?: Float64Array): Promise<NativeExchangeResult>;
  allGather(send: CommArray, timeoutMs: number, recvBytes?: Float64Array): Promise<NativeExchangeResult>;
  allReduce(data: CommArray, elemType: 'f32' | 'f64' | 'i32' | 'i64', op: 'sum' | 'max' | 'min', timeoutMs: number, deterministic: boolean): Promise<void>;
  /** The default all-reduce in place on device memory (NCCL; other groups: BACKEND_UNAVAILABLE). */
  allReduceDevice(buffer: DeviceBuffer | object, op: 'sum' | 'max' | 'min', timeoutMs: number): Promise<void>;
  /**
   * Device buffers (a DeviceArray's native object or a DeviceBuffer) on the NCCL group's device: the first
   * Σ sendBytes of `send` out, what every rank sends into `recv` from its start; resolves to the bytes
   * received from each rank. Other groups: BACKEND_UNAVAILABLE.
   */
  allToAllDevice(send: object, sendBytes: Float64Array, recv: object, timeoutMs: number, recvBytes?: Float64Array): Promise<Float64Array>;
  /** The first `bytes` of every rank's `send`, in rank order into `recv`; resolves to the bytes from each rank. */
  allGatherDevice(send: object, bytes: number, recv: object, timeoutMs: number, recvBytes?: Float64Array): Promise<Float64Array>;
  broadcast(data: CommArray, root: number, timeoutMs: number): Promise<void>;
  barrier(timeoutMs: number): Promise<void>;
  /** MPI only: a plain blocking MPI_Alltoallv of the same layout; resolves to the seconds it took. */
  rawAllToAllV(send: CommArray, sendBytes: Float64Array, recv: CommArray, recvBytes: Float64Array): Promise<number>;
  /** MPI only: a plain blocking MPI_Allreduce (sum, in place); resolves to the seconds it took. */
  rawAllReduce(data: Float32Array): Promise<number>;
  close(reason?: string): void;
}

export interface GroupAddon extends Addon {
  /** Gives received buffers back for reuse (detaching them); others are ignored. */
  releaseBuffers(...buffers: (ArrayBuffer | CommArray)[]): void;
  createInProcessGroups(size: number, ranksPerNode: number): NativeGroup[];
  readonly mpiAvailable: boolean;
  createMpiGroup(timeoutMs: number): NativeGroup;
  /** CUDA addon built with NCCL only. */
  readonly ncclAvailable?: boolean;
  ncclUniqueId?(): Uint8Array;
  createNcclGroup?(uniqueId: Uint8Array, rank: number, size: number, ranksPerNode: number, device: number, timeoutMs: number): NativeGroup;
}
