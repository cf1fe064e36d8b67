// storage.ts — `npm run bench:storage`: training steps (forward + backward + optimizer) of a
// disk-backed table against the same table in memory, for caches of 1% to 100% of the table and ids
// uniform or Zipf(1.05 / 1.2): steps/s and its ratio to memory, the cache hit rate, bytes read and
// written per step, set against a sequential read of the table file (the raw read probe). Every number
// of a row comes from the same run of this process, so ratios hold on a busy machine where absolute
// times do not.
import { openSync, readSync, closeSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { EmbeddingCollection, JaggedBatch } from '../lib/index.js';
import { Rng } from '../lib/random/rng.js';
import { makeScatter, scatter, ZipfSampler } from '../lib/random/zipf.js';
import { SLOT_META_BYTES } from '../lib/storage/constants.js';
import { benchArgs, benchTempDir, envInt, machine, table, writeResults } from './report.js';

benchArgs(`usage: node dist/bench/storage.js   (npm run bench:storage)
Training steps of a disk-backed table against the same table in memory, caches of 1% to 100% of the table.
Writes bench/results/storage.{json,md}. BENCH_ROWS (400000) and BENCH_STEPS (100) size the run.`);

const ROWS = envInt('BENCH_ROWS', 400_000);
const DIM = 32;
const B = 512;
const L = 4;
const STEPS = envInt('BENCH_STEPS', 100);
const ROUND = 10;
const FRACTIONS = [0.01, 0.05, 0.25, 1];
const ALPHAS = [0, 1.05, 1.2];
const optimizer = { type: 'rowwise_adagrad' as const, lr: 0.05 };
const slotBytes = DIM * 4 + 4 + SLOT_META_BYTES;

function batches(alpha: number, n: number): JaggedBatch[] {
  const rng = new Rng(7, Math.round(alpha * 100));
  const z = alpha > 0 ? new ZipfSampler(ROWS, alpha) : undefined;
  const sc = makeScatter(ROWS, 3, 0);
  return Array.from({ length: n }, () => {
    const ids = BigInt64Array.from({ length: B * L }, () => BigInt(z ? scatter(sc, z.sample(rng)) : rng.int(0, ROWS - 1)));
    return JaggedBatch.fromLengths({ features: ['t'], batchSize: B, lengths: new Int32Array(B).fill(L), ids });
  });
}

/**
 * Steps/s of the disk-backed and the in-memory collection over the same batches, timed in alternating
 * rounds of ROUND steps so both see the same machine load; the ratio is the median of the rounds' ratios
 * (a round that another process preempted does not move it).
 */
async function interleaved(
  disk: EmbeddingCollection, mem: EmbeddingCollection, bs: JaggedBatch[], pooled: Float32Array, warmedUp: () => void,
): Promise<{ disk: number; mem: number; ratio: number }> {
  const run = async (ec: EmbeddingCollection, from: number, to: number) => {
    const t0 = performance.now();
    for (let s = from; s < to; s++) await ec.backward(await ec.forward(bs[s]!), { pooled });
    return performance.now() - t0;
  };
  // warm-up: one pass over the same batches (the steady state of a table trained for a while)
  await run(disk, 0, bs.length);
  await run(mem, 0, bs.length);
  warmedUp();
  let td = 0, tm = 0;
  const ratios: number[] = [];
  for (let s = 0; s < bs.length; s += ROUND) {
    const e = Math.min(bs.length, s + ROUND);
    const d = await run(disk, s, e), m = await run(mem, s, e);
    td += d;
    tm += m;
    ratios.push(m / d);
  }
  ratios.sort((a, b) => a - b);
  const n = bs.length;
  return { disk: (n * 1000) / td, mem: (n * 1000) / tm, ratio: ratios[ratios.length >> 1]! };
}

/** Bytes per second of one sequential pass over a file in 8 MiB reads. */
function sequentialRead(file: string): number {
  const fd = openSync(file, 'r');
  const buf = Buffer.alloc(8 << 20);
  let total = 0;
  const t0 = performance.now();
  for (let n; (n = readSync(fd, buf, 0, buf.length, null)) > 0; ) total += n;
  closeSync(fd);
  return total / ((performance.now() - t0) / 1000);
}

const { dir, remove } = benchTempDir('embshard-bench-storage-');
const pooled = new Float32Array(B * DIM).fill(0.01);
const rows: Record<string, unknown>[] = [];
let probe = 0;
try {
  for (const alpha of ALPHAS) {
    const bs = batches(alpha, STEPS);
    for (const fraction of FRACTIONS) {
      const cacheBytes = Math.ceil(ROWS * fraction) * slotBytes;
      const path = join(dir, `a${alpha}-f${fraction}`);
      const ec = new EmbeddingCollection({ tables: [{ name: 't', rows: ROWS, dim: DIM, storage: { kind: 'disk', path, cacheBytes } }], optimizer });
      const mem = new EmbeddingCollection({ tables: [{ name: 't', rows: ROWS, dim: DIM }], optimizer });
      let rate = 0, memRate = 0, ratio = 0, err = '';
      // the counters of the timed steps
      let warm = ec.storageStats().t!;
      try {
        const r = await interleaved(ec, mem, bs, pooled, () => (warm = ec.storageStats().t!));
        rate = r.disk;
        memRate = r.mem;
        ratio = r.ratio;
      } catch (e) {
        err = (e as Error).message;
      }
      const after = ec.storageStats().t!;
      mem.dispose();
      const steps = bs.length;
      const hits = after.hits - warm.hits, misses = after.misses - warm.misses;
      if (probe === 0) probe = sequentialRead(join(path, 't.embtable'));
      rows.push({
        zipf: alpha, cacheFraction: fraction, cacheBytes, slots: after.slots, stepsPerSec: rate, memoryStepsPerSec: memRate,
        ratio, hitRate: hits + misses === 0 ? 0 : hits / (hits + misses),
        readBytesPerStep: (after.bytesRead - warm.bytesRead) / steps, writtenBytesPerStep: (after.bytesWritten - warm.bytesWritten) / steps,
        ...(err ? { error: err } : {}),
      });
      ec.dispose();
      rmSync(path, { recursive: true, force: true });
    }
  }
} finally {
  remove();
}

const md = [
  `# Disk-backed tables (bench:storage)`,
  ``,
  `One table of ${ROWS.toLocaleString()} rows × ${DIM} fp32 with rowwise Adagrad (${(ROWS * (DIM * 4 + 4) / 2 ** 20).toFixed(0)} MiB of rows and state), ` +
    `batches of ${B} × ${L} ids, ${STEPS} timed steps after a warm-up pass over the same batches. Memory: the same table in RAM, timed in the same run, ` +
    `in alternating rounds of ${ROUND} steps; disk / memory is the median of the rounds' ratios. ` +
    `Hit rate and bytes are per timed step (distinct rows of a batch). The raw probe reads the table file sequentially ` +
    `(${(probe / 2 ** 30).toFixed(2)} GiB/s; the file mostly sits in the page cache). Measured on a shared machine: compare the ratios, not the absolute rates.`,
  ``,
  table(
    ['Zipf', 'cache', 'steps/s disk', 'steps/s memory', 'disk / memory', 'hit rate', 'read / step', 'written / step', 'disk MB/s ÷ probe'],
    rows.map((r) => [
      String(r.zipf), `${(r.cacheFraction as number) * 100}%`,
      // a batch that does not fit stops the run: no rate, hit rate or bytes to report
      ...(r.error
        ? ['batch does not fit', '-', '-', '-', '-', '-', '-']
        : [
            r.stepsPerSec as number, r.memoryStepsPerSec as number, r.ratio as number, r.hitRate as number,
            `${((r.readBytesPerStep as number) / 1024).toFixed(0)} KiB`, `${((r.writtenBytesPerStep as number) / 1024).toFixed(0)} KiB`,
            (((r.readBytesPerStep as number) + (r.writtenBytesPerStep as number)) * (r.stepsPerSec as number)) / probe,
          ]),
    ]),
  ),
].join('\n');
writeResults('storage', { machine: machine(), config: { ROWS, DIM, B, L, STEPS, optimizer }, probeBytesPerSec: probe, results: rows }, md);
