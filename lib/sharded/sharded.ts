// sharded.ts — ShardedEmbeddingCollection: executes a ShardPlan across the ranks of a ProcessGroup so
// that the ranks together compute what one EmbeddingCollection over the global batch (every rank's local
// batch, concatenated in rank order) computes. Each rank's tables live in one local engine (dp tables
// whole, hot tiers, its 3D shards); a step moves exactly the bytes docs/wire-protocol.md defines:
//   forward:  ids (+ lengths, weights) to the owners -> lookups -> partial sums (rb) / unique rows (ub,
//             node tier) back, pooled at the requester; dp and replicated rows are looked up locally;
//   backward: gradients to the owners (rb: pooled, ub: per unique row), all-gathers of dp / replicated
//             row gradients, node-tier sync between nodes; then ONE fused optimizer update per row per
//             rank, with every rank's contributions summed in rank order first.
// Under the plan's hierarchical protocol, rb / ub traffic between nodes goes through rail-aligned relays
// that reduce rb partial sums and deduplicate ub ids per node (relay slots of schedule.ts, relay.ts).
// Wire values travel as fp32, fp16 or bf16 (comm.forward / comm.backward). The stages live beside it:
// routing.ts (ids by range, dedup), input-exchange.ts (ids to the owners), owner.ts (the engine batch),
// schedule.ts (the slots of the output and gradient messages), host-exchange.ts (the output and gradient
// exchanges in host memory), update-batch.ts (the optimizer step's batch), replica-sync.ts (dp / tier syncs),
// row-access.ts (rows by global id), reshard.ts (checkpoints), row-remap.ts (a plan's hot-id remap: ids
// become rows before routing and in row access), dynamic-shards.ts (dynamic tables: sharded by id hash,
// each row shard with its own id map; the owner batch's raw ids become slots before the engine call),
// device-exchange.ts and device-backward.ts (a CUDA engine over an NCCL group on its GPU: outputs,
// messages and gradients stay in device memory).
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { checkDir } from '../checkpoint.js';
import { EmbshardError } from '../errors.js';
import { JaggedBatch } from '../batch.js';
import { resolveBackend } from '../backends.js';
import { EngineOwner } from '../engine-owner.js';
import { fieldsOf, rejectUnknownFields } from '../fields.js';
import { resolveConfig, toNativeConfig, type CollectionConfig, type InitConfig, type OptimizerConfig, type ResolvedConfig } from '../config.js';
import type { NativeBatch, NativeEngine, NativeForwardResult } from '../binding.js';
import { checkBackwardOptions, checkForwardOptions, type BackwardOptions, type BackwardResult, type FeatureInfo, type ForwardOptions, type Gradients, type SequenceOutput } from '../collection.js';
import { DeviceArray } from '../device-array.js';
import { DeviceOutputs, deviceGradients, type DeviceForwardOutput, type DeviceGradients } from '../device-outputs.js';
import type { DynamicStep } from '../storage/dynamic.js';
import { DynamicShards, type DynamicShardStats, type HeldShard } from './dynamic-shards.js';
import { dynamicFieldsOf, resolveSpill } from '../storage/dynamic-config.js';
import { ShardPlan } from '../plan/shard-plan.js';
import type { Ids } from '../collection.js';
import type { DType, RankCounters } from '../plan/types.js';
import { ProcessGroup, zeroTraffic, type TrafficCounters } from './group.js';
import { exchangeOps, type Wire } from './exchange-ops.js';
import { loadAddon } from '../native.js';
import type { GroupAddon } from './binding.js';
import { LocalLayout, type LocalTable } from './local-layout.js';
import { shardStorage } from '../storage/shards.js';
import type { StorageBudget } from '../storage/budget.js';
import { part, route, uniqOver, type Routed, type SegView, type UniqT } from './routing.js';
import { exchangeInput, type InputResult, type Received } from './input-exchange.js';
import { agreeOnGradients, agreeOnTranslation, NON_FINITE_STATUS, nonFiniteOutcome, rejectionStatus, type RoutedOrRejected } from './step-status.js';
import { unionOf, type RelayUnion } from './relay.js';
import { ownerBatch } from './owner.js';
import { ownerSchedule, relayRecvSchedule, relaySendSchedule, requesterSchedule, type Schedule } from './schedule.js';
import { cellWidth, checkCells, readCells, writeCells, type CellKind } from './row-access.js';
import { loadSharded, savedPlan, saveSharded } from './reshard.js';
import { RowRemaps } from './row-remap.js';
import { ScratchPool } from './scratch.js';
import { DeviceScratch, deviceExchangeBlocker, forwardOnDevice, ownerSequenceGradients, type DeviceOpsAddon, type DeviceOutputArrays } from './device-exchange.js';
import { backwardOnDevice, type DeviceGradArrays } from './device-backward.js';
import { gradientsOnHost, outputsOnHost } from './host-exchange.js';
import type { HostOutputs, MeanColumns, StepArgs } from './step-args.js';
import { updateBatch } from './update-batch.js';

export interface ShardedConfig {
  /** default { type: 'sgd', lr: 0.01 } */
  optimizer?: OptimizerConfig;
  /** seed of the deterministic initialisation (the same values a single collection gets); default 0 */
  seed?: number;
  /** 'cpu' (default) or 'cuda:N' */
  device?: string;
  /** wire dtypes of embeddings (forward) and gradients (backward); default: the plan's */
  comm?: { forward?: DType; backward?: DType };
  /** per-table initialisation (default uniform ±1/√rows, as EmbeddingCollection) */
  init?: Record<string, InitConfig>;
  /** disk-backed shards under this rank's RAM budget (docs/storage.md); default: all in memory */
  storage?: StorageBudget;
  /**
   * Dynamic tables' row shards spill the rows they evict (values and optimizer state) to files under this
   * existing folder, `rank<r>/spill-<local table>.bin`, and take them back on re-admission (docs/storage.md);
   * default: evicted rows are dropped.
   */
  spill?: { path: string };
}

const SHARDED_CONFIG_FIELDS = fieldsOf<ShardedConfig>({ optimizer: true, seed: true, device: true, comm: true, init: true, storage: true, spill: true });

