// group.ts — ProcessGroup: the collectives a sharded collection needs (all-to-all-v, all-gather(-v),
// all-reduce, broadcast, barrier), async and off the event loop, each with a timeout, over three
// transports: in-process threads (createInProcessGroups), MPI (createMpiGroup, under mpirun) and NCCL
// (createNcclGroup, one GPU per rank). Every call counts the payload bytes it moves (docs/wire-protocol.md
// "Counters"): a message to a rank on the same node is intra-node, to another node inter-node, to
// oneself local; stats() breaks them down by collective kind.
import { EmbshardError } from '../errors.js';
import { fieldsOf, rejectUnknownFields } from '../fields.js';
import { probedCudaAddon } from '../backends.js';
import { loadAddon } from '../native.js';
import type { CommArray, DeviceBuffer, GroupAddon, NativeGroup } from './binding.js';
import { DeviceArray, deviceElemBytes, type DeviceElemType } from '../device-array.js';
import { CommClock, type CommTime } from './comm-clock.js';

export type { CommArray, DeviceBuffer } from './binding.js';
export type { CommTime } from './comm-clock.js';

export interface TrafficCounters {
  sentIntra: number;
  sentInter: number;
  recvIntra: number;
  recvInter: number;
  local: number;
}

/** The collectives whose payload a group counts. */
export type CollectiveKind = 'allToAllV' | 'allGather' | 'allReduce' | 'broadcast';
export const COLLECTIVE_KINDS: readonly CollectiveKind[] = ['allToAllV', 'allGather', 'allReduce', 'broadcast'];

/** Payload bytes one rank moved with one kind of collective (messages to itself excluded). */
export interface KindStats {
  /** collectives of this kind called (counted or not) */
  calls: number;
  sent: number;
  recv: number;
  /** of `sent` / `recv`: bytes to / from ranks on other nodes */
  sentInter: number;
  recvInter: number;
}

export type GroupStats = Record<CollectiveKind, KindStats>;

export interface AllReduceOptions extends Omit<CollectiveOptions, 'recvCounts'> {
  /**
   * Gather every rank's whole buffer and combine the contributions in rank order on every rank: bitwise the
   * same result on every transport and world layout, at (W−1)× the buffer received per rank. Default false:
   * the transport's bandwidth-optimal all-reduce (MPI_Allreduce, ncclAllReduce; in-process reduce-scatter +
   * all-gather), 2(W−1)/W × the buffer per rank, identical on every rank of one run.
   */
  deterministic?: boolean;
}

export interface CollectiveOptions {
  /** Milliseconds before the call fails with COMM_TIMEOUT (default: the group's timeoutMs). */
  timeoutMs?: number;
  /** Leave the byte counters alone (metadata such as per-segment counts is not payload). */
  uncounted?: boolean;
  /**
   * Also add this call's bytes to these counters (besides the group's own), so a caller can attribute
   * the traffic of calls that interleave with others (a step's phases) exactly.
   */
  counters?: TrafficCounters;
  /**
   * allToAllV / allGather: the elements every rank sends here, when the caller already knows them; skips
   * the count exchange (one round trip). They must be right: a mismatch fails with COMM_FAILED where the
   * transport can tell (in-process, MPI truncation) and is undefined otherwise.
   */
  recvCounts?: ArrayLike<number>;
}

const COLLECTIVE_FIELDS = fieldsOf<CollectiveOptions>({ timeoutMs: true, uncounted: true, counters: true, recvCounts: true });
const ALL_REDUCE_FIELDS = fieldsOf<AllReduceOptions>({ timeoutMs: true, uncounted: true, counters: true, deterministic: true });
const NO_COUNTS_FIELDS = fieldsOf<Omit<CollectiveOptions, 'recvCounts'>>({ timeoutMs: true, uncounted: true, counters: true });

/** A collective's options: absent, or an object of the known fields (INVALID_CONFIG naming another, before anything is sent). */
function checkOptions(opts: object | null | undefined, fields: readonly string[], what: string): void {
  if (opts === undefined || opts === null) return;
  rejectUnknownFields(opts, fields, `${what} options`);
}

export interface GroupOptions {
  /** Default timeout of every collective, in ms (default 60 000). */
  timeoutMs?: number;
}

