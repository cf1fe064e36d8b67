// topology.ts — cluster topologies: the DGX presets, a `cpu` preset measured on this machine, and
// validation of custom topologies (errors name the field).
import { totalmem } from 'node:os';
import { EmbshardError, type ErrorCode } from '../errors.js';
import { fieldsOf, rejectUnknownFields } from '../fields.js';
import { CPU_MEASURE_BYTES, CPU_MEASURE_ROW_FLOATS, DEFAULT_MEMORY_FRACTION, HARDWARE_PRESETS } from './constants.js';
import { shown } from '../shown.js';
import type { Topology } from './types.js';

/** The most ranks a topology may have: the planner keeps per-rank arrays and loops over ranks. */
export const MAX_WORLD_SIZE = 65536;

export type PresetName = keyof typeof HARDWARE_PRESETS | 'cpu';
export const PRESET_NAMES: readonly PresetName[] = ['dgx-h100', 'dgx-h200', 'dgx-a100', 'cpu'];

function bad(code: ErrorCode, path: string, msg: string): never {
  throw new EmbshardError(code, `${path}: ${msg}`, { path });
}

function positive(v: unknown, path: string, code: ErrorCode, integer = false): number {
  const ok = typeof v === 'number' && Number.isFinite(v) && v > 0 && (!integer || Number.isSafeInteger(v));
  if (!ok) bad(code, path, `must be a positive ${integer ? 'integer' : 'number'} (got ${shown(v)})`);
  return v as number;
}

/** Validates a topology object (JSON-like); INVALID_CONFIG (or `code`) naming the field. */
export function normalizeTopology(v: unknown, path = 'topology', code: ErrorCode = 'INVALID_CONFIG'): Topology {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) bad(code, path, 'must be an object');
  const o = v as Record<string, unknown>;
  const name = o.name ?? 'custom';
  if (typeof name !== 'string' || name.length === 0) bad(code, `${path}.name`, 'must be a non-empty string');
  const worldSize = positive(o.worldSize, `${path}.worldSize`, code, true);
  if (worldSize > MAX_WORLD_SIZE) bad(code, `${path}.worldSize`, `must be at most ${MAX_WORLD_SIZE} ranks (got ${worldSize})`);
  const ranksPerNode = positive(o.ranksPerNode, `${path}.ranksPerNode`, code, true);
  if (worldSize % ranksPerNode !== 0)
    bad(code, `${path}.ranksPerNode`, `must divide worldSize (${worldSize} ranks, ${ranksPerNode} per node)`);
  const deviceMemoryBytes = positive(o.deviceMemoryBytes, `${path}.deviceMemoryBytes`, code);
  const memoryLimitBytes = positive(o.memoryLimitBytes ?? deviceMemoryBytes * DEFAULT_MEMORY_FRACTION, `${path}.memoryLimitBytes`, code);
  if (memoryLimitBytes > deviceMemoryBytes) bad(code, `${path}.memoryLimitBytes`, `exceeds deviceMemoryBytes (${deviceMemoryBytes})`);
  const hbmBandwidth = positive(o.hbmBandwidth, `${path}.hbmBandwidth`, code);
  const intraNodeBandwidth = positive(o.intraNodeBandwidth, `${path}.intraNodeBandwidth`, code);
  const interNodeBandwidth = positive(o.interNodeBandwidth, `${path}.interNodeBandwidth`, code);
  const known = ['name', 'worldSize', 'ranksPerNode', 'deviceMemoryBytes', 'memoryLimitBytes', 'hbmBandwidth', 'intraNodeBandwidth', 'interNodeBandwidth'];
  rejectUnknownFields(o, known, path, code);
  return Object.freeze({ name, worldSize, ranksPerNode, deviceMemoryBytes, memoryLimitBytes, hbmBandwidth, intraNodeBandwidth, interNodeBandwidth });
}

export interface TopologyOptions {
  worldSize: number;
  /** default: the preset's (8 for DGX), capped at worldSize */
  ranksPerNode?: number;
  /** share of device memory for embeddings (default 0.75, see constants.ts) */
  memoryFraction?: number;
}

let cpuMeasured: { seq: number; gather: number } | undefined;

/**
 * Measures this machine once per process: sequential copy bandwidth (TypedArray copyWithin over 64 MiB,
 * counted as read + write) and random row-gather bandwidth (64-float rows copied from random positions).
 * Used as the `cpu` preset's HBM (gather) and intra-node (copy: ranks on one host talk through shared
 * memory) bandwidths.
 */
