// fullBatches: a source's batches of exactly its batch size, in order, its final partial batch left out
// and counted; checked against the sample indices a Criteo TSV fixture writes into each sample.
import { describe, it, expect } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CriteoTsvSource } from '../../lib/data/criteo-tsv.js';
import { fullBatches } from '../../lib/data/full-batches.js';
import { sampleIndex, writeCriteoTsv } from '../serve/fixture.js';

async function passIndices(src: AsyncIterable<{ size: number; dense: Float32Array }>): Promise<number[][]> {
  const out: number[][] = [];
  for await (const b of src) out.push(Array.from({ length: b.size }, (_, r) => sampleIndex(b.dense, r)));
  return out;
}

describe('fullBatches', () => {
  it('yields the whole batches in order, leaves out the final partial one and counts its samples, on every pass', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'embshard-full-'));
    try {
      const file = join(dir, 'd.tsv');
      for (const [n, B, dropped] of [[300, 64, 44], [256, 64, 0], [30, 64, 30]] as const) {
        writeCriteoTsv(file, n);
        const src = fullBatches(new CriteoTsvSource({ path: file, batchSize: B, maxRows: 100 }));
        expect(src.batchSize).toBe(B);
        const whole = Math.floor(n / B);
        const expected = Array.from({ length: whole }, (_, j) => Array.from({ length: B }, (_, r) => j * B + r));
        for (let pass = 0; pass < 2; pass++) {
          expect(await passIndices(src)).toEqual(expected);
          expect(src.dropped).toBe(dropped);
        }
        await src.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