export type ReduceOp = 'sum' | 'max' | 'min';
type Reducible = Float32Array | Float64Array | Int32Array | BigInt64Array;

export function zeroTraffic(): TrafficCounters {
  return { sentIntra: 0, sentInter: 0, recvIntra: 0, recvInter: 0, local: 0 };
}

function zeroStats(): GroupStats {
  const z = (): KindStats => ({ calls: 0, sent: 0, recv: 0, sentInter: 0, recvInter: 0 });
  return { allToAllV: z(), allGather: z(), allReduce: z(), broadcast: z() };
}

function elemTypeOf(a: Reducible): 'f32' | 'f64' | 'i32' | 'i64' {
  if (a instanceof Float32Array) return 'f32';
  if (a instanceof Float64Array) return 'f64';
  if (a instanceof Int32Array) return 'i32';
  if (a instanceof BigInt64Array) return 'i64';
  throw new EmbshardError('UNSUPPORTED_DTYPE', 'allReduce: data must be a Float32Array, Float64Array, Int32Array or BigInt64Array');
}

function knownBytes(counts: ArrayLike<number> | undefined, n: number, bpe: number, what: string): Float64Array | undefined {
  if (counts === undefined) return undefined;
  if (typeof counts !== 'object' || counts === null || typeof counts.length !== 'number')
    throw new EmbshardError('INVALID_ARGUMENT', `${what}: recvCounts must be an array of element counts, one per rank`);
  if (counts.length !== n) throw new EmbshardError('LENGTH_MISMATCH', `${what}: recvCounts has ${counts.length} entries; the group has ${n} ranks`);
  const out = new Float64Array(n);
  for (let p = 0; p < n; p++) {
    const c = counts[p]!;
    if (!Number.isSafeInteger(c) || c < 0) throw new EmbshardError('INVALID_ARGUMENT', `${what}: recvCounts[${p}] = ${c} is not a non-negative integer`);
    out[p] = c * bpe;
  }
  return out;
}

function isCommArray(a: unknown): a is CommArray {
  return ArrayBuffer.isView(a) && !(a instanceof DataView);
}

/** Throws unless `a` is a typed array over an ArrayBuffer (the transports do not take shared memory). */
function checkCommArray(a: unknown, what: string): asserts a is CommArray {
  if (!isCommArray(a)) throw new EmbshardError('INVALID_ARGUMENT', `${what} must be a typed array`);
  if (typeof SharedArrayBuffer === 'function' && a.buffer instanceof SharedArrayBuffer)
    throw new EmbshardError('INVALID_ARGUMENT', `${what} must be a typed array over an ArrayBuffer, not a SharedArrayBuffer`);
}

/**
 * Buffers that pending collectives of this process read or write (calls per buffer), and the releases
 * (ProcessGroup.release) waiting for them to settle: a pooled buffer must not go back to the pool while a
 * transport still touches it.
 */
const busy = new Map<ArrayBufferLike, number>();
const releaseLater = new Map<ArrayBufferLike, { addon: GroupAddon; arrays: (CommArray | ArrayBuffer)[] }>();

/** Marks `array`'s buffer busy until `p` settles; a release asked for meanwhile runs then (if `p` succeeded). */
function using<T>(array: CommArray, p: Promise<T>): Promise<T> {
  const buf = array.buffer;
  busy.set(buf, (busy.get(buf) ?? 0) + 1);
  const done = (ok: boolean): void => {
    const left = busy.get(buf)! - 1;
    if (left > 0) return void busy.set(buf, left);
    busy.delete(buf);
    const later = releaseLater.get(buf);
    releaseLater.delete(buf);
    // after a failure the transport may hold on to the buffer (a request left in flight): never pooled again
    if (later && ok) later.addon.releaseBuffers(...later.arrays);
  };
  return p.then(
    (v) => (done(true), v),
    (e: unknown) => {
      done(false);
      throw e;
    },
  );
}

function sameType<T extends CommArray>(like: T, buf: ArrayBuffer): T {
  const Ctor = like.constructor as new (b: ArrayBuffer) => T;
  return new Ctor(buf);
}