/** The EmbeddingCollection config equivalent to a plan's tables (what a single rank would build). */
export function collectionConfigOf(plan: ShardPlan, config: ShardedConfig = {}): CollectionConfig {
  rejectUnknownFields(config, SHARDED_CONFIG_FIELDS);
  if (config.comm !== undefined) rejectUnknownFields(config.comm, ['forward', 'backward'], 'comm');
  return {
    tables: plan.tables.map((t) => ({
      name: t.name,
      ...(t.dynamic ? dynamicFieldsOf(t.dynamic) : { rows: t.rows }),
      dim: t.dim,
      pooling: t.pooling,
      features: [...t.features],
      dtype: t.dtype,
      ...(config.init?.[t.name] ? { init: config.init[t.name]! } : {}),
    })),
    ...(config.optimizer ? { optimizer: config.optimizer } : {}),
    device: config.device ?? 'cpu',
    seed: config.seed ?? 0,
  };
}

/**
 * A forward's result, as EmbeddingCollection's: `backward(out, …)` consumes it (once the update is done,
 * `pooled` and every sequence's `values` are detached and their memory is reused by the next forward);
 * `{ keepOutput: true }` keeps them until `release(out)`.
 */
export interface ShardedForwardOutput {
  /** [batchSize × pooledDim] of this rank's local batch, features in `pooledFeatures` order */
  pooled: Float32Array;
  sequences: Record<string, SequenceOutput>;
  batch: JaggedBatch;
}

interface StepCtx {
  /** the collection whose forward made it */
  collection: ShardedEmbeddingCollection;
  batch: JaggedBatch;
  B: number;
  segs: Map<string, SegView>;
  /** distinct ids per ub table and row group: ub[t][g] */
  ub: UniqT[][];
  node: Map<number, UniqT>;
  recv: Received[];
  Btot: number;
  Boff: number[];
  owner: NativeBatch;
  /** per local feature, per source rank: offset of the source's ids in the feature */
  idOff: number[][];
  /** ids of each local feature in the owner batch */
  featIds: number[];
  /** the step's exchange schedule as the owner (outputs out, gradients in) and as the requester (outputs in, gradients out) */
  own: Schedule;
  req: Schedule;
  /** hierarchical: the relay schedule as the relay (sends forward, receives backward) and as the requester, and the ub row groups this rank relays */
  rsend: Schedule;
  rrecv: Schedule;
  unions: RelayUnion[];
  used: boolean;
  /** dynamic shards: the owner batch's translation (its sinks are zeroed after the backward) */
  dyn?: DynamicStep;
  /** admitting forwards called before this one's backward may run (admitSeq at its call) */
  seq: number;
  /** forwardOnDevice: the output's device arrays, and whether they went back to the pool */
  deviceOut?: { pooled: DeviceArray; sequences: DeviceArray; returned: boolean };
}

interface Prepared {
  batch: JaggedBatch;
  routed: RoutedOrRejected;
  recv: Promise<InputResult>;
  /** the forward's byte counters, from its input exchange on */
  counters: TrafficCounters;
}

const STEP = Symbol('embshard.sharded.step');
type Out = (ShardedForwardOutput | DeviceForwardOutput) & { [STEP]?: StepCtx };


export class ShardedEmbeddingCollection extends EngineOwner {
  readonly plan: ShardPlan;
  readonly group: ProcessGroup;
  /** the single-collection config these shards add up to */
  readonly config: ResolvedConfig;
  readonly layout: LocalLayout;
  /** the plan's hot-id remaps (ids → rows) */
  readonly remaps: RowRemaps;
  readonly wire: { forward: Wire; backward: Wire };
  readonly featureInfo: readonly FeatureInfo[];
  readonly pooledFeatures: readonly string[];
  readonly sequenceFeatures: readonly string[];
  readonly pooledDim: number;
  /** byte counters of the latest forward and backward of this rank (docs/wire-protocol.md §Counters) */
  readonly traffic: RankCounters = { forward: zeroTraffic(), backward: zeroTraffic() };
  /** the batch given to prepare(), its routing and its input exchange under way */
  private prepared: Prepared | undefined;
  /** the dynamic tables' row shards this rank holds (rows: 'dynamic'), when there are any */
  private readonly dynamic: DynamicShards | undefined;
  /** admitting forwards called so far (the same on every rank): a backward must follow the latest */
  private admitSeq = 0;
  /** the steps' temporaries, reused from step to step */
  private readonly scratch = new ScratchPool();
  /**
   * Where this rank's output and gradient exchanges run: 'device' (the engine on a GPU, the group an NCCL
   * group on it: pooled outputs, messages and pooled gradients stay in device memory; device-exchange.ts)
   * or 'host' (staged through host memory), with `exchangeMemoryReason` saying why.
   */
  readonly exchangeMemory: 'device' | 'host';
  /** Why the exchanges run in host memory ('' when they run on the device). */
  readonly exchangeMemoryReason: string;
  /** the device path's buffers, kept from step to step */
  private readonly deviceScratch: DeviceScratch | undefined;
  /** forwardOnDevice outputs' arrays, reused (made on first use) */
  private deviceOutputs: DeviceOutputs | undefined;
  /** host copies of device gradients for the backward's host part, reused */
  private gradHost = { pooled: new Float32Array(0), sequences: new Float32Array(0) };

