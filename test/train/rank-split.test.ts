// rank-split.test.ts — how `embshard train` splits Criteo TSV and Arrow data between mpirun ranks
// (lib/train/rank-split.ts): every rank reads the source, batch j goes to rank j mod world, whole rounds
// only. Checked in process on real readers: which samples each rank gets, against the rule written out
// by hand over the plain (unsplit) sample order.
import { describe, it, expect } from 'vitest';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tableFromIPC, tableToIPC } from 'apache-arrow';
import { CriteoTsvSource } from '../../lib/data/criteo-tsv.js';
import { arrowSource, batchesToTable } from '../../lib/data/arrow.js';
import { SyntheticSource } from '../../lib/data/synthetic.js';
import { RankSplitSource, rankBatchIndices, rankSplit } from '../../lib/train/rank-split.js';
import { isEmbshardError } from '../../lib/errors.js';
import type { Batch, BatchSource } from '../../lib/data/types.js';
import { tempDir } from '../temp-dir.js';

const tmp = tempDir('split');

async function collect(src: AsyncIterable<Batch>): Promise<Batch[]> {
  const out: Batch[] = [];
  for await (const b of src) out.push(b);
  return out;
}

/** A TSV of `good` valid lines (I1 = the sample's index) with a malformed line after every 4th. */
function writeTsv(good: number): string {
  const lines: string[] = [];
  for (let i = 0; i < good; i++) {
    const ints = [String(i), ...Array.from({ length: 12 }, (_, k) => String((i * 7 + k) % 50))];
    const cats = Array.from({ length: 26 }, (_, f) => ((i * 2654435761 + f * 40503) >>> 0).toString(16).padStart(8, '0'));
    lines.push([String(i % 2), ...ints, ...cats].join('\t'));
    if (i % 4 === 3) lines.push('1\tnot-a-number\t3'); // malformed: skipped and counted, not a sample
  }
  const file = join(tmp.dir, `day-${good}.tsv`);
  writeFileSync(file, lines.join('\n') + '\n');
  return file;
}

/** The TSV sample indices in a batch, read back from I1 (dense feature 0 = log(1 + I1)). */
function tsvIndices(b: Batch): number[] {
  return Array.from({ length: b.size }, (_, s) => Math.round(Math.expm1(b.dense[s * 13]!)));
}

/** The rule written out: sample i (in source order) belongs to rank ⌊i/B⌋ mod world, whole rounds only. */
function expectedSamples(total: number, B: number, rank: number, world: number): number[] {
  const batches = Math.ceil(total / B), rounds = Math.floor(batches / world), out: number[] = [];
  for (let i = 0; i < total; i++) {
    const j = Math.floor(i / B);
    if (j < rounds * world && j % world === rank) out.push(i);
  }
  return out;
}

describe('rank split of sources without their own (Criteo TSV, Arrow)', () => {
  it('the batch-index rule: round robin, whole rounds, disjoint, equal counts', () => {
    expect(rankBatchIndices(11, 0, 3)).toEqual([0, 3, 6]);
    expect(rankBatchIndices(11, 2, 3)).toEqual([2, 5, 8]);
    expect(rankBatchIndices(2, 1, 3)).toEqual([]);
    expect(rankBatchIndices(5, 0, 1)).toEqual([0, 1, 2, 3, 4]);
  });

  it('Criteo TSV (with malformed lines): each of 3 ranks gets exactly its samples, and together they cover every whole round once', async () => {
    const good = 25, B = 2, world = 3;
    const file = writeTsv(good);
    const plain = await collect(new CriteoTsvSource({ path: file, batchSize: B, maxRows: 1000 }));
    expect(plain.flatMap(tsvIndices)).toEqual(Array.from({ length: good }, (_, i) => i)); // the reader keeps order, skips the bad lines
    const seen: number[] = [];
    const counts: number[] = [];
    for (let r = 0; r < world; r++) {
      const src = new RankSplitSource(new CriteoTsvSource({ path: file, batchSize: B, maxRows: 1000 }), r, world);
      const got = await collect(src);
      const ids = got.flatMap(tsvIndices);
      expect(ids).toEqual(expectedSamples(good, B, r, world));
      expect(src.report()!.malformed).toBe(6); // the inner reader's report passes through
      counts.push(got.length);
      seen.push(...ids);
    }
    expect(counts).toEqual([4, 4, 4]); // 13 batches → 4 whole rounds; batch 12 (sample 24) is dropped on every rank
    expect(seen.sort((x, y) => x - y)).toEqual(Array.from({ length: 24 }, (_, i) => i));
  });

  it('Arrow (IPC file, slices of the record batches): same rule over the plain path\'s sample order', async () => {
    const syn = new SyntheticSource({ preset: 'criteo-kaggle', batchSize: 12, numBatches: 3, maxRows: 500, seed: 9 });
    const plainBatches = await collect(syn);
    const table = tableFromIPC(tableToIPC(batchesToTable(plainBatches), 'file'));
    const B = 4, world = 2;
    // the plain path: the same table read without a split, sample keys in order
    const key = (b: Batch, s: number) => `${b.labels[s]}|${Array.from(b.dense.subarray(s * 13, s * 13 + 13)).join(',')}`;
    const keysOf = (bs: Batch[]) => bs.flatMap((b) => Array.from({ length: b.size }, (_, s) => key(b, s)));
    const plain = keysOf(await collect(arrowSource(table, { maxBatchSize: B })));
    expect(plain).toEqual(keysOf(plainBatches));
    expect(new Set(plain).size).toBe(36); // keys identify samples
    for (let r = 0; r < world; r++) {
      const got = await collect(rankSplit(arrowSource(table, { maxBatchSize: B }), r, world));
      expect(got.every((b) => b.size === B)).toBe(true);
      expect(keysOf(got)).toEqual(expectedSamples(36, B, r, world).map((i) => plain[i]));
    }
  });

  it('world 1 is the source itself; a bad rank or world is INVALID_ARGUMENT', () => {
    const syn: BatchSource = new SyntheticSource({ preset: 'criteo-kaggle', batchSize: 4, numBatches: 1, maxRows: 100 });
    expect(rankSplit(syn, 0, 1)).toBe(syn);
    for (const [r, w] of [[2, 2], [-1, 2], [0, 0], [0.5, 2]] as const) {
      try {
        new RankSplitSource(syn, r, w);
        expect.unreachable();
      } catch (e) {
        expect(isEmbshardError(e) && e.code === 'INVALID_ARGUMENT').toBe(true);
      }
    }
  });
});