/** One rank's handle on a process group. */
export class ProcessGroup {
  readonly rank: number;
  readonly size: number;
  /** Ranks per node: node of rank r = ⌊r / ranksPerNode⌋. */
  readonly ranksPerNode: number;
  readonly kind: 'inprocess' | 'mpi' | 'nccl';
  /** NCCL groups: the CUDA device of this rank's communicator (allReduceDevice takes buffers on it). */
  readonly cudaDevice: number | undefined;
  /** Default timeout of every collective, in ms. */
  timeoutMs: number;
  /** Payload bytes moved by this rank since creation (count exchanges excluded). */
  readonly traffic: TrafficCounters = zeroTraffic();
  private readonly perKind: GroupStats = zeroStats();
  /**
   * Time this rank's collectives were in flight, and the part its caller was blocked on them (exposed);
   * read it with commTime(). Collectives started inside CommClock.hidden() count as overlapped.
   */
  readonly clock = new CommClock();
  private closed = false;

  /** @internal use the create* functions; `addon` is the addon that made `native` (its buffers go back there). */
  constructor(
    private readonly native: NativeGroup,
    options: GroupOptions = {},
    private readonly addon: GroupAddon = loadAddon() as GroupAddon,
    cudaDevice?: number,
  ) {
    this.cudaDevice = cudaDevice;
    this.rank = native.rank;
    this.size = native.size;
    this.ranksPerNode = native.ranksPerNode;
    this.kind = native.kind;
    this.timeoutMs = checkTimeout(options.timeoutMs ?? 60_000, 'timeoutMs');
  }

  nodeOf(rank: number): number {
    return Math.floor(rank / this.ranksPerNode);
  }

  private timeout(opts: CollectiveOptions | undefined): number {
    return opts?.timeoutMs === undefined ? this.timeoutMs : checkTimeout(opts.timeoutMs, 'timeoutMs');
  }

  private live(): NativeGroup {
    if (this.closed) throw new EmbshardError('COMM_FAILED', `rank ${this.rank}: the process group is closed`);
    return this.native;
  }

  private count(kind: CollectiveKind, peer: number, bytes: number, dir: 'sent' | 'recv', opts?: CollectiveOptions): void {
    if (bytes === 0 || opts?.uncounted) return;
    const extra = opts?.counters;
    if (peer === this.rank) {
      if (dir === 'sent') {
        this.traffic.local += bytes;
        if (extra) extra.local += bytes;
      }
      return;
    }
    const k = this.perKind[kind];
    k[dir] += bytes;
    const field = this.nodeOf(peer) === this.nodeOf(this.rank) ? (dir === 'sent' ? 'sentIntra' : 'recvIntra') : dir === 'sent' ? 'sentInter' : 'recvInter';
    this.traffic[field] += bytes;
    if (extra) extra[field] += bytes;
    if (field === 'sentInter' || field === 'recvInter') k[dir === 'sent' ? 'sentInter' : 'recvInter'] += bytes;
  }

  /**
   * Payload bytes this rank sent to and received from other ranks since the group was created, per
   * collective kind, with the part that crossed nodes (a copy; count exchanges and `uncounted` calls are
   * left out of the bytes, not of `calls`).
   */
  stats(): GroupStats {
    const out = zeroStats();
    for (const k of COLLECTIVE_KINDS) out[k] = { ...this.perKind[k] };
    return out;
  }

  /** Milliseconds of collectives since the group was created: in flight (total) and blocking the caller (exposed). */
  commTime(): CommTime {
    return this.clock.read();
  }