  constructor(plan: ShardPlan, group: ProcessGroup, config: ShardedConfig = {}, internal?: { initialize: boolean }) {
    super('ShardedEmbeddingCollection');
    if (!(plan instanceof ShardPlan)) throw new EmbshardError('INVALID_ARGUMENT', 'plan must be a ShardPlan (planShards, ShardPlan.fromJSON)');
    if (!(group instanceof ProcessGroup)) throw new EmbshardError('INVALID_ARGUMENT', 'group must be a ProcessGroup (createInProcessGroups, createMpiGroup, createNcclGroup)');
    if (group.size !== plan.topology.worldSize)
      throw new EmbshardError('INVALID_PLAN', `the plan is for ${plan.topology.worldSize} ranks but the group has ${group.size}`);
    if (group.ranksPerNode !== plan.topology.ranksPerNode)
      throw new EmbshardError('INVALID_PLAN', `the plan has ${plan.topology.ranksPerNode} ranks per node but the group has ${group.ranksPerNode}`);
    const wf = config.comm?.forward ?? plan.wire.forward, wb = config.comm?.backward ?? plan.wire.backward;
    for (const [k, w] of [['comm.forward', wf], ['comm.backward', wb]] as const)
      if (w !== 'fp32' && w !== 'fp16' && w !== 'bf16') throw new EmbshardError('UNSUPPORTED_DTYPE', `${k} must be fp32 | fp16 | bf16 (got ${String(w)})`);
    this.plan = plan;
    this.group = group;
    this.wire = { forward: wf, backward: wb };
    this.config = resolveConfig(collectionConfigOf(plan, config));
    this.layout = new LocalLayout(plan, group.rank);
    this.remaps = new RowRemaps(plan);
    const L = this.layout;
    const infos: FeatureInfo[] = [];
    for (const rt of L.tables) rt.features.forEach((f, k) => infos.push({ name: f, table: rt.table.name, pooling: rt.pooling, dim: rt.table.dim, offset: rt.pooledCol[k]! }));
    this.featureInfo = infos;
    this.pooledDim = L.pooledDim;
    this.pooledFeatures = infos.filter((f) => f.pooling !== 'none').map((f) => f.name);
    this.sequenceFeatures = infos.filter((f) => f.pooling === 'none').map((f) => f.name);
    const addon = resolveBackend(this.config.device);
    const spillDir = spillFolder(config.spill, group.rank);
    const localDtype = (t: LocalTable) => (t.part === 'idle' ? 'fp32' : plan.tables[t.t]!.dtype);
    const storage = shardStorage(L.localTables.map((t) => ({ ...t, dtype: localDtype(t) })), config.storage, group.rank, this.config.optimizer.type);
    this.engine = new addon.Engine(
      {
        // a dynamic shard's engine table has one more row: its sink (lib/storage/dynamic.ts)
        tables: L.localTables.map((t) => ({ name: t.name, rows: t.dynamic ? t.rows + 1 : t.rows, dim: t.dim, dtype: localDtype(t), idPolicy: 'error', init: { kind: 'constant', a: 0, b: 0 } })),
        features: L.localFeatures.map((f) => ({ name: f.name, table: f.table, pooling: f.pooling })),
        optimizer: { ...this.config.optimizer },
        seed: this.config.seed,
        initialize: false,
      },
      this.config.device,
      storage,
    );
    const blocker = deviceExchangeBlocker(plan, L, group, this.config.device, this.engine);
    this.exchangeMemory = blocker === undefined ? 'device' : 'host';
    this.exchangeMemoryReason = blocker ?? '';
    this.deviceScratch = blocker === undefined ? new DeviceScratch(this.config.device, addon as unknown as DeviceOpsAddon) : undefined;
    this.dynamic = DynamicShards.of(L, this.config, addon, spillDir);
    this.dynamic?.resetSinks(this.engine);
    if (internal?.initialize ?? true) this.initializeShards();
  }

  /**
   * Counters of the dynamic row shards this rank holds (hits, misses, admissions, evictions, rows held),
   * each with its table, row group and rank. Every shard counts the ids routed to it.
   */
  stats(): DynamicShardStats[] {
    this.live();
    return this.dynamic?.stats() ?? [];
  }

  /** The raw ids a dynamic table's row shards on this rank hold (per shard, in slot order). */
  heldIds(table: string): HeldShard[] {
    this.live();
    const t = this.plan.tables.findIndex((x) => x.name === table);
    if (t < 0) throw new EmbshardError('UNKNOWN_TABLE', `no table named '${table}'`);
    if (!this.plan.tables[t]!.dynamic) throw new EmbshardError('INVALID_ARGUMENT', `table '${table}' is not dynamic`);
    return this.dynamic?.heldIds(t) ?? [];
  }

  /** Frees native memory now; any later use raises DISPOSED. */
  override dispose(): void {
    super.dispose();
    this.scratch.clear();
    this.deviceScratch?.free();
    this.deviceOutputs?.dispose();
    this.dynamic?.dispose();
  }

  /** @internal the dynamic shards (checkpoints) */
  get dynamicShards(): DynamicShards | undefined {
    return this.dynamic;
  }

  /** Fills every local table with exactly the values a single collection starts with there. */
  private initializeShards(): void {
    const K = exchangeOps();
    const e = this.live();
    const chunk = 1 << 16;
    // the whole collection's init parameters (defaults resolved against the whole table's rows)
    const inits = toNativeConfig(this.config, true).tables.map((t) => t.init);
    let ids = new BigInt64Array(0), vals = new Float32Array(0); // reused from chunk to chunk
    this.layout.localTables.forEach((lt, i) => {
      // dynamic shards: an admitted id's row gets its init when it is admitted
      if (lt.part === 'idle' || lt.dynamic) return;
      const t = this.config.tables[lt.t]!;
      const { kind, a, b } = inits[lt.t]!;
      const cols = lt.c1 - lt.c0;
      // local row j holds table row r0 + j (node tier: tier row (rank mod rpn) + j·rpn)
      const [first, stride] = lt.part === 'node' ? [lt.r0 + (this.group.rank % this.layout.rpn), this.layout.rpn] : [lt.r0, 1];
      for (let r = 0; r < lt.rows; r += chunk) {
        const n = Math.min(chunk, lt.rows - r);
        if (ids.length !== n) ids = new BigInt64Array(n);
        if (vals.length < n * cols) vals = new Float32Array(chunk * cols);
        const v = vals.subarray(0, n * cols);
        K.initSlice(kind, a, b, this.config.seed, lt.t, t.dim, first + r * stride, n, lt.c0, lt.c1, v, stride);
        K.rowIds(r, ids);
        e.writeRows(i, ids, v);
      }
    });
    // remapped tables: the rows that hold moved ids start with those ids' values
    this.remaps.remaps.forEach((rm, t) => {
      if (!rm) return;
      const { kind, a, b } = inits[t]!, dim = this.config.tables[t]!.dim;
      const vals = new Float32Array(rm.from.length * dim);
      rm.from.forEach((id, k) => K.initSlice(kind, a, b, this.config.seed, t, dim, id, 1, 0, dim, vals.subarray(k * dim, (k + 1) * dim)));
      writeCells(this, t, BigInt64Array.from(rm.from, BigInt), vals, 'rows');
    });
  }

