// compat.test.ts — a checkpoint loaded where its tables do not fit: a sharded load under a plan whose table
// differs in rows, dim, dtype, pooling or features, or lacks or adds a table, is CHECKPOINT_CORRUPT naming
// the table; another optimizer with state is INVALID_CONFIG; the same tables in another order load each
// table's rows and optimizer state by name, bitwise.
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { EmbeddingCollection, EmbshardError } from '../../lib/index.js';
import { ShardPlan } from '../../lib/plan/shard-plan.js';
import { createInProcessGroups } from '../../lib/sharded/group.js';
import { ShardedEmbeddingCollection } from '../../lib/sharded/sharded.js';
import { gatherTable } from '../../lib/sharded/reshard.js';
import { tempDir } from '../temp-dir.js';

const tmp = tempDir('ckpt-compat');

interface T { name: string; rows: number; dim: number; features: string[]; pooling?: 'sum' | 'mean' | 'none'; dtype?: 'fp32' | 'fp16' | 'bf16' }
const A: T = { name: 'A', rows: 30, dim: 8, features: ['a1', 'a2'], pooling: 'sum', dtype: 'fp32' };
const B: T = { name: 'B', rows: 20, dim: 4, features: ['b'], pooling: 'mean', dtype: 'bf16' };

function plan(tables: T[]): ShardPlan {
  return ShardPlan.create({
    topology: { name: 'one', worldSize: 1, ranksPerNode: 1, deviceMemoryBytes: 1e12, memoryLimitBytes: 1e12, hbmBandwidth: 1e12, intraNodeBandwidth: 1e11, interNodeBandwidth: 1e10 },
    batchSize: 4,
    tables: tables.map((table) => ({ table, cluster: 'dp' as const })),
  });
}

/** Row r, column c of table t: a value exact in bf16. */
const value = (t: number, r: number, c: number) => ((t * 37 + r * 5 + c) % 29) / 4 - 3;

async function saved(): Promise<string> {
  const dir = join(tmp.dir, 'ck');
  const ec = new EmbeddingCollection({ tables: [A, B], optimizer: { type: 'adagrad', lr: 0.1 }, seed: 4 });
  [A, B].forEach((t, i) => {
    const ids = BigInt64Array.from({ length: t.rows }, (_, r) => BigInt(r));
    ec.writeRows(t.name, ids, Float32Array.from({ length: t.rows * t.dim }, (_, k) => value(i, Math.floor(k / t.dim), k % t.dim)));
    ec.writeState(t.name, ids, Float32Array.from({ length: t.rows * t.dim }, (_, k) => k / 16));
  });
  ec.step = 9;
  await ec.save(dir);
  ec.dispose();
  return dir;
}

async function loadUnder(dir: string, tables: T[], optimizer?: { type: 'sgd' | 'adam' | 'adagrad'; lr: number }): Promise<ShardedEmbeddingCollection | EmbshardError> {
  const [g] = createInProcessGroups(1);
  try {
    return await ShardedEmbeddingCollection.load(dir, plan(tables), g!, optimizer ? { optimizer } : {});
  } catch (e) {
    g!.close();
    expect(e).toBeInstanceOf(EmbshardError);
    return e as EmbshardError;
  }
}

describe('a checkpoint loaded under a plan its tables do not fit', () => {
  it('rows, dim, dtype, pooling, features, a missing or an extra table: CHECKPOINT_CORRUPT naming the table', async () => {
    const dir = await saved();
    const cases: [string, T[], RegExp][] = [
      ['rows', [{ ...A, rows: 31 }, B], /'A'/],
      ['dim', [A, { ...B, dim: 8 }], /'B'/],
      ['dtype', [A, { ...B, dtype: 'fp32' }], /'B'/],
      ['pooling', [{ ...A, pooling: 'mean' }, B], /'A'/],
      ['feature names', [{ ...A, features: ['a1', 'x'] }, B], /'A'/],
      ['a table missing', [A], /2 tables; the plan has 1/],
      ['an extra table', [A, B, { ...B, name: 'C', features: ['c'] }], /'C'/],
    ];
    for (const [what, tables, names] of cases) {
      const r = await loadUnder(dir, tables);
      expect([what, r instanceof EmbshardError ? r.code : 'loaded', r instanceof EmbshardError && names.test(r.message)]).toEqual([what, 'CHECKPOINT_CORRUPT', true]);
    }
    const r = await loadUnder(dir, [A, B], { type: 'adam', lr: 0.1 });
    expect(r instanceof EmbshardError ? [r.code, /adagrad/.test(r.message)] : 'loaded').toEqual(['INVALID_CONFIG', true]);
  });

  it('the same tables in another order: each table loads its own rows and optimizer state, bitwise, and the step', async () => {
    const dir = await saved();
    const sc = await loadUnder(dir, [B, A]);
    expect(sc).toBeInstanceOf(ShardedEmbeddingCollection);
    const s = sc as ShardedEmbeddingCollection;
    expect(s.step).toBe(9);
    for (const [i, t] of [A, B].entries()) {
      const g = await gatherTable(s, t.name);
      const want = Float32Array.from({ length: t.rows * t.dim }, (_, k) => value(i, Math.floor(k / t.dim), k % t.dim));
      expect(Buffer.from(g.weights.buffer).equals(Buffer.from(want.buffer))).toBe(true);
      expect(Array.from(g.state)).toEqual(Array.from({ length: t.rows * t.dim }, (_, k) => k / 16));
    }
    s.dispose();
    s.group.close();
  });
});