  /**
   * All-to-all-v: sends sendCounts[p] elements of `send` (consecutive, in rank order) to every rank p and
   * returns what every rank sent here, concatenated in rank order, as the same typed array type, with the
   * element counts per source rank. Two phases: counts, then data.
   */
  async allToAllV<T extends CommArray>(send: T, sendCounts: ArrayLike<number>, opts?: CollectiveOptions): Promise<{ data: T; counts: number[] }> {
    const g = this.live();
    checkOptions(opts, COLLECTIVE_FIELDS, 'allToAllV');
    checkCommArray(send, 'allToAllV: send');
    if (typeof sendCounts !== 'object' || sendCounts === null || typeof sendCounts.length !== 'number')
      throw new EmbshardError('INVALID_ARGUMENT', 'allToAllV: sendCounts must be an array of element counts, one per rank');
    if (sendCounts.length !== this.size)
      throw new EmbshardError('LENGTH_MISMATCH', `allToAllV: sendCounts has ${sendCounts.length} entries; the group has ${this.size} ranks`);
    const bpe = send.BYTES_PER_ELEMENT;
    const bytes = new Float64Array(this.size);
    let total = 0;
    for (let p = 0; p < this.size; p++) {
      const c = sendCounts[p]!;
      if (!Number.isSafeInteger(c) || c < 0)
        throw new EmbshardError('INVALID_ARGUMENT', `allToAllV: sendCounts[${p}] = ${c} is not a non-negative integer`);
      bytes[p] = c * bpe;
      total += c;
    }
    if (total !== send.length)
      throw new EmbshardError('LENGTH_MISMATCH', `allToAllV: sendCounts add up to ${total} elements but send holds ${send.length}`);
    const r = await this.clock.track(using(send, g.allToAllV(send, bytes, this.timeout(opts), knownBytes(opts?.recvCounts, this.size, bpe, 'allToAllV'))));
    this.perKind.allToAllV.calls++;
    const counts: number[] = [];
    for (let p = 0; p < this.size; p++) {
      this.count('allToAllV', p, bytes[p]!, 'sent', opts);
      this.count('allToAllV', p, r.counts[p]!, 'recv', opts);
      if (r.counts[p]! % bpe !== 0)
        throw new EmbshardError('COMM_FAILED', `allToAllV: rank ${p} sent ${r.counts[p]} bytes, not whole ${bpe}-byte elements`);
      counts.push(r.counts[p]! / bpe);
    }
    return { data: sameType(send, r.data), counts };
  }

  /** All-gather-v: every rank's `send` (sizes may differ), concatenated in rank order, with the counts. */
  async allGather<T extends CommArray>(send: T, opts?: CollectiveOptions): Promise<{ data: T; counts: number[] }> {
    const g = this.live();
    checkOptions(opts, COLLECTIVE_FIELDS, 'allGather');
    checkCommArray(send, 'allGather: send');
    const bpe = send.BYTES_PER_ELEMENT;
    const r = await this.clock.track(using(send, g.allGather(send, this.timeout(opts), knownBytes(opts?.recvCounts, this.size, bpe, 'allGather'))));
    this.perKind.allGather.calls++;
    const counts: number[] = [];
    for (let p = 0; p < this.size; p++) {
      // an all-gather has no self message
      if (p !== this.rank) {
        this.count('allGather', p, send.byteLength, 'sent', opts);
        this.count('allGather', p, r.counts[p]!, 'recv', opts);
      }
      if (r.counts[p]! % bpe !== 0)
        throw new EmbshardError('COMM_FAILED', `allGather: rank ${p} sent ${r.counts[p]} bytes, not whole ${bpe}-byte elements`);
      counts.push(r.counts[p]! / bpe);
    }
    return { data: sameType(send, r.data), counts };
  }

  /**
   * All-reduce in place (and returns `data`); sizes must agree (COMM_FAILED otherwise). By default the
   * transport's bandwidth-optimal collective: every rank holds the same result, summed in an order the
   * transport picks. Counted as reduce-scatter + all-gather: chunk p (elements ⌊p·n/W⌋ … ⌊(p+1)·n/W⌋) goes
   * to rank p and each rank's reduced chunk to every peer, 2(W−1)/W × the buffer each way. With
   * `{ deterministic: true }` every rank gathers every whole buffer and sums in rank order (bitwise equal
   * across transports; (W−1)× the buffer each way).
   */
  async allReduce<T extends Reducible>(data: T, op: ReduceOp = 'sum', opts?: AllReduceOptions): Promise<T> {
    const g = this.live();
    checkOptions(opts, ALL_REDUCE_FIELDS, 'allReduce');
    if (op !== 'sum' && op !== 'max' && op !== 'min')
      throw new EmbshardError('INVALID_ARGUMENT', `allReduce: op must be 'sum', 'max' or 'min' (got '${String(op)}')`);
    const deterministic = opts?.deterministic ?? false;
    if (typeof deterministic !== 'boolean') throw new EmbshardError('INVALID_ARGUMENT', 'allReduce: deterministic must be a boolean');
    const elemType = elemTypeOf(data);
    checkCommArray(data, 'allReduce: data');
    await this.clock.track(using(data, g.allReduce(data, elemType, op, this.timeout(opts), deterministic)));
    this.perKind.allReduce.calls++;
    this.countAllReduce(data.length, data.BYTES_PER_ELEMENT, deterministic, opts);
    return data;
  }