  /** @internal the local engine (row access for gathers and checkpoints) */
  get localEngine(): NativeEngine {
    return this.live();
  }

  /** 'cpu' or 'cuda:N': where this rank's engine lives. */
  get device(): string {
    return this.config.device;
  }
  /** Floats of optimizer state per row of a table. */
  stateWidth(table: string): number {
    const t = checkCells(this, table, []).t;
    return cellWidth(this, t, 'state');
  }

  private readAt(table: string, ids: Ids, kind: CellKind): Promise<Float32Array> {
    return this.rejecting(() => {
      const c = checkCells(this, table, ids);
      return this.enqueue(() => readCells(this, c.t, c.ids, kind));
    });
  }
  private writeAt(table: string, ids: Ids, values: Float32Array, kind: CellKind): Promise<void> {
    return this.rejecting(() => {
      const c = checkCells(this, table, ids);
      const width = cellWidth(this, c.t, kind);
      if (!(values instanceof Float32Array) || values.length !== c.ids.length * width)
        throw new EmbshardError('LENGTH_MISMATCH', `values must be a Float32Array of ids.length × ${width} = ${c.ids.length * width} floats`);
      return this.enqueue(async () => writeCells(this, c.t, c.ids, values, kind));
    });
  }
  /**
   * Rows of a table by global row id, wherever they live: [ids.length × dim] fp32 on every rank. A
   * collective (every rank passes the same ids); runs after the steps queued before it.
   */
  readRows(table: string, ids: Ids): Promise<Float32Array> {
    return this.readAt(table, ids, 'rows');
  }
  /** Overwrites rows by global row id (values [ids.length × dim], rounded to the dtype; duplicates: last wins) in every copy. Every rank passes the same arguments. */
  writeRows(table: string, ids: Ids, values: Float32Array): Promise<void> {
    return this.writeAt(table, ids, values, 'rows');
  }
  /** Optimizer state of rows by global row id: [ids.length × stateWidth] (adam: m then v). A collective. */
  readState(table: string, ids: Ids): Promise<Float32Array> {
    return this.readAt(table, ids, 'state');
  }
  /** Overwrites optimizer state by global row id in every copy. Every rank passes the same arguments. */
  writeState(table: string, ids: Ids, values: Float32Array): Promise<void> {
    return this.writeAt(table, ids, values, 'state');
  }

  /**
   * Writes one EmbeddingCollection checkpoint of the whole collection to `dir` (rank 0 writes, atomically;
   * every rank waits). Any world size and plan can load it (load), so can EmbeddingCollection.load. A collective.
   */
  save(dir: string, extra?: Record<string, unknown>): Promise<void> {
    return this.rejecting(() => {
      checkDir(dir); // before the gather: every rank passes the same folder
      return this.enqueue(() => saveSharded(this, dir, extra));
    });
  }

  /** Reads a checkpoint of save() or EmbeddingCollection.save onto `plan` and `group` (any world size). */
  static load(dir: string, plan: ShardPlan, group: ProcessGroup, config: ShardedConfig = {}): Promise<ShardedEmbeddingCollection> {
    return loadSharded(dir, plan, group, config);
  }

  /** The plan a checkpoint of save() was written under (hot-id remap included); undefined for one collection's checkpoint. */
  static savedPlan(dir: string): Promise<ShardPlan | undefined> {
    return savedPlan(dir);
  }

  /**
   * Lets go of a forward output once the calls queued before it are done: its arrays are detached (length 0
   * afterwards) and the step's routing is dropped, so it can no longer go through backward. Resolves to
   * the number of arrays released.
   */
  release(out: ShardedForwardOutput | DeviceForwardOutput): Promise<number> {
    return this.rejecting(() => {
      if (!out || !(out.pooled instanceof Float32Array || out.pooled instanceof DeviceArray))
        throw new EmbshardError('INVALID_ARGUMENT', 'release(out) needs the output of forward()');
      const ctx = (out as Out)[STEP];
      return this.enqueue(async () => {
        if (ctx) ctx.used = true;
        if (out.pooled instanceof DeviceArray) return ctx ? this.returnDeviceOutput(ctx) : 0;
        return detachOutput(out as ShardedForwardOutput);
      });
    });
  }

  /** Whether forwardOnDevice works on this rank: its exchanges run in device memory (`exchangeMemory`). */
  get outputsOnDevice(): boolean {
    return this.exchangeMemory === 'device';
  }

  /**
   * The forward with this rank's outputs left in the memory of its GPU (DeviceArrays a dense model on that
   * GPU reads directly): the same values as forward(). A collective like forward(); ranks may mix the two.
   * BACKEND_UNAVAILABLE (with `exchangeMemoryReason`) where the exchanges run in host memory.
   */
  forwardOnDevice(batch: JaggedBatch, options: Pick<ForwardOptions, 'reject'> = {}): Promise<DeviceForwardOutput> {
    return this.rejecting(() => {
      if (!this.outputsOnDevice)
        throw new EmbshardError('BACKEND_UNAVAILABLE', `forwardOnDevice: this rank's exchanges run in host memory (${this.exchangeMemoryReason})`);
      return this.startForward(batch, options, true) as Promise<DeviceForwardOutput>;
    });
  }

  /** A device output's arrays back to the pool, once; returns how many went back. */
  private returnDeviceOutput(ctx: StepCtx): number {
    const d = ctx.deviceOut;
    if (!d || d.returned) return 0;
    d.returned = true;
    this.deviceOutputs!.give(d.pooled, d.sequences);
    return 2;
  }

  /** The batch's routing, or the typed error that rejects it (step-status.ts: the first exchange tells every rank). */
  private routeOrReject(batch: JaggedBatch): RoutedOrRejected {
    try {
      this.checkFeatures(batch);
      return route(this.layout, this.remaps.rowsOf(batch));
    } catch (e) {
      if (e instanceof EmbshardError) return e;
      throw e;
    }
  }

