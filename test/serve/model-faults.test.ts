// model-faults.test.ts — a served model that cannot answer a request which passed validation is the
// server's fault: a table row that is not finite (written so, then saved) makes the dense forward refuse
// the pooled embeddings (INVALID_ARGUMENT naming pooled[…]), and the server answers 500 INTERNAL with that
// message rather than blaming the client with a 400. Requests that do not read the row are answered.
import { beforeAll, describe, expect, it } from 'vitest';
import { join } from 'node:path';
import { EmbeddingCollection } from '../../lib/collection.js';
import { createServer } from '../../lib/serve/index.js';
import { tempDir } from '../temp-dir.js';
import { trainOn, writeCriteoTsv } from './fixture.js';

const tmp = tempDir('serve-model-faults');
let ck: string;

beforeAll(async () => {
  const file = join(tmp.dir, 'd.txt');
  writeCriteoTsv(file, 32);
  const t = await trainOn(file, { batchSize: 16, seed: 1, maxRows: 50 });
  (t.embeddings as EmbeddingCollection).writeRows('cat_0', [7], new Float32Array(4).fill(Infinity));
  ck = join(tmp.dir, 'ck');
  await t.save(ck);
  t.dispose();
}, 60_000);

function body(id0: number): unknown {
  const sparse: Record<string, number[][]> = {};
  for (let j = 0; j < 26; j++) sparse[`cat_${j}`] = [[j === 0 ? id0 : 1]];
  return { dense: [Array.from({ length: 13 }, () => 0.5)], sparse };
}

describe('a served model that cannot answer a validated request', () => {
  it('a table row that is not finite: 500 INTERNAL naming pooled[…]; other requests answered', async () => {
    const s = await createServer({ checkpoint: ck });
    const url = await s.listen({ port: 0, host: '127.0.0.1' });
    try {
      const post = async (b: unknown) => {
        const r = await fetch(`${url}/v1/predict`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(b) });
        return { status: r.status, json: (await r.json()) as { error?: { code: string; message: string }; probabilities?: number[] } };
      };
      const bad = await post(body(7));
      expect(bad.status).toBe(500);
      expect(bad.json.error).toMatchObject({ code: 'INTERNAL', message: expect.stringMatching(/passed validation \(INVALID_ARGUMENT\): pooled\[\d+\] \(sample 0, column \d+\) is Infinity/) });
      const good = await post(body(3));
      expect(good.status).toBe(200);
      expect(good.json.probabilities!.length).toBe(1);
      expect(Number.isFinite(good.json.probabilities![0])).toBe(true);
    } finally {
      await s.close();
    }
  }, 60_000);
});