  /** The bytes of an all-reduce of n elements (see allReduce). */
  private countAllReduce(n: number, bpe: number, deterministic: boolean, opts: CollectiveOptions | undefined): void {
    const W = this.size;
    const chunkBytes = (p: number): number => (Math.floor((n * (p + 1)) / W) - Math.floor((n * p) / W)) * bpe;
    for (let p = 0; p < W; p++) {
      if (p === this.rank) continue;
      const out = deterministic ? n * bpe : chunkBytes(p) + chunkBytes(this.rank);
      const back = deterministic ? n * bpe : chunkBytes(this.rank) + chunkBytes(p);
      this.count('allReduce', p, out, 'sent', opts);
      this.count('allReduce', p, back, 'recv', opts);
    }
  }

  /**
   * The default all-reduce in place on a buffer in device memory (a GPU dense model's deviceGrads(), or a
   * DeviceArray of f32 / f64 / i32 / i64 values; u16 ones are UNSUPPORTED_DTYPE), with
   * no host staging: NCCL groups only (others reject with BACKEND_UNAVAILABLE), the buffer on the group's
   * device. Counted as allReduce, like allReduce() of the same size, and it matches a peer's allReduce().
   */
  async allReduceDevice(buffer: DeviceArray | DeviceBuffer, op: ReduceOp = 'sum', opts?: Omit<CollectiveOptions, 'recvCounts'>): Promise<void> {
    const g = this.live();
    checkOptions(opts, NO_COUNTS_FIELDS, 'allReduceDevice');
    if (op !== 'sum' && op !== 'max' && op !== 'min')
      throw new EmbshardError('INVALID_ARGUMENT', `allReduceDevice: op must be 'sum', 'max' or 'min' (got '${String(op)}')`);
    if (typeof g.allReduceDevice !== 'function') throw new EmbshardError('BACKEND_UNAVAILABLE', 'allReduceDevice: this addon has no device collectives');
    const b = this.deviceSide('allReduceDevice', buffer, 'buffer');
    await this.clock.track(g.allReduceDevice(b.native, op, this.timeout(opts)));
    this.perKind.allReduce.calls++;
    this.countAllReduce(b.count, deviceElemBytes(b.type), false, opts);
  }

  /**
   * All-to-all-v between buffers in this rank's GPU memory, with no host staging (NCCL groups only;
   * others reject with BACKEND_UNAVAILABLE): sends sendCounts[p] elements of `send` (consecutive from its
   * start, in rank order) to every rank p and writes what every rank sends here into `recv` from its
   * start, in rank order; resolves to the element counts per source rank. Both buffers on the group's
   * device, of one element type; `recv` must hold what the peers send (with `recvCounts` checked before
   * anything moves; otherwise LENGTH_MISMATCH here once the counts arrive, and the group breaks). Counted
   * as allToAllV.
   */
  async allToAllDevice(send: DeviceArray | DeviceBuffer, sendCounts: ArrayLike<number>, recv: DeviceArray | DeviceBuffer, opts?: CollectiveOptions): Promise<{ counts: number[] }> {
    checkOptions(opts, COLLECTIVE_FIELDS, 'allToAllDevice');
    const g = this.deviceGroup('allToAllDevice');
    const [s, r, bpe] = this.devicePair('allToAllDevice', send, recv);
    if (sendCounts.length !== this.size)
      throw new EmbshardError('LENGTH_MISMATCH', `allToAllDevice: sendCounts has ${sendCounts.length} entries; the group has ${this.size} ranks`);
    const bytes = new Float64Array(this.size);
    for (let p = 0; p < this.size; p++) {
      const c = sendCounts[p]!;
      if (!Number.isSafeInteger(c) || c < 0) throw new EmbshardError('INVALID_ARGUMENT', `allToAllDevice: sendCounts[${p}] = ${c} is not a non-negative integer`);
      bytes[p] = c * bpe;
    }
    const recvBytes = await this.clock.track(g.allToAllDevice(s, bytes, r, this.timeout(opts), knownBytes(opts?.recvCounts, this.size, bpe, 'allToAllDevice')));
    this.perKind.allToAllV.calls++;
    const counts: number[] = [];
    for (let p = 0; p < this.size; p++) {
      this.count('allToAllV', p, bytes[p]!, 'sent', opts);
      this.count('allToAllV', p, recvBytes[p]!, 'recv', opts);
      counts.push(recvBytes[p]! / bpe);
    }
    return { counts };
  }