  private checkBatch(batch: JaggedBatch): void {
    if (!(batch instanceof JaggedBatch)) throw new EmbshardError('INVALID_ARGUMENT', 'expected a JaggedBatch (JaggedBatch.fromLengths)');
  }

  private checkFeatures(batch: JaggedBatch): void {
    const planFeatures = new Set(this.featureInfo.map((f) => f.name));
    for (const f of batch.features) if (!planFeatures.has(f)) throw new EmbshardError('UNKNOWN_FEATURE', `the batch has feature '${f}', which no table of the plan reads`);
    for (const f of planFeatures) if (!batch.features.includes(f)) throw new EmbshardError('MISSING_FEATURE', `the batch lacks feature '${f}'`);
  }

  /**
   * Looks up this rank's local batch; every rank of the group must call it (a collective). Dynamic
   * tables: `admit: false` (evaluation) admits no ids; ids a shard does not hold read its sink.
   */
  forward(batch: JaggedBatch, options: ForwardOptions = {}): Promise<ShardedForwardOutput> {
    return this.rejecting(() => this.startForward(batch, options, false) as Promise<ShardedForwardOutput>);
  }

  private startForward(batch: JaggedBatch, options: ForwardOptions, onDevice: boolean): Promise<ShardedForwardOutput | DeviceForwardOutput> {
    const reject = checkForwardOptions(options).reject;
    const pre = this.prepared;
    if (pre && pre.batch !== batch)
      throw new EmbshardError('INVALID_ARGUMENT', 'forward() must take the batch given to prepare() first (its ids are already on their way to the owners)');
    if (pre && reject) throw new EmbshardError('INVALID_ARGUMENT', 'forward options.reject: this batch was given to prepare(), whose exchange has already gone out');
    if (!pre) this.checkBatch(batch);
    this.prepared = undefined;
    // counted on every rank alike (also on ranks without a dynamic shard), so a stale backward fails everywhere
    const admit = this.plan.tables.some((t) => t.dynamic) && options.admit !== false;
    const seq = admit ? ++this.admitSeq : this.admitSeq;
    return this.enqueue(() => this.inPhase(() => this.forwardPhase(batch, pre, admit, seq, onDevice, reject)));
  }

  /**
   * Starts the table-independent part of the next forward now: routes `batch`'s ids and sends them to
   * their owners (the metadata and input exchanges, queued after the calls before it), so the exchange
   * overlaps the caller's compute until its next call on this collection (the Trainer prepares right after
   * the current forward, so the next batch's ids travel during the dense forward / backward). A
   * collective: every rank prepares at the same point of its step. The next forward must take this batch;
   * the result is bitwise the same as without prepare(). The returned promise resolves once the exchange is
   * done (it never rejects: a failure surfaces in the forward that consumes the batch); a caller that issues
   * other collectives on the same group (the Trainer's dense all-reduce) waits for it first, so every rank
   * issues them in the same order whatever the timing.
   */
  prepare(batch: JaggedBatch): Promise<void> {
    if (this.prepared) throw new EmbshardError('INVALID_ARGUMENT', 'a prepared batch is already waiting for its forward()');
    this.live();
    this.checkBatch(batch);
    const routed = this.routeOrReject(batch);
    const counters = zeroTraffic();
    // queued like every call of this collection, so every rank issues the collectives in the same order;
    // the calls queued after it (the current backward) wait for it, the caller's own compute does not
    const recv = this.enqueue(() => exchangeInput(this.layout, this.group, routed, batch.batchSize, batch.weights !== undefined, counters));
    this.prepared = { batch, routed, recv, counters };
    return recv.then(() => undefined, () => undefined); // a failure is surfaced by the forward that consumes it
  }

  /**
   * Drops the batch prepare() sent, so that the next forward may take any batch (it then exchanges its own
   * ids). Not a collective, but every rank must drop alike, as after a step that failed on every rank (the
   * Trainer drops the batch it prepared during such a step). Nothing happens when no batch is prepared.
   */
  discardPrepared(): void {
    this.prepared = undefined;
  }

  /** Applies the gradients of a forward output; every rank must call it (a collective). */
  backward(out: ShardedForwardOutput | DeviceForwardOutput, grads: Gradients | DeviceGradients, options: BackwardOptions = {}): Promise<BackwardResult> {
    return this.rejecting(() => this.startBackward(out, grads, options));
  }

  private startBackward(out: ShardedForwardOutput | DeviceForwardOutput, grads: Gradients | DeviceGradients, options: BackwardOptions): Promise<BackwardResult> {
    const ctx = (out as Out)?.[STEP];
    if (!ctx || ctx.collection !== this) throw new EmbshardError('INVALID_ARGUMENT', 'backward(out, grads) needs the output of this collection\'s forward()');
    if (ctx.used) throw new EmbshardError('INVALID_ARGUMENT', 'this forward output has already been through backward()');
    // dynamic tables: slots are meaningful for the maps the forward saw; a later admitting forward (the
    // same on every rank) may have evicted them
    if (ctx.seq !== this.admitSeq)
      throw new EmbshardError('INVALID_ARGUMENT', 'stale forward output: a later forward admitted ids into the dynamic tables; run forward() again');
    const reject = checkBackwardOptions(options).reject;
    try {
      if (reject) throw reject;
      return this.checkedBackward(out, ctx, grads, options);
    } catch (e) {
      // gradients this rank cannot use (or its caller's `reject`): it still joins the backward's agreement
      // (backwardPhase), so every rank ends the step with this code and nothing changed
      if (!(e instanceof EmbshardError)) throw e;
      return this.enqueue(async () => {
        await agreeOnGradients(this.group, rejectionStatus(e.code));
        throw e;
      });
    }
  }

