// load.test.ts — HeraldEmbeddingCollection.load at 2 in-process ranks. Oracles: EmbeddingCollection.load
// of the same checkpoint (every rank's gathered tables and optimizer state equal its rows and state
// bitwise, with its step count), one collection trained on from it (within 1e-5), and the Herald run that
// went on without the checkpoint: under random placement the loaded ranks train bitwise as that run (the
// same samples on the same ranks, each row's contributions summed alike); under Herald's allocation the
// empty caches place the next samples elsewhere, and the tables agree to rounding only. A checkpoint of
// other tables or of another optimizer is INVALID_CONFIG on every rank; a damaged one CHECKPOINT_CORRUPT on
// every rank, also when only one rank reads it damaged; the ranks stay in step for the next collective.
import { describe, it, expect } from 'vitest';
import { cpSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { JaggedBatch } from '../../lib/batch.js';
import { EmbeddingCollection } from '../../lib/collection.js';
import type { CollectionConfig, OptimizerConfig } from '../../lib/config.js';
import { HeraldEmbeddingCollection, type HeraldOptions } from '../../lib/herald/collection.js';
import type { Allocation } from '../../lib/herald/scheduler.js';
import { EmbshardError } from '../../lib/errors.js';
import { createInProcessGroups, type ProcessGroup } from '../../lib/sharded/group.js';
import { tempDir } from '../temp-dir.js';
// @ts-expect-error plain JS helper shared with the mpirun scripts
import * as S from './scenario.mjs';

const lib = { JaggedBatch };
const tmp = tempDir('herald-load');
const W = 2, B = 12;
let dirs = 0;

/** Training steps `from` … `to` − 1 of the scenario on every rank; returns each step's samples per rank. */
async function train(ranks: HeraldEmbeddingCollection[], from: number, to: number): Promise<Int32Array[][]> {
  const placed: Int32Array[][] = [];
  const P = ranks[0]!.pooledDim;
  for (let step = from; step < to; step++) {
    const global: JaggedBatch = S.globalBatch(lib, step, W * B);
    const locals = ranks.map((r) => r.assign(global));
    const outs = await Promise.all(ranks.map((r, i) => r.forward(locals[i]!)));
    await Promise.all(ranks.map((r, i) => r.backward(outs[i]!, { pooled: S.gradsFor(step, outs[i]!.samples, P) })));
    placed.push(outs.map((o) => Int32Array.from(o.samples)));
  }
  return placed;
}

/** One collection's steps `from` … `to` − 1 on the global batches. */
async function trainOne(ec: EmbeddingCollection, from: number, to: number): Promise<void> {
  for (let step = from; step < to; step++) {
    const global: JaggedBatch = S.globalBatch(lib, step, W * B);
    const out = await ec.forward(global);
    await ec.backward(out, { pooled: S.gradsFor(step, Int32Array.from({ length: W * B }, (_, i) => i), ec.pooledDim) });
  }
}

/** Every table's rows and state as gathered on every rank. */
async function gathered(ranks: HeraldEmbeddingCollection[], names: string[]) {
  const out: { weights: Float32Array; state: Float32Array }[][] = [];
  for (const n of names) out.push(await Promise.all(ranks.map((r) => r.gather(n))));
  return out;
}

function everyRank<T>(groups: ProcessGroup[], f: (g: ProcessGroup) => Promise<T>): Promise<PromiseSettledResult<T>[]> {
  return Promise.all(groups.map(async (g) => (await Promise.allSettled([f(g)]))[0]!));
}

function codes(rs: PromiseSettledResult<unknown>[]): string[] {
  return rs.map((r) => (r.status === 'rejected' ? (r.reason instanceof EmbshardError ? r.reason.code : `not typed: ${String(r.reason)}`) : 'loaded'));
}

function dispose(rs: PromiseSettledResult<HeraldEmbeddingCollection>[]): void {
  for (const r of rs) if (r.status === 'fulfilled') r.value.dispose();
}

/** A file named `name` somewhere under `dir`. */
function findFile(dir: string, name: string): string {
  for (const e of readdirSync(dir)) {
    const p = join(dir, e);
    if (statSync(p).isDirectory()) {
      try {
        return findFile(p, name);
      } catch {
        continue;
      }
    }
    if (e === name) return p;
  }
  throw new Error(`no ${name} under ${dir}`);
}

/** A Herald run of `steps` steps saved: the checkpoint's folder. */
async function savedRun(cfg: CollectionConfig, options: HeraldOptions, steps: number): Promise<string> {
  const groups = createInProcessGroups(W, { timeoutMs: 20_000 });
  const ranks = groups.map((g) => new HeraldEmbeddingCollection(cfg, g, options));
  try {
    await train(ranks, 0, steps);
    const dir = join(tmp.dir, `run${dirs++}`);
    await Promise.all(ranks.map((r) => r.save(dir)));
    return dir;
  } finally {
    ranks.forEach((r) => r.dispose());
    groups.forEach((g) => g.close());
  }
}

interface Case {
  opt: OptimizerConfig;
  allocation: Allocation;
  cacheRows: number;
}

describe('HeraldEmbeddingCollection.load (2 in-process ranks)', () => {
  const N = 4, MORE = 2;
  const cases: Case[] = [
    { opt: { type: 'adagrad', lr: 0.1 }, allocation: 'random', cacheRows: 16 },
    { opt: { type: 'adam', lr: 0.01 }, allocation: 'random', cacheRows: 1000 },
    { opt: { type: 'rowwise_adagrad', lr: 0.1 }, allocation: 'herald', cacheRows: 16 },
    { opt: { type: 'adagrad', lr: 0.1 }, allocation: 'herald', cacheRows: 1000 },
  ];
  for (const c of cases)
    it(`${c.opt.type}, ${c.allocation} placement, cache ${c.cacheRows}: the checkpoint's rows, then training on`, async () => {
      const cfg = S.config(c.opt) as CollectionConfig;
      const options: HeraldOptions = { cacheRows: c.cacheRows, batchSize: B, allocation: c.allocation };
      const names = cfg.tables.map((t) => t.name);
      // the run that goes on, saved after N steps
      const ga = createInProcessGroups(W, { timeoutMs: 20_000 });
      const straight = ga.map((g) => new HeraldEmbeddingCollection(cfg, g, options));
      const gb = createInProcessGroups(W, { timeoutMs: 20_000 });
      let loaded: HeraldEmbeddingCollection[] = [];
      const oracle = new EmbeddingCollection(cfg);
      let saved: EmbeddingCollection | undefined;
      try {
        await train(straight, 0, N);
        const dir = join(tmp.dir, `run${dirs++}`);
        await Promise.all(straight.map((r) => r.save(dir)));
        loaded = await Promise.all(gb.map((g) => HeraldEmbeddingCollection.load(dir, cfg, g, options)));
        // after load: every rank's gathered tables are the checkpoint's rows and state, bitwise
        saved = await EmbeddingCollection.load(dir);
        expect(saved.step).toBe(N);
        const afterLoad = await gathered(loaded, names);
        names.forEach((n, ti) => {
          const ids = Int32Array.from({ length: saved!.config.tables[ti]!.rows as number }, (_, j) => j);
          const want = saved!.readRows(n, ids), wantS = saved!.readState(n, ids);
          // the checkpoint is not the tables' initial rows: a load that kept them would fail here
          expect(S.bitwise(want, oracle.readRows(n, ids))).toBe(false);
          for (const g of afterLoad[ti]!) {
            expect(S.bitwise(g.weights, want)).toBe(true);
            expect(S.bitwise(g.state, wantS)).toBe(true);
          }
        });
        for (const r of loaded) expect(r.step).toBe(N);
        // training on: the straight run, the loaded one, and one collection from the checkpoint
        const a = await train(straight, N, N + MORE);
        const b = await train(loaded, N, N + MORE);
        await trainOne(saved, N, N + MORE);
        const ga2 = await gathered(straight, names), gb2 = await gathered(loaded, names);
        let bitwise = true;
        names.forEach((n, ti) => {
          const ids = Int32Array.from({ length: saved!.config.tables[ti]!.rows as number }, (_, j) => j);
          const want = saved!.readRows(n, ids), wantS = saved!.readState(n, ids);
          for (let r = 0; r < W; r++) {
            const x = ga2[ti]![r]!, y = gb2[ti]![r]!;
            expect(S.relErr(y.weights, want)).toBeLessThan(1e-5);
            expect(S.relErr(y.state, wantS)).toBeLessThan(1e-5);
            expect(S.relErr(y.weights, x.weights)).toBeLessThan(1e-5);
            if (!S.bitwise(x.weights, y.weights) || !S.bitwise(x.state, y.state)) bitwise = false;
          }
        });
        for (const r of loaded) expect(r.step).toBe(N + MORE);
        const samePlacement = a.every((s, k) => s.every((x, r) => S.bitwise(x, b[k]![r]!)));
        if (c.allocation === 'random') {
          // the same samples on the same ranks: every row's contributions summed alike, bitwise
          expect(samePlacement).toBe(true);
          expect(bitwise).toBe(true);
        } else {
          // the straight run's caches steer its allocator; the loaded run's are empty
          expect(samePlacement).toBe(false);
          expect(bitwise).toBe(false);
        }
      } finally {
        straight.forEach((r) => r.dispose());
        loaded.forEach((r) => r.dispose());
        oracle.dispose();
        saved?.dispose();
        ga.forEach((g) => g.close());
        gb.forEach((g) => g.close());
      }
    });

  it('a checkpoint of other tables or of another optimizer is INVALID_CONFIG on every rank', async () => {
    const cfg = S.config({ type: 'adagrad', lr: 0.1 }) as CollectionConfig;
    const options: HeraldOptions = { cacheRows: 8, batchSize: B };
    const dir = await savedRun(cfg, options, 2);
    const other = (f: (t: CollectionConfig['tables'][number], i: number) => object): CollectionConfig => ({ ...cfg, tables: cfg.tables.map((t, i) => ({ ...t, ...f(t, i) })) });
    const wrong: CollectionConfig[] = [
      other((t, i) => (i === 1 ? { rows: 2001 } : {})),
      other((t, i) => (i === 0 ? { dim: 4 } : {})),
      other((t, i) => (i === 2 ? { dtype: 'bf16' } : {})),
      other((t, i) => (i === 1 ? { name: 'things' } : {})),
      { ...cfg, tables: cfg.tables.slice(0, 2) },
      { ...cfg, optimizer: { type: 'adam', lr: 0.1 } },
    ];
    const groups = createInProcessGroups(W, { timeoutMs: 20_000 });
    try {
      for (const w of wrong) {
        const rs = await everyRank(groups, (g) => HeraldEmbeddingCollection.load(dir, w, g, options));
        dispose(rs);
        expect(codes(rs)).toEqual(['INVALID_CONFIG', 'INVALID_CONFIG']);
      }
      // the ranks are still in step: the matching load goes through on the same groups
      const rs = await everyRank(groups, (g) => HeraldEmbeddingCollection.load(dir, cfg, g, options));
      dispose(rs);
      expect(codes(rs)).toEqual(['loaded', 'loaded']);
    } finally {
      groups.forEach((g) => g.close());
    }
  });

  it('a damaged checkpoint is CHECKPOINT_CORRUPT on every rank, also when one rank reads it damaged', async () => {
    const cfg = S.config({ type: 'adam', lr: 0.01 }) as CollectionConfig;
    const options: HeraldOptions = { cacheRows: 8, batchSize: B };
    const good = await savedRun(cfg, options, 2);
    const bad = join(tmp.dir, `damaged${dirs++}`);
    cpSync(good, bad, { recursive: true });
    const payload = findFile(bad, 'tables.bin');
    const bytes = readFileSync(payload);
    bytes[bytes.length >> 1] ^= 0x10;
    writeFileSync(payload, bytes);
    const groups = createInProcessGroups(W, { timeoutMs: 20_000 });
    try {
      let rs = await everyRank(groups, (g) => HeraldEmbeddingCollection.load(bad, cfg, g, options));
      dispose(rs);
      expect(codes(rs)).toEqual(['CHECKPOINT_CORRUPT', 'CHECKPOINT_CORRUPT']);
      // rank 1 alone reads the damaged copy: rank 0, whose own read went through, fails with its code too
      rs = await everyRank(groups, (g) => HeraldEmbeddingCollection.load(g.rank === 1 ? bad : good, cfg, g, options));
      dispose(rs);
      expect(codes(rs)).toEqual(['CHECKPOINT_CORRUPT', 'CHECKPOINT_CORRUPT']);
      expect(rs[0]!.status === 'rejected' && String((rs[0].reason as Error).message)).toMatch(/another rank/);
      rs = await everyRank(groups, (g) => HeraldEmbeddingCollection.load(good, cfg, g, options));
      dispose(rs);
      expect(codes(rs)).toEqual(['loaded', 'loaded']);
    } finally {
      groups.forEach((g) => g.close());
    }
  });
});