  /**
   * All-gather-v between buffers in this rank's GPU memory (NCCL groups only): the first `count` elements
   * of every rank's `send`, concatenated in rank order into `recv` from its start; resolves to the element
   * counts per rank. The same rules as allToAllDevice; counted as allGather.
   */
  async allGatherDevice(send: DeviceArray | DeviceBuffer, count: number, recv: DeviceArray | DeviceBuffer, opts?: CollectiveOptions): Promise<{ counts: number[] }> {
    checkOptions(opts, COLLECTIVE_FIELDS, 'allGatherDevice');
    const g = this.deviceGroup('allGatherDevice');
    const [s, r, bpe] = this.devicePair('allGatherDevice', send, recv);
    if (!Number.isSafeInteger(count) || count < 0) throw new EmbshardError('INVALID_ARGUMENT', `allGatherDevice: count must be a non-negative integer (got ${String(count)})`);
    const recvBytes = await this.clock.track(g.allGatherDevice(s, count * bpe, r, this.timeout(opts), knownBytes(opts?.recvCounts, this.size, bpe, 'allGatherDevice')));
    this.perKind.allGather.calls++;
    const counts: number[] = [];
    for (let p = 0; p < this.size; p++) {
      if (p !== this.rank) {
        this.count('allGather', p, count * bpe, 'sent', opts);
        this.count('allGather', p, recvBytes[p]!, 'recv', opts);
      }
      counts.push(recvBytes[p]! / bpe);
    }
    return { counts };
  }

  /** The native group, when it runs device collectives (BACKEND_UNAVAILABLE otherwise). */
  private deviceGroup(what: string): NativeGroup {
    const g = this.live();
    if (this.kind !== 'nccl' || typeof g.allToAllDevice !== 'function')
      throw new EmbshardError('BACKEND_UNAVAILABLE', `${what} needs a group whose transport reads device memory (NCCL); this is a ${this.kind} group`);
    return g;
  }

  /** One buffer of a device collective: its native buffer, element type, elements and device, checked. */
  private deviceSide(what: string, b: DeviceArray | DeviceBuffer, name: string): { native: object; type: DeviceElemType; count: number; device: number } {
    if (b instanceof DeviceArray) {
      if (b.freed) throw new EmbshardError('INVALID_ARGUMENT', `${what}: ${name} was freed`);
      return { native: b.native, type: b.type, count: b.length, device: b.native.device };
    }
    if (typeof b !== 'object' || b === null || !('handle' in b)) throw new EmbshardError('INVALID_ARGUMENT', `${what}: ${name} must be a DeviceArray or a DeviceBuffer`);
    return { native: b, type: 'f32', count: b.count, device: b.device };
  }

  private onGroupDevice(what: string, device: number, name: string): void {
    if (device !== this.cudaDevice) throw new EmbshardError('INVALID_ARGUMENT', `${what}: ${name} is on cuda:${device}, the group's communicator on cuda:${this.cudaDevice}`);
  }

  /** The native buffers of a device collective and their element bytes, checked: one type, the group's device. */
  private devicePair(what: string, send: DeviceArray | DeviceBuffer, recv: DeviceArray | DeviceBuffer): [object, object, number] {
    const s = this.deviceSide(what, send, 'send'), r = this.deviceSide(what, recv, 'recv');
    if (s.type !== r.type) throw new EmbshardError('INVALID_ARGUMENT', `${what}: send holds ${s.type}, recv ${r.type}`);
    this.onGroupDevice(what, s.device, 'send');
    this.onGroupDevice(what, r.device, 'recv');
    return [s.native, r.native, deviceElemBytes(s.type)];
  }