  private checkedBackward(out: ShardedForwardOutput | DeviceForwardOutput, ctx: StepCtx, grads: Gradients | DeviceGradients, options: BackwardOptions): Promise<BackwardResult> {
    if (typeof grads !== 'object' || grads === null) throw new EmbshardError('GRAD_SIZE_MISMATCH', 'gradients must be an object');
    const B = ctx.B;
    const sizes = [...this.sequenceSizes(ctx.batch).values()];
    const dev = deviceGradients(grads, { pooled: B * this.pooledDim, sequences: sizes.reduce((a, b) => a + b, 0) }, this.device, (this.deviceOutputs ??= new DeviceOutputs(this.device)));
    if (dev) {
      ctx.used = true;
      // the device path reads them where they are; the host path reads them into host arrays first
      return this.enqueue(async () => this.finishBackward(out, ctx, this.deviceScratch ? dev : await this.hostGradients(dev, B, sizes), options));
    }
    grads = grads as Gradients;
    if (this.pooledDim > 0) {
      if (!(grads.pooled instanceof Float32Array) || grads.pooled.length !== B * this.pooledDim)
        throw new EmbshardError('GRAD_SIZE_MISMATCH', `grads.pooled must be a Float32Array of batchSize × pooledDim = ${B} × ${this.pooledDim}`);
    }
    for (const f of this.sequenceFeatures) {
      const n = ctx.batch.feature(f).ids.length * this.featureInfo.find((x) => x.name === f)!.dim;
      const g = grads.sequences?.[f];
      if (!(g instanceof Float32Array) || g.length !== n) throw new EmbshardError('GRAD_SIZE_MISMATCH', `grads.sequences['${f}'] must be a Float32Array of ${n} values`);
    }
    for (const name of Object.keys(grads.sequences ?? {}))
      if (!this.sequenceFeatures.includes(name)) throw new EmbshardError('UNKNOWN_FEATURE', `'${name}' is not a sequence feature of this collection`);
    ctx.used = true;
    const hostGrads = grads;
    return this.enqueue(async () => this.finishBackward(out, ctx, hostGrads, options));
  }

  private async finishBackward(out: ShardedForwardOutput | DeviceForwardOutput, ctx: StepCtx, grads: Gradients | DeviceGradArrays, options: BackwardOptions): Promise<BackwardResult> {
    let r: BackwardResult;
    try {
      r = await this.backwardStep(ctx, grads);
    } catch (e) {
      ctx.used = false; // nothing changed: the output may go through backward again, as with EmbeddingCollection
      throw e;
    }
    // consumed: the output's buffers go back to the pool for the next forward (unless kept)
    if (options.keepOutput !== true) {
      if (out.pooled instanceof DeviceArray) this.returnDeviceOutput(ctx);
      else detachOutput(out as ShardedForwardOutput);
    }
    return r;
  }

  /**
   * Device gradients read into host arrays for the backward (its routing, sums and replica syncs run from
   * host arrays): the pooled gradient and each sequence feature's (views of one array, `sizes` each).
   */
  private async hostGradients(dev: { pooled: DeviceArray; sequences: DeviceArray }, B: number, sizes: readonly number[]): Promise<Gradients> {
    const P = this.pooledDim, n = sizes.reduce((a, b) => a + b, 0);
    if (this.gradHost.pooled.length < B * P) this.gradHost.pooled = new Float32Array(B * P);
    if (this.gradHost.sequences.length < n) this.gradHost.sequences = new Float32Array(n);
    const pooled = this.gradHost.pooled.subarray(0, B * P), all = this.gradHost.sequences.subarray(0, n);
    if (B * P > 0) await dev.pooled.readInto(pooled, 0);
    if (n > 0) await dev.sequences.readInto(all, 0);
    const sequences: Record<string, Float32Array> = {};
    let at = 0;
    this.sequenceFeatures.forEach((f, k) => {
      sequences[f] = all.subarray(at, at + sizes[k]!);
      at += sizes[k]!;
    });
    return { pooled, sequences };
  }

  // ---------------------------------------------------------------- forward

  // Runs one forward or backward; the temporaries it took from the scratch pool go back when it ends.
  private async inPhase<T>(phase: () => Promise<T>): Promise<T> {
    let ok = false;
    try {
      const r = await phase();
      ok = true;
      return r;
    } finally {
      this.scratch.end(ok);
    }
  }