export function measureCpu(): { seqBandwidth: number; gatherBandwidth: number } {
  if (!cpuMeasured) {
    const n = CPU_MEASURE_BYTES / 4;
    const a = new Float32Array(n);
    for (let i = 0; i < n; i += 1024) a[i] = i;
    let best = Infinity;
    for (let rep = 0; rep < 3; rep++) {
      const t0 = process.hrtime.bigint();
      a.copyWithin(0, n / 2, n);
      best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
    }
    const seq = (2 * (n / 2) * 4) / best;
    const R = CPU_MEASURE_ROW_FLOATS;
    const rows = Math.floor(n / R);
    const out = new Float32Array(R * 4096);
    let s = 0x9e3779b9 >>> 0;
    let bestG = Infinity;
    for (let rep = 0; rep < 3; rep++) {
      const t0 = process.hrtime.bigint();
      for (let k = 0; k < 4096; k++) {
        s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
        const r = s % rows;
        out.set(a.subarray(r * R, r * R + R), k * R);
      }
      bestG = Math.min(bestG, Number(process.hrtime.bigint() - t0) / 1e9);
    }
    cpuMeasured = { seq, gather: (4096 * R * 4 * 2) / bestG };
  }
  return { seqBandwidth: cpuMeasured.seq, gatherBandwidth: cpuMeasured.gather };
}

const PRESET_OPTION_FIELDS = fieldsOf<TopologyOptions>({ worldSize: true, ranksPerNode: true, memoryFraction: true });

/** A preset topology for `worldSize` ranks. `cpu` is measured on this machine (one node, host memory). */
export function topologyPreset(preset: string, opts: TopologyOptions): Topology {
  rejectUnknownFields(opts, PRESET_OPTION_FIELDS);
  const worldSize = positive(opts.worldSize, 'worldSize', 'INVALID_CONFIG', true);
  if (worldSize > MAX_WORLD_SIZE) bad('INVALID_CONFIG', 'worldSize', `must be at most ${MAX_WORLD_SIZE} ranks (got ${worldSize})`);
  const fraction = opts.memoryFraction ?? DEFAULT_MEMORY_FRACTION;
  if (!(fraction > 0 && fraction <= 1)) bad('INVALID_CONFIG', 'memoryFraction', `must be in (0, 1] (got ${fraction})`);
  if (preset === 'cpu') {
    const m = measureCpu();
    const rpn = opts.ranksPerNode ?? worldSize;
    const mem = totalmem() / worldSize;
    return normalizeTopology({
      name: 'cpu',
      worldSize,
      ranksPerNode: rpn,
      deviceMemoryBytes: mem,
      memoryLimitBytes: mem * fraction,
      hbmBandwidth: m.gatherBandwidth / worldSize,
      intraNodeBandwidth: m.seqBandwidth / worldSize,
      interNodeBandwidth: m.seqBandwidth / worldSize,
    });
  }
  const p = (HARDWARE_PRESETS as Record<string, (typeof HARDWARE_PRESETS)['dgx-h100']>)[preset];
  if (!p) bad('INVALID_CONFIG', 'preset', `unknown preset '${preset}' (known: ${PRESET_NAMES.join(', ')})`);
  if (opts.ranksPerNode === undefined && worldSize > p.ranksPerNode && worldSize % p.ranksPerNode !== 0) {
    const fits = Array.from({ length: p.ranksPerNode - 1 }, (_, i) => p.ranksPerNode - 1 - i).filter((d) => d > 1 && worldSize % d === 0);
    bad('INVALID_CONFIG', 'worldSize', `${worldSize} ranks do not fill whole ${preset} nodes of ${p.ranksPerNode} GPUs; give ranksPerNode (--ranks-per-node)${fits.length ? `, e.g. ${fits.join(' or ')}` : ''}`);
  }
  return normalizeTopology({
    name: p.name,
    worldSize,
    ranksPerNode: opts.ranksPerNode ?? Math.min(p.ranksPerNode, worldSize),
    deviceMemoryBytes: p.deviceMemoryBytes,
    memoryLimitBytes: p.deviceMemoryBytes * fraction,
    hbmBandwidth: p.hbmBandwidth,
    intraNodeBandwidth: p.intraNodeBandwidth,
    interNodeBandwidth: p.interNodeBandwidth,
  });
}

export function nodeOf(topo: Topology, rank: number): number {
  return Math.floor(rank / topo.ranksPerNode);
}
export function numNodes(topo: Topology): number {
  return topo.worldSize / topo.ranksPerNode;
}
/** Whether the hierarchical rb / ub protocol applies by default: several nodes of more than one rank each. */
export function hierarchicalDefault(topo: Topology): boolean {
  return topo.ranksPerNode > 1 && numNodes(topo) > 1;
}