  /** Broadcast in place from `root` (and returns `data`); sizes must agree. */
  async broadcast<T extends CommArray>(data: T, root: number, opts?: CollectiveOptions): Promise<T> {
    const g = this.live();
    checkOptions(opts, NO_COUNTS_FIELDS, 'broadcast');
    checkCommArray(data, 'broadcast: data');
    if (!Number.isInteger(root) || root < 0 || root >= this.size)
      throw new EmbshardError('INVALID_ARGUMENT', `broadcast: root must be an integer in [0, ${this.size}) (got ${root})`);
    await this.clock.track(using(data, g.broadcast(data, root, this.timeout(opts))));
    this.perKind.broadcast.calls++;
    if (this.rank === root) for (let p = 0; p < this.size; p++) if (p !== root) this.count('broadcast', p, data.byteLength, 'sent', opts);
    if (this.rank !== root) this.count('broadcast', root, data.byteLength, 'recv', opts);
    return data;
  }

  async barrier(opts?: CollectiveOptions): Promise<void> {
    checkOptions(opts, NO_COUNTS_FIELDS, 'barrier');
    await this.clock.track(this.live().barrier(this.timeout(opts)));
  }

  /**
   * Hands the buffers of received results (allToAllV / allGather `data`) back for reuse by later
   * collectives, sparing fresh allocations and their page faults. Each buffer is detached: every view of
   * it reads as empty afterwards. A buffer that a pending collective still sends from or writes to is
   * released once that collective succeeds (never after a failure: the transport may still hold it).
   * Arrays that did not come from a collective are left alone.
   */
  release(...arrays: CommArray[]): void {
    const now: CommArray[] = [];
    for (const a of arrays) {
      const buf = ArrayBuffer.isView(a) ? a.buffer : (a as unknown as ArrayBuffer);
      if (!busy.has(buf)) {
        now.push(a);
        continue;
      }
      const later = releaseLater.get(buf) ?? { addon: this.addon, arrays: [] };
      later.arrays.push(a);
      releaseLater.set(buf, later);
    }
    if (now.length > 0) this.addon.releaseBuffers(...now);
  }

  /** MPI only: a plain MPI_Alltoallv of the same layout, for benchmarks; resolves to its seconds. */
  rawAllToAllV(send: CommArray, sendBytes: Float64Array, recv: CommArray, recvBytes: Float64Array): Promise<number> {
    return this.live().rawAllToAllV(send, sendBytes, recv, recvBytes);
  }

  /** MPI only: a plain MPI_Allreduce (sum, in place), for benchmarks; resolves to its seconds. */
  rawAllReduce(data: Float32Array): Promise<number> {
    return this.live().rawAllReduce(data);
  }

  /**
   * Leaves the group. Collectives still pending here fail; peers of an in-process group fail at once
   * (COMM_FAILED), MPI peers at their timeout.
   */
  close(reason = 'closed by its owner'): void {
    if (this.closed) return;
    this.closed = true;
    this.native.close(reason);
  }
}

function checkTimeout(t: number, what: string): number {
  if (typeof t !== 'number' || !Number.isFinite(t) || t <= 0)
    throw new EmbshardError('INVALID_ARGUMENT', `${what} must be a positive number of milliseconds (got ${String(t)})`);
  return t;
}

export interface InProcessOptions extends GroupOptions {
  /** Ranks per (modelled) node, for intra/inter-node accounting and node tiers (default: all ranks). */
  ranksPerNode?: number;
}

const INPROCESS_FIELDS = fieldsOf<InProcessOptions>({ timeoutMs: true, ranksPerNode: true });
const MPI_FIELDS = fieldsOf<GroupOptions>({ timeoutMs: true });
const NCCL_FIELDS = fieldsOf<NcclOptions>({ timeoutMs: true, bootstrap: true, device: true });

/** N ranks of one group as threads of this process (one process driving several devices; tests). */
export function createInProcessGroups(n: number, options: InProcessOptions = {}): ProcessGroup[] {
  if (!Number.isInteger(n) || n < 1) throw new EmbshardError('INVALID_ARGUMENT', `createInProcessGroups: size must be a positive integer (got ${n})`);
  rejectUnknownFields(options, INPROCESS_FIELDS, 'options');
  const rpn = options.ranksPerNode ?? n;
  if (!Number.isInteger(rpn) || rpn < 1 || n % rpn !== 0)
    throw new EmbshardError('INVALID_ARGUMENT', `createInProcessGroups: ranksPerNode must divide the size ${n} (got ${rpn})`);
  const addon = loadAddon() as GroupAddon;
  return addon.createInProcessGroups(n, rpn).map((g) => new ProcessGroup(g, options, addon));
}