  private async forwardPhase(
    batch: JaggedBatch,
    pre: Prepared | undefined,
    admit: boolean,
    seq: number,
    onDevice: boolean,
    reject?: EmbshardError,
  ): Promise<ShardedForwardOutput | DeviceForwardOutput> {
    const L = this.layout, g = this.group;
    const B = batch.batchSize;
    const weighted = batch.weights !== undefined;
    const counters = pre?.counters ?? zeroTraffic();
    // 1. route every feature's ids to its ranges; deduplicate ub tables and node tiers (routing.ts)
    // (a batch that fails routing, or that the caller rejects, still takes part in the first exchange,
    // which ends the step on every rank)
    const routed = pre?.routed ?? reject ?? this.routeOrReject(batch);
    // 2–3. the ids (+ lengths, weights) to their owners, and what every source asked this rank for (input-exchange.ts)
    const { recv, unions } = await (pre ? g.clock.wait(pre.recv) : exchangeInput(L, g, routed, B, weighted, counters));
    const { segs, ub, node } = routed as Routed; // a rejected batch threw in the exchange
    const Boff: number[] = [];
    let Btot = 0;
    for (const x of recv) Boff.push(Btot), (Btot += x.B);
    // 4. one engine call: the owner batch (every source's ids for this rank's shards and tiers, Btot bags)
    // with this rank's own lookups (dp tables, replicated tiers) in its first B bags
    const owner = ownerBatch(L, recv, Btot, segs, B, weighted);
    const e = this.live();
    // dynamic shards: raw ids → slots of each shard's map (dynamic-shards.ts); the engine runs on slots
    let dyn: DynamicStep | undefined;
    const rawOwner = owner.batch;
    if (admit) {
      // an admitting forward's translation can fail on one rank (a spill record that fails its check, a
      // spill append the disk refuses): every rank, with dynamic shards or not, agrees on it before the
      // output exchange, so none is left waiting there for the failed rank
      let failed: EmbshardError | undefined;
      try {
        if (this.dynamic) dyn = await this.dynamic.translate(owner.batch, e);
      } catch (err) {
        failed = err instanceof EmbshardError ? err : new EmbshardError('IO_ERROR', `the dynamic shards' translation failed: ${String((err as Error)?.message ?? err)}`);
      }
      await agreeOnTranslation(g, failed);
    } else if (this.dynamic) dyn = this.dynamic.lookup(owner.batch);
    if (dyn) owner.batch = dyn.native;
    // what every owner sends back (the rows / bags this rank asked for and, as a relay, the partial sums of
    // the requesters it relays for), and what relays pass on
    const own = ownerSchedule(L, recv);
    const { req, rsend, rrecv } = stepSchedules(L, { segs, ub, node }, recv, unions, B);
    const step: StepCtx = { collection: this, batch, B, segs, ub, node, recv, Btot, Boff, owner: owner.batch, idOff: owner.idOff, featIds: owner.featIds, own, req, rsend, rrecv, unions, used: false, seq, ...(dyn ? { dyn } : {}) };
    // 5–6. the engine's outputs to the sources and this rank's outputs assembled, in device memory on the
    // device path (device-exchange.ts); they live in buffers of the addon's pool, recycled when backward
    // consumes them (or on release)
    const P = this.pooledDim;
    const sizes = this.sequenceSizes(batch);
    const target = onDevice ? this.deviceTarget(B * P, sizes) : hostTarget(B * P, sizes);
    try {
      const means = this.meanColumns(batch);
      if (this.deviceScratch)
        await forwardOnDevice({ ...this.stepArgs(step, this.wire.forward, counters), scratch: this.deviceScratch, engine: e, owner: step.owner, featIds: step.featIds, idOff: step.idOff, means, out: target });
      else {
        const looked = dyn ? (out: NativeForwardResult) => this.dynamic!.addDefaults(dyn, rawOwner, out) : undefined;
        await outputsOnHost({ ...this.stepArgs(step, this.wire.forward, counters), scratch: this.scratch, engine: e, owner: step.owner, idOff: step.idOff, means, out: target as HostOutputs, ...(looked ? { looked } : {}) });
      }
    } catch (err) {
      if (onDevice) this.deviceOutputs!.give(target.pooled as DeviceArray, (target as DeviceOutputArrays).sequences);
      throw err;
    }
    this.traffic.forward = counters;
    let out: Out;
    if (onDevice) {
      const d = target as DeviceOutputArrays;
      step.deviceOut = { pooled: d.pooled, sequences: d.sequences, returned: false };
      out = { pooled: d.pooled, sequences: d.sequences, batch };
    } else {
      const { pooled, seqOut } = target as HostOutputs;
      const sequences: Record<string, SequenceOutput> = {};
      for (const f of this.sequenceFeatures) sequences[f] = { values: seqOut.get(f)!, lengths: batch.feature(f).lengths };
      out = { pooled, sequences, batch };
    }
    Object.defineProperty(out, STEP, { value: step, enumerable: false });
    return out;
  }

  // What both paths of a step's phase work from (step-args.ts): its routing and schedules, in `wire` values.
  private stepArgs(ctx: StepCtx, wire: Wire, counters: TrafficCounters): StepArgs {
    return {
      L: this.layout, wire, group: this.group, B: ctx.B, segs: ctx.segs, ub: ctx.ub, node: ctx.node, Btot: ctx.Btot, Boff: ctx.Boff,
      own: ctx.own, req: ctx.req, rsend: ctx.rsend, rrecv: ctx.rrecv, unions: ctx.unions, bags: ctx.recv.map((x) => x.B), counters,
    };
  }

  /** forwardOnDevice's output arrays (pooled values, the sequence values back to back in `sizes` order). */
  private deviceTarget(pooled: number, sizes: Map<string, number>): DeviceOutputArrays {
    const pool = (this.deviceOutputs ??= new DeviceOutputs(this.device));
    let n = 0;
    for (const v of sizes.values()) n += v;
    return { pooled: pool.take(pooled), sequences: pool.take(n), sizes };
  }

  /** The pooled output's mean features (of `cluster`'s tables only, when given): their columns and their bags' lengths in `batch`. */
  private meanColumns(batch: JaggedBatch, cluster?: string): MeanColumns[] {
    const out: MeanColumns[] = [];
    for (const rt of this.layout.tables)
      if (rt.pooling === 'mean' && (cluster === undefined || rt.cluster === cluster))
        rt.features.forEach((f, k) => out.push({ col: rt.pooledCol[k]!, dim: rt.table.dim, lengths: batch.feature(f).lengths }));
    return out;
  }

  /** Values of each sequence feature's output (or gradient) for `batch`, features in order. */
  private sequenceSizes(batch: JaggedBatch): Map<string, number> {
    return new Map(this.sequenceFeatures.map((f) => [f, batch.feature(f).ids.length * this.dimOf(f)]));
  }

  private dimOf(feature: string): number {
    return this.featureInfo.find((x) => x.name === feature)!.dim;
  }

  // ---------------------------------------------------------------- backward
  /** Whether this rank's gradients (host arrays, or device arrays on the device path) are all finite. */
  private gradientsFinite(ctx: StepCtx, grads: Gradients | DeviceGradArrays): boolean {
    const P = ctx.B * this.pooledDim;
    if (grads.pooled instanceof DeviceArray) {
      const dev = grads as DeviceGradArrays, addon = this.deviceScratch!.addon;
      const seq = [...this.sequenceSizes(ctx.batch).values()].reduce((a, b) => a + b, 0);
      const flag = this.deviceScratch!.get('finiteFlag', 1, 'i32').native;
      return (P === 0 || addon.allFiniteDevice(dev.pooled.native, P, flag)) && (seq === 0 || addon.allFiniteDevice(dev.sequences.native, seq, flag));
    }
    const K = exchangeOps(), host = grads as Gradients;
    return (host.pooled === undefined || K.allFinite(host.pooled.subarray(0, P))) && Object.values(host.sequences ?? {}).every((g) => K.allFinite(g));
  }

  private backwardStep(ctx: StepCtx, grads: Gradients | DeviceGradArrays): Promise<BackwardResult> {
    return this.inPhase(() => this.backwardPhase(ctx, grads));
  }

