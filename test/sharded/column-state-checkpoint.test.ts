// column-state-checkpoint.test.ts — the row accumulators of a rowwise_adagrad table split by columns in a
// sharded checkpoint (2 in-process ranks). Each column shard's accumulators are read straight from its
// rank's engine after training: a load into the same plan gives every column shard its own back, bit for
// bit; a load into a plan with other column splits, into one rank, or as one EmbeddingCollection gives
// every row the first column shard's accumulator (the documented behaviour), as does a checkpoint whose
// manifest lists no column state; a damaged or missing column state file is CHECKPOINT_CORRUPT naming it.
import { mkdtempSync, readFileSync, readdirSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { JaggedBatch } from '../../lib/batch.js';
import { EmbeddingCollection } from '../../lib/collection.js';
import { ShardPlan } from '../../lib/plan/shard-plan.js';
import { createInProcessGroups } from '../../lib/sharded/group.js';
import { ShardedEmbeddingCollection } from '../../lib/sharded/sharded.js';

const ROWS = 20, DIM = 4, B = 5;
type Shard = { rows: [number, number]; cols: [number, number]; rank: number };
const planOf = (W: number, shards: Shard[]) => ShardPlan.create({
  topology: { name: 'test', worldSize: W, ranksPerNode: W, deviceMemoryBytes: 1e12, memoryLimitBytes: 1e12, hbmBandwidth: 1e12, intraNodeBandwidth: 1e11, interNodeBandwidth: 1e10 },
  batchSize: B,
  tables: [
    { table: { name: 'P', rows: 12, dim: DIM, pooling: 'sum', features: ['p'] }, cluster: 'dp' },
    { table: { name: 'T', rows: ROWS, dim: DIM, pooling: 'sum', features: ['t'] }, cluster: 'rb', shards },
  ],
} as Parameters<typeof ShardPlan.create>[0]);
const saved = planOf(2, [
  { rows: [0, 10], cols: [0, 2], rank: 0 }, { rows: [0, 10], cols: [2, 4], rank: 1 },
  { rows: [10, 20], cols: [0, 1], rank: 1 }, { rows: [10, 20], cols: [1, 3], rank: 0 }, { rows: [10, 20], cols: [3, 4], rank: 1 },
]);
// the same row groups and column ranges on other ranks
const swapped = planOf(2, [
  { rows: [0, 10], cols: [0, 2], rank: 1 }, { rows: [0, 10], cols: [2, 4], rank: 0 },
  { rows: [10, 20], cols: [0, 1], rank: 0 }, { rows: [10, 20], cols: [1, 3], rank: 1 }, { rows: [10, 20], cols: [3, 4], rank: 0 },
]);
// other column splits
const other = planOf(2, [
  { rows: [0, 10], cols: [0, 3], rank: 1 }, { rows: [0, 10], cols: [3, 4], rank: 0 },
  { rows: [10, 20], cols: [0, 4], rank: 0 },
]);
const cfg = { optimizer: { type: 'rowwise_adagrad' as const, lr: 0.3 }, seed: 4 };
const bits = (a: Float32Array) => Array.from(new Uint32Array(a.buffer, a.byteOffset, a.length));
const dir = mkdtempSync(join(tmpdir(), 'embshard-colstate-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Each column shard's own accumulators, read from its rank's engine: `${r0}:${c0}` → one float per row (bit patterns). */
function accumulators(ranks: ShardedEmbeddingCollection[]): Map<string, number[]> {
  const out = new Map<string, number[]>();
  for (const sc of ranks) {
    sc.layout.localTables.forEach((lt, li) => {
      if (lt.part !== 'shard' || sc.plan.tables[lt.t]!.name !== 'T') return;
      const acc = new Float32Array(lt.rows);
      sc.localEngine.readState(li, BigInt64Array.from({ length: lt.rows }, (_, j) => BigInt(j)), acc);
      out.set(`${lt.r0}:${lt.c0}`, bits(acc));
    });
  }
  return out;
}

/** Per row of T, the accumulator of the first column shard of its row group (the documented load elsewhere). */
function firstOf(acc: Map<string, number[]>): number[] {
  return [...acc.get('0:0')!, ...acc.get('10:0')!];
}

/** What every column shard of `plan` holds when each row has accumulator `perRow[row]`. */
function expectAll(acc: Map<string, number[]>, plan: ShardPlan, perRow: number[]): void {
  const want = new Map<string, number[]>();
  for (const s of plan.shardsOf('T')) want.set(`${s.rows[0]}:${s.cols[0]}`, perRow.slice(s.rows[0], s.rows[1]));
  expect(acc).toEqual(want);
}

async function train(ranks: ShardedEmbeddingCollection[], steps: number): Promise<void> {
  for (let k = 0; k < steps; k++) {
    const outs = await Promise.all(ranks.map((sc, r) => {
      let s = 7 * k + r + 1;
      const next = () => ((s = (s * 1103515245 + 12345) % 2147483648) / 2147483648);
      const bags = [12, ROWS].map((n) => Array.from({ length: B }, () => Array.from({ length: 1 + Math.floor(next() * 3) }, () => Math.floor(n * next()))));
      return sc.forward(JaggedBatch.fromBags(['p', 't'], bags));
    }));
    await Promise.all(ranks.map((sc, r) => sc.backward(outs[r]!, { pooled: Float32Array.from({ length: outs[r]!.pooled.length }, (_, i) => Math.sin(1 + i * 0.7 + 3 * k + r)) })));
  }
}

async function loadAll(ck: string, plan: ShardPlan): Promise<ShardedEmbeddingCollection[]> {
  const gs = createInProcessGroups(plan.topology.worldSize, { ranksPerNode: plan.topology.worldSize, timeoutMs: 30_000 });
  return Promise.all(gs.map((g) => ShardedEmbeddingCollection.load(ck, plan, g)));
}

describe('rowwise_adagrad column shards in a sharded checkpoint', () => {
  const ck = join(dir, 'ck');
  let before: Map<string, number[]>;
  let rows: Float32Array;

  it('save, then load into the same column splits: every column shard gets its own accumulators back', async () => {
    const gs = createInProcessGroups(2, { ranksPerNode: 2, timeoutMs: 30_000 });
    const a = gs.map((g) => new ShardedEmbeddingCollection(saved, g, cfg));
    try {
      await train(a, 4);
      before = accumulators(a);
      // the column shards of a row group hold different accumulators
      expect(before.get('0:2')).not.toEqual(before.get('0:0'));
      expect(before.get('10:3')).not.toEqual(before.get('10:0'));
      rows = (await Promise.all(a.map((sc) => sc.readRows('T', Array.from({ length: ROWS }, (_, i) => i)))))[0]!;
      await Promise.all(a.map((sc) => sc.save(ck)));
    } finally {
      a.forEach((sc) => sc.dispose());
    }
    for (const plan of [saved, swapped]) {
      const b = await loadAll(ck, plan);
      try {
        expect(accumulators(b)).toEqual(before);
      } finally {
        b.forEach((sc) => sc.dispose());
      }
    }
  }, 30_000);

  it('load into other column splits, one rank, or one EmbeddingCollection: the first column shard\'s accumulator per row', async () => {
    const perRow = firstOf(before);
    const b = await loadAll(ck, other);
    try {
      expectAll(accumulators(b), other, perRow);
      const r = await Promise.all(b.map((sc) => sc.readRows('T', Array.from({ length: ROWS }, (_, i) => i))));
      expect(bits(r[0]!)).toEqual(bits(rows));
    } finally {
      b.forEach((sc) => sc.dispose());
    }
    const one = planOf(1, [{ rows: [0, 10], cols: [0, 1], rank: 0 }, { rows: [0, 10], cols: [1, 4], rank: 0 }, { rows: [10, 20], cols: [0, 4], rank: 0 }]);
    const c = await loadAll(ck, one);
    try {
      expectAll(accumulators(c), one, perRow);
    } finally {
      c.forEach((sc) => sc.dispose());
    }
    const ec = await EmbeddingCollection.load(ck, { device: 'cpu' });
    try {
      expect(bits(ec.readState('T', BigInt64Array.from({ length: ROWS }, (_, i) => BigInt(i))))).toEqual(perRow);
    } finally {
      ec.dispose();
    }
  }, 30_000);

  it('a damaged or missing column state file is CHECKPOINT_CORRUPT naming it; a manifest without column state loads as the first shard\'s', async () => {
    const files = readdirSync(ck).filter((f) => f.startsWith('cstate-'));
    expect(files.length).toBe(3);
    const keep = new Map(files.map((f) => [f, readFileSync(join(ck, f))]));
    const f = files[0]!;
    const damaged = Buffer.from(keep.get(f)!);
    damaged[1] = damaged[1]! ^ 0x20;
    writeFileSync(join(ck, f), damaged);
    const tries: [string, () => void][] = [[`${f} altered`, () => writeFileSync(join(ck, f), damaged)], [`${f} missing`, () => unlinkSync(join(ck, f))]];
    for (const [, spoil] of tries) {
      spoil();
      const gs = createInProcessGroups(2, { ranksPerNode: 2, timeoutMs: 30_000 });
      const results = await Promise.allSettled(gs.map((g) => ShardedEmbeddingCollection.load(ck, saved, g)));
      for (const x of results) if (x.status === 'fulfilled') x.value.dispose();
      expect(results.every((x) => x.status === 'rejected')).toBe(true);
      const reasons = results.map((x) => (x as PromiseRejectedResult).reason as { code?: string; message?: string });
      expect(reasons.some((x) => x.code === 'CHECKPOINT_CORRUPT' && x.message!.includes(f))).toBe(true);
      writeFileSync(join(ck, f), keep.get(f)!);
    }
    // a checkpoint whose manifest lists no column state (as older ones): every column shard starts from the first's
    // (written without the seal, as earlier versions wrote manifests)
    const { manifestSha256, ...m } = JSON.parse(readFileSync(join(ck, 'manifest.json'), 'utf8')) as { manifestSha256?: string; extra: Record<string, unknown> };
    expect(manifestSha256).toBeDefined();
    expect(m.extra.columnState).toBeDefined();
    delete m.extra.columnState;
    writeFileSync(join(ck, 'manifest.json'), JSON.stringify(m));
    for (const x of files) unlinkSync(join(ck, x));
    const b = await loadAll(ck, saved);
    try {
      expectAll(accumulators(b), saved, firstOf(before));
    } finally {
      b.forEach((sc) => sc.dispose());
    }
  }, 30_000);
});