/** True when this build has the MPI process group. */
export function mpiAvailable(): boolean {
  return (loadAddon() as GroupAddon).mpiAvailable;
}

/**
 * The MPI world group of this process (launched under mpirun). Initialises MPI on first use with
 * MPI_THREAD_MULTIPLE; every rank must call it. Ranks per node come from the shared-memory split
 * (EMBSHARD_RANKS_PER_NODE overrides it, to model several nodes on one machine).
 */
export async function createMpiGroup(options: GroupOptions = {}): Promise<ProcessGroup> {
  rejectUnknownFields(options, MPI_FIELDS, 'options');
  const addon = loadAddon() as GroupAddon;
  if (!addon.mpiAvailable)
    throw new EmbshardError('BACKEND_UNAVAILABLE', 'this embshard build has no MPI process group (install libopenmpi-dev and rebuild)');
  const timeout = checkTimeout(options.timeoutMs ?? 60_000, 'timeoutMs');
  const g = addon.createMpiGroup(timeout);
  await g.ready();
  return new ProcessGroup(g, options, addon);
}

/**
 * 'cuda:local' → the GPU of this rank's local rank on its node (`cuda:${rank mod ranksPerNode}`), so each
 * MPI rank of a node takes its own GPU; any other device string is returned as it is.
 */
export function localDevice(device: string, rank: number, ranksPerNode: number): string {
  return device === 'cuda:local' ? `cuda:${rank % ranksPerNode}` : device;
}

export interface NcclOptions extends GroupOptions {
  /** A group over the same ranks that carries NCCL's unique id from rank 0 (MPI or in-process). */
  bootstrap: ProcessGroup;
  /** CUDA device of this rank (default: rank mod ranksPerNode). */
  device?: number;
}

/** The CUDA addon, through the child-process probe (lib/backends.ts), when it was built with NCCL. */
function loadNcclAddon(): GroupAddon {
  const a: Partial<GroupAddon> = probedCudaAddon('createNcclGroup');
  if (!a.ncclAvailable || !a.createNcclGroup || !a.ncclUniqueId || !a.releaseBuffers)
    throw new EmbshardError('BACKEND_UNAVAILABLE', 'createNcclGroup: the CUDA addon was built without NCCL (set NCCL_ROOT when building)');
  return a as GroupAddon;
}

/**
 * An NCCL group, one GPU per rank: rank 0 creates NCCL's unique id, `bootstrap` broadcasts it, and every
 * rank joins the communicator on its device. Collectives stage host typed arrays through device memory;
 * allReduceDevice reduces a device buffer in place (the Trainer's path for a dense model on that GPU).
 */
export async function createNcclGroup(options: NcclOptions): Promise<ProcessGroup> {
  rejectUnknownFields(options, NCCL_FIELDS, 'options');
  const boot = options.bootstrap;
  if (!(boot instanceof ProcessGroup)) throw new EmbshardError('INVALID_ARGUMENT', 'createNcclGroup: bootstrap must be a ProcessGroup');
  const device = options.device ?? boot.rank % boot.ranksPerNode;
  if (!Number.isInteger(device) || device < 0) throw new EmbshardError('INVALID_ARGUMENT', `createNcclGroup: device must be a non-negative integer (got ${device})`);
  const timeout = checkTimeout(options.timeoutMs ?? 60_000, 'timeoutMs');
  // Every rank loads the addon first, so a rank without NCCL fails the broadcast's peers by timeout
  // rather than leaving them waiting for ever.
  let addon: GroupAddon | undefined;
  let loadError: unknown;
  try {
    addon = loadNcclAddon();
  } catch (e) {
    loadError = e;
  }
  const id = boot.rank === 0 && addon ? addon.ncclUniqueId!() : new Uint8Array(128);
  const ok = new Int32Array([addon ? 1 : 0]);
  await boot.allReduce(ok, 'min', { timeoutMs: timeout });
  if (!addon) throw loadError;
  if (ok[0] !== 1) throw new EmbshardError('BACKEND_UNAVAILABLE', 'createNcclGroup: some rank cannot load the NCCL addon');
  await boot.broadcast(id, 0, { timeoutMs: timeout });
  const g = addon.createNcclGroup!(id, boot.rank, boot.size, boot.ranksPerNode, device, timeout);
  await g.ready();
  return new ProcessGroup(g, options, addon, device);
}