  private async backwardPhase(ctx: StepCtx, grads: Gradients | DeviceGradArrays): Promise<BackwardResult> {
    const L = this.layout;
    // NaN / Inf on any rank: the step changes nothing on any rank (each owner only sees the gradients of
    // its own rows, so without agreeing one could update while another rejects)
    const finite = this.gradientsFinite(ctx, grads);
    if (!(await agreeOnGradients(this.group, finite ? 0 : NON_FINITE_STATUS))) {
      const skipped = nonFiniteOutcome(finite, this.config.optimizer.nonFinite);
      if (ctx.dyn) this.dynamic!.resetSinks(this.live(), ctx.dyn.sinks);
      return skipped;
    }
    const counters = zeroTraffic();
    const args = this.stepArgs(ctx, this.wire.backward, counters);
    // dp tables and replicated tiers: this rank's distinct rows of each, whose gradients the syncs carry
    const replicated = L.tables.filter((rt) => rt.cluster === 'dp' || rt.R > 0).map((rt) => ({ table: rt, rows: uniqOver(ctx.segs, rt, 0, 1, ctx.B) }));
    const rbMeans = this.meanColumns(ctx.batch, 'rb');
    const step = { batch: ctx.batch, rbMeans, recv: ctx.recv, replicated };
    let res: BackwardResult;
    if (this.deviceScratch) {
      // the device path keeps the gradients in device memory (device-backward.ts)
      const dev = await backwardOnDevice({ ...args, ...step, scratch: this.deviceScratch, grads, sequenceSizes: this.sequenceSizes(ctx.batch) });
      const upd = updateBatch(L, ctx.owner, ctx.featIds, ctx.Btot, dev.replicated, dev.node);
      const seq = ownerSequenceGradients({ L, wire: args.wire, scratch: this.deviceScratch, own: ctx.own }, upd.counts, ctx.idOff, dev.exchanged.recv, upd.synced);
      res = await this.live().backwardDevice(upd.batch, dev.exchanged.pooled.native, seq.native);
    } else {
      const host = await gradientsOnHost({ ...args, ...step, scratch: this.scratch, grads: grads as Gradients, idOff: ctx.idOff, featIds: ctx.featIds });
      const upd = updateBatch(L, ctx.owner, ctx.featIds, ctx.Btot, host.replicated, host.node);
      // every sequence-shaped feature's gradient rows: as received (rb sequences, ub rows), the synced
      // rows' sums, or none (zero for ub rows no source asked for)
      const seqGrads = L.localFeatures.map((lf, i) => {
        if (lf.kind === 'ub') return host.sequences[i] ?? this.scratch.f32(upd.counts[i]! * lf.dim);
        if (upd.synced[i]) return upd.synced[i]!.grads;
        if (lf.pooling === 'none') return host.sequences[i] ?? new Float32Array(0);
        return host.sequences[i] ?? null;
      });
      res = await this.live().backward(upd.batch, host.pooled, seqGrads);
    }
    if (ctx.dyn) this.dynamic!.resetSinks(this.live(), ctx.dyn.sinks);
    this.traffic.backward = counters;
    return res;
  }
}

/**
 * The schedules of a step as the requester and relay (schedule.ts): what every owner sends back for the
 * ids this rank asked for (node-tier rows, ub rows — a relay's: its node's distinct ids —, rb bags or
 * sequence ids) and, as a relay, the partial sums of the requesters it relays for; what this rank passes
 * on as a relay (rsend) and what relays pass on to it (rrecv).
 */
function stepSchedules(L: LocalLayout, routed: Routed, recv: readonly Received[], unions: readonly RelayUnion[], B: number): { req: Schedule; rsend: Schedule; rrecv: Schedule } {
  const { segs, ub, node } = routed;
  const req = requesterSchedule(L, (s, d) => {
    if (s.kind === 'node') {
      const u = node.get(s.t)!, j = d % L.rpn;
      return u.starts[j + 1]! - u.starts[j]!;
    }
    if (s.kind === 'ub') return L.relaysTo(d) ? unionOf(unions, s.t, s.g).uq.values.length : ub[s.t]![s.g]!.uq.values.length;
    return L.tables[s.t]!.pooling !== 'none' ? B : part(segs.get(s.f)!, 2 + s.g, B).n;
  }, (p) => recv[p]!.B);
  const rsend = relaySendSchedule(L, (q) => recv[q]!.B, (q, rs) => unionOf(unions, rs.t, rs.g).count[q]!);
  const rrecv = relayRecvSchedule(L, B, (rs) => ub[rs.t]![rs.g]!.uq.values.length);
  return { req, rsend, rrecv };
}

/**
 * Detaches a forward output's arrays, giving the pool's buffers back for later forwards; returns how many
 * arrays were detached.
 */
/** forward()'s output arrays: pooled values and each sequence feature's (`sizes` values each), from the addon's pool. */
function hostTarget(pooled: number, sizes: ReadonlyMap<string, number>): HostOutputs {
  const K = exchangeOps();
  const seqOut = new Map<string, Float32Array>();
  for (const [f, n] of sizes) seqOut.set(f, K.outputArray(n));
  return { pooled: K.outputArray(pooled), seqOut };
}

function detachOutput(out: ShardedForwardOutput): number {
  const arrays = [out.pooled, ...Object.values(out.sequences ?? {}).map((x) => x.values)].filter((a) => a.buffer.byteLength > 0);
  (loadAddon() as GroupAddon).releaseBuffers(...arrays); // the addon whose pool exchangeOps().outputArray draws on
  for (const a of arrays) if (a.buffer.byteLength > 0) structuredClone(a.buffer, { transfer: [a.buffer as ArrayBuffer] }); // not from the pool
  return arrays.length;
}

export type { NativeForwardResult };
export type { CollectionConfig };

/** This rank's folder of dynamic-shard spill files (created), or undefined without `spill`. */
function spillFolder(spill: ShardedConfig['spill'], rank: number): string | undefined {
  if (spill === undefined) return undefined;
  const { path } = resolveSpill(spill, 'spill');
  if (!existsSync(path)) throw new EmbshardError('IO_ERROR', `spill.path '${path}' does not exist`, { path: 'spill.path' });
  const dir = join(path, `rank${rank}`);
  mkdirSync(dir, { recursive: true });
  return dir;
}
