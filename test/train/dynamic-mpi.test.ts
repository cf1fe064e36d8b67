// dynamic-mpi.test.ts — `embshard train --dynamic-capacity N` under `mpirun -np 2`: the planner shards the
// 26 dynamic tables (each N rows over its row shards, placed by id hash), training runs on both ranks, and
// the summary's totals over every shard of both ranks show a full table (rows held ≤ 26 · N, at least one
// id map per table) that admitted and evicted (the synthetic ids far outnumber N).
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it, expect, beforeAll } from 'vitest';
import { createInProcessGroups } from '../../lib/sharded/group.js';
import { ShardedEmbeddingCollection } from '../../lib/sharded/sharded.js';
import { compileTs, mpiSuitesRun, mpirun } from '../sharded/mpi-harness.js';

const run = mpiSuitesRun();

describe.runIf(run)('embshard train --dynamic-capacity under mpirun', () => {
  beforeAll(() => compileTs());
  it('-np 2: trains sharded dynamic tables; the id maps of both ranks admit and evict', async () => {
    const N = 64;
    const dir = mkdtempSync(join(tmpdir(), 'embshard-dyn-mpi-'));
    const r = await mpirun(2, 'dist/lib/cli/main.js', [
      'train', '--model', 'custom', '--bottom', '13-16-8', '--top', '16-1', '--data', 'synthetic', '--max-rows', '2000', '--dynamic-capacity', String(N),
      '--steps', '12', '--batch', '64', '--optimizer', 'adagrad', '--lr', '0.05', '--eval-batches', '1', '--quiet', '--save', join(dir, 'ck'),
    ], { limitMs: 120_000 });
    expect(r.code, r.stderr + r.stdout).toBe(0);
    expect(r.stdout).toMatch(/trained 12 steps/);
    expect(r.stdout).toMatch(/per rank \(2 ranks\)/);
    const m = /dynamic tables: (\d+) in (\d+) id map\(s\), ([\d,]+) rows held, ([\d,]+) admissions, ([\d,]+) evictions/.exec(r.stdout);
    expect(m, r.stdout).not.toBeNull();
    const n = (s: string) => Number(s.replace(/,/g, ''));
    expect(n(m![1]!)).toBe(26);
    expect(n(m![2]!)).toBeGreaterThanOrEqual(26);
    expect(n(m![3]!)).toBeGreaterThan(0);
    expect(n(m![3]!)).toBeLessThanOrEqual(26 * N);
    expect(n(m![4]!)).toBeGreaterThanOrEqual(n(m![3]!));
    expect(n(m![5]!)).toBeGreaterThan(0);
    expect(n(m![4]!) - n(m![5]!)).toBe(n(m![3]!)); // admissions − evictions = rows held
    try {
      const emb = join(dir, 'ck', 'embeddings');
      expect(readdirSync(emb).filter((f) => f.startsWith('dshard-')).length).toBe(2 * n(m![2]!));
      const plan = (await ShardedEmbeddingCollection.savedPlan(emb))!;
      const groups = createInProcessGroups(2, { ranksPerNode: 2, timeoutMs: 30_000 });
      const sc = await Promise.all(groups.map((g) => ShardedEmbeddingCollection.load(emb, plan, g)));
      const st = sc.flatMap((x) => x.stats());
      expect(st.length).toBe(n(m![2]!));
      expect(st.reduce((k, x) => k + x.rows, 0)).toBe(n(m![3]!));
      expect(st.reduce((k, x) => k + x.evictions, 0)).toBe(n(m![5]!));
      sc.forEach((x) => x.dispose());
      groups.forEach((g) => g.close());
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 180_000);
});
