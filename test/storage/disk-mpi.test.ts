// disk-mpi.test.ts — `embshard train --storage disk:<dir> --cache-bytes N` under mpirun -np 2: every rank's
// disk-backed shards go to files of their own (rank<r>-<shard>.embtable, none shared), and the run's
// checkpoint (embedding rows and optimizer state, dense model, step) is bitwise the one the same run
// saves with every table in memory.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Trainer } from '../../lib/train/trainer.js';
import { compileTs, mpiSuitesRun, mpirun } from '../sharded/mpi-harness.js';
import { tempDir } from '../temp-dir.js';

const tmp = tempDir('disk-mpi');

const ARGS = ['train', '--model', 'custom', '--bottom', '13-32-8', '--top', '32-1', '--data', 'synthetic', '--max-rows', '5000', '--steps', '12', '--batch', '128',
  '--optimizer', 'adagrad', '--lr', '0.05', '--eval-batches', '0', '--quiet'];

async function snapshot(dir: string) {
  const t = await Trainer.load(dir);
  const emb = t.embeddings;
  const parts = emb.tables.flatMap((tb) => {
    const ids = BigInt64Array.from({ length: tb.rows }, (_, i) => BigInt(i));
    return [emb.readRows(tb.name, ids), emb.readState(tb.name, ids)];
  });
  const bytes = Buffer.concat(parts.map((p) => Buffer.from(p.buffer, p.byteOffset, p.byteLength)));
  const out = { step: t.stepCount, rows: emb.tables.reduce((s, tb) => s + tb.rows, 0), bytes, dense: readFileSync(join(dir, 'dense.bin')) };
  t.embeddings.dispose?.();
  return out;
}

describe.runIf(mpiSuitesRun())('disk-backed tables under mpirun (embshard train --storage disk:)', () => {
  it('2 ranks: each rank writes its own shard files; the checkpoint is bitwise the in-memory run\'s', async () => {
    compileTs();
    const disk = join(tmp.dir, 'tables');
    const cli = join('dist', 'lib', 'cli', 'main.js');
    const onDisk = await mpirun(2, cli, [...ARGS, '--storage', `disk:${disk}`, '--cache-bytes', '1500000', '--save', join(tmp.dir, 'disk-ck')], { limitMs: 120_000 });
    expect(onDisk.code, onDisk.stderr).toBe(0);
    const inMemory = await mpirun(2, cli, [...ARGS, '--save', join(tmp.dir, 'mem-ck')], { limitMs: 120_000 });
    expect(inMemory.code, inMemory.stderr).toBe(0);
    // the budget sends shards of both ranks to disk, each to a file only that rank opens
    const files = readdirSync(disk);
    const byRank = [0, 1].map((r) => files.filter((f) => f.startsWith(`rank${r}-`) && f.endsWith('.embtable')));
    expect(byRank[0]!.length, files.join(' ')).toBeGreaterThan(0);
    expect(byRank[1]!.length, files.join(' ')).toBeGreaterThan(0);
    expect(byRank[0]!.length + byRank[1]!.length).toBe(files.length);
    const [a, b] = [await snapshot(join(tmp.dir, 'disk-ck')), await snapshot(join(tmp.dir, 'mem-ck'))];
    expect([a.step, a.rows]).toEqual([12, b.rows]);
    expect(b.step).toBe(12);
    expect(a.bytes.equals(b.bytes), 'embedding rows and state bitwise').toBe(true);
    expect(a.dense.equals(b.dense), 'dense model bitwise').toBe(true);
  }, 300_000);
});
