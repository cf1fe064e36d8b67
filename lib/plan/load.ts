// load.ts — per-rank byte metrics of one training step, split by phase (forward input all-to-all, forward
// output all-to-all, backward all-to-all, gradient all-gathers), direction and link (intra / inter node),
// plus HBM bytes of lookups and updates. Filled exactly by measureTraffic and in expectation by the cost
// model; the simulator turns it into time.
import type { DirectionCounters, RankCounters, Topology } from './types.js';

/** Communication phases, in step order. */
export const COMM_PHASES = ['fwdIn', 'fwdOut', 'bwd', 'sync'] as const;
export type CommPhase = (typeof COMM_PHASES)[number];
export const FWD_IN = 0, FWD_OUT = 1, BWD = 2, SYNC = 3;

/** Per phase: sent intra, sent inter, recv intra, recv inter, local (to self). */
export const SENT_INTRA = 0, SENT_INTER = 1, RECV_INTRA = 2, RECV_INTER = 3, LOCAL = 4;
const PER_PHASE = 5;
/** HBM bytes (raw) and width-penalised bytes of the forward lookups and the backward updates. */
export const HBM_FWD = 20, HBM_BWD = 21, EFF_FWD = 22, EFF_BWD = 23;
export const NUM_METRICS = 24;

export function metric(phase: number, k: number): number {
  return phase * PER_PHASE + k;
}

export class Load {
  readonly W: number;
  readonly rpn: number;
  readonly data: Float64Array;

  constructor(topo: Pick<Topology, 'worldSize' | 'ranksPerNode'>) {
    this.W = topo.worldSize;
    this.rpn = topo.ranksPerNode;
    this.data = new Float64Array(NUM_METRICS * this.W);
  }

  get(m: number, r: number): number {
    return this.data[m * this.W + r]!;
  }
  add(m: number, r: number, v: number): void {
    this.data[m * this.W + r] += v;
  }

  /** this += sign × other */
  addLoad(other: Load, sign = 1): void {
    const a = this.data, b = other.data;
    if (sign === 1) for (let i = 0; i < a.length; i++) a[i] += b[i]!;
    else for (let i = 0; i < a.length; i++) a[i] += sign * b[i]!;
  }

  clear(): void {
    this.data.fill(0);
  }

  clone(): Load {
    const l = new Load({ worldSize: this.W, ranksPerNode: this.rpn });
    l.data.set(this.data);
    return l;
  }

  /** One message of `bytes` from rank `from` to rank `to` in `phase`. */
  msg(phase: number, from: number, to: number, bytes: number): void {
    if (bytes === 0) return;
    const W = this.W, d = this.data, base = phase * PER_PHASE * W;
    if (from === to) d[base + LOCAL * W + from] += bytes;
    else if (Math.floor(from / this.rpn) === Math.floor(to / this.rpn)) {
      d[base + SENT_INTRA * W + from] += bytes;
      d[base + RECV_INTRA * W + to] += bytes;
    } else {
      d[base + SENT_INTER * W + from] += bytes;
      d[base + RECV_INTER * W + to] += bytes;
    }
  }

  /**
   * Every rank r sends x[d] bytes to every destination d (x[d] is the same for all senders), d's own share
   * counted as local. With `reverse`, d sends x[d] to every rank instead. With `noSelf`, no local part
   * (an all-gather: x[r] is what r sends to each other rank, i.e. call it with reverse = true).
   */
  allToOne(phase: number, x: Float64Array, reverse = false, noSelf = false): void {
    const W = this.W, rpn = this.rpn, d = this.data, base = phase * PER_PHASE * W;
    const nodes = W / rpn;
    const nodeSum = new Float64Array(nodes);
    let total = 0;
    for (let r = 0; r < W; r++) {
      nodeSum[Math.floor(r / rpn)] += x[r]!;
      total += x[r]!;
    }
    const [toIntra, toInter, fromIntra, fromInter] = reverse ? [SENT_INTRA, SENT_INTER, RECV_INTRA, RECV_INTER] : [RECV_INTRA, RECV_INTER, SENT_INTRA, SENT_INTER];
    for (let r = 0; r < W; r++) {
      const v = x[r]!;
      const ns = nodeSum[Math.floor(r / rpn)]!;
      // r as the owner: exchanges v with each of the other ranks
      d[base + toIntra * W + r] += v * (rpn - 1);
      d[base + toInter * W + r] += v * (W - rpn);
      if (!noSelf) d[base + LOCAL * W + r] += v;
      // r as a peer: exchanges x[d] with each owner d ≠ r
      d[base + fromIntra * W + r] += ns - v;
      d[base + fromInter * W + r] += total - ns;
    }
  }

  /** Wire-protocol counters of rank r: forward = input + output all-to-alls, backward = gradients + all-gathers. */
  counters(r: number): RankCounters {
    const dir = (phases: number[]): DirectionCounters => {
      const s = (k: number) => phases.reduce((acc, p) => acc + this.get(metric(p, k), r), 0);
      return { sentIntra: s(SENT_INTRA), sentInter: s(SENT_INTER), recvIntra: s(RECV_INTRA), recvInter: s(RECV_INTER), local: s(LOCAL) };
    };
    return { forward: dir([FWD_IN, FWD_OUT]), backward: dir([BWD, SYNC]) };
  }

  /** Σ over ranks of bytes sent to other ranks (intra + inter), all phases. */
  totalSent(): { intra: number; inter: number } {
    let intra = 0, inter = 0;
    for (let p = 0; p < COMM_PHASES.length; p++)
      for (let r = 0; r < this.W; r++) {
        intra += this.get(metric(p, SENT_INTRA), r);
        inter += this.get(metric(p, SENT_INTER), r);
      }
    return { intra, inter };
  }
}
