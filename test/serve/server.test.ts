// server.test.ts — the inference server against 127.0.0.1: predictions equal Trainer.predict on the same
// samples (JSON ids, raw Criteo hex strings hashed as the TSV reader hashes them, Arrow IPC bodies),
// concurrent requests share forward passes, every kind of bad request gets a 4xx with its EmbshardError
// code and the server keeps serving, reload under a bounded concurrent load loses no request and each
// response is exactly the old or the new model's, and memory stays flat over a few thousand requests.
// Probabilities are compared to 6 decimals: a sample's forward is computed inside micro-batches of other
// sizes than the oracle's batch, and the dense GEMMs may round differently with the batch size.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import v8 from 'node:v8';
import vm from 'node:vm';
import { join } from 'node:path';
import { tableToIPC, Table } from 'apache-arrow';
import { CriteoTsvSource } from '../../lib/data/criteo-tsv.js';
import { batchToArrow } from '../../lib/data/arrow.js';
import { embeddingsFor } from '../../lib/train/embeddings.js';
import { Trainer } from '../../lib/train/trainer.js';
import { createServer, type EmbshardServer } from '../../lib/serve/index.js';
import type { Batch } from '../../lib/data/types.js';
import { criteoLine, writeCriteoTsv } from './fixture.js';

const ROWS = 64;
let dir: string, file: string, ck1: string, ck2: string;
let batches: Batch[];
let want1: Float32Array, want2: Float32Array;
let server: EmbshardServer, url: string;

async function train(steps: number): Promise<Trainer> {
  const src = new CriteoTsvSource({ path: file, batchSize: 16, maxRows: ROWS });
  const emb = embeddingsFor(src.features, src.tableRows, { dim: 4, optimizer: { type: 'adagrad', lr: 0.1 }, seed: 5 });
  const t = new Trainer({ model: { denseIn: 13, bottom: [8, 4], top: [8, 1], numSparse: 26, embDim: 4, interaction: 'dot' }, embeddings: emb, optimizer: { type: 'adagrad', lr: 0.05 }, seed: 5 });
  let k = 0;
  for await (const b of src) if (k++ < steps) await t.step(b);
  return t;
}

/** The JSON body of samples [a, e) of a batch (integer ids). */
function jsonBody(b: Batch, a = 0, e = b.size): { dense: number[][]; sparse: Record<string, number[][]> } {
  const dense: number[][] = [];
  for (let r = a; r < e; r++) dense.push(Array.from(b.dense.subarray(r * 13, r * 13 + 13)));
  const sparse: Record<string, number[][]> = {};
  for (const f of b.sparse.features) {
    const { lengths, ids } = b.sparse.feature(f);
    const bags: number[][] = [];
    let o = 0;
    for (let r = 0; r < b.size; r++) {
      if (r >= a && r < e) bags.push(Array.from(ids.subarray(o, o + lengths[r]!) as Int32Array));
      o += lengths[r]!;
    }
    sparse[f] = bags;
  }
  return { dense, sparse };
}

async function post(body: unknown, type = 'application/json', path = '/v1/predict'): Promise<{ status: number; json: any }> {
  const res = await fetch(`${url}${path}`, { method: 'POST', headers: { 'content-type': type }, body: typeof body === 'string' || body instanceof Uint8Array ? body : JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, json: text ? JSON.parse(text) : undefined };
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'embshard-serve-'));
  file = join(dir, 'd.txt');
  writeCriteoTsv(file, 64);
  const t1 = await train(2), t2 = await train(4);
  ck1 = join(dir, 'ck1');
  ck2 = join(dir, 'ck2');
  await t1.save(ck1);
  await t2.save(ck2);
  batches = [];
  for await (const b of new CriteoTsvSource({ path: file, batchSize: 64, maxRows: ROWS })) batches.push(b);
  want1 = await t1.predict(batches[0]!);
  want2 = await t2.predict(batches[0]!);
  expect(want1).not.toEqual(want2);
  t1.embeddings.dispose?.();
  t2.embeddings.dispose?.();
  server = await createServer({ checkpoint: ck1, maxWaitMs: 2, bodyLimit: 256 * 1024, maxRequestSamples: 512 });
  url = await server.listen({ port: 0, host: '127.0.0.1' });
}, 60_000);

afterAll(async () => {
  await server?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('embshard serve', () => {
  it('answers with Trainer.predict’s probabilities: batched, one at a time concurrently, hex strings, Arrow', async () => {
    const b = batches[0]!;
    const all = await post(jsonBody(b));
    expect(all.status).toBe(200);
    expect(all.json.probabilities.length).toBe(64);
    for (let i = 0; i < 64; i++) expect(all.json.probabilities[i]).toBeCloseTo(want1[i]!, 6);
    // 64 concurrent single-sample requests share forward passes
    const metricsBefore = await (await fetch(`${url}/metrics`)).text();
    const one = await Promise.all(Array.from({ length: 64 }, (_, i) => post(jsonBody(b, i, i + 1))));
    one.forEach((r, i) => {
      expect(r.status).toBe(200);
      expect(r.json.probabilities[0]).toBeCloseTo(want1[i]!, 6);
    });
    const forwards = (text: string) => Number(/embshard_batch_requests_count (\d+)/.exec(text)![1]);
    const metricsAfter = await (await fetch(`${url}/metrics`)).text();
    expect(forwards(metricsAfter) - forwards(metricsBefore)).toBeLessThan(64);
    // the default (no wait): requests read together, or arriving while a forward runs, still share forwards
    const plain = await createServer({ checkpoint: ck1 });
    // listen options are checked before the socket opens
    await expect(plain.listen({ port: 65536 })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringContaining('port must be an integer in [0, 65535]') });
    await expect(plain.listen({ port: 1.5 })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await expect(plain.listen({ prot: 80 } as never)).rejects.toMatchObject({ code: 'INVALID_CONFIG', message: expect.stringContaining('listen options.prot') });
    const plainUrl = await plain.listen({ port: 0, host: '127.0.0.1' });
    try {
      const answers = await Promise.all(Array.from({ length: 64 }, (_, i) =>
        fetch(`${plainUrl}/v1/predict`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(jsonBody(b, i, i + 1)) }).then((r) => r.json() as Promise<{ probabilities: number[] }>)));
      answers.forEach((r, i) => expect(r.probabilities[0]).toBeCloseTo(want1[i]!, 6));
      expect(forwards(await (await fetch(`${plainUrl}/metrics`)).text())).toBeLessThan(64);
    } finally {
      await plain.close();
    }
    // raw Criteo lines: dense = ln(1 + max(x, 0)) of the integers, categoricals as hex strings
    const raw = (i: number) => {
      const cols = criteoLine(i).split('\t');
      return { dense: cols.slice(1, 14).map((x) => Math.fround(Math.log1p(Math.max(Number(x), 0)))), cats: cols.slice(14) };
    };
    const hexBody = { dense: [0, 1, 2].map((i) => raw(i).dense), sparse: Object.fromEntries(b.sparse.features.map((f, j) => [f, [0, 1, 2].map((i) => [raw(i).cats[j]!])])) };
    const hex = await post(hexBody);
    expect(hex.status).toBe(200);
    for (let i = 0; i < 3; i++) expect(hex.json.probabilities[i]).toBeCloseTo(want1[i]!, 6);
    // an Arrow IPC body (the training layout without its label column)
    const rb = batchToArrow(b);
    const noLabel = new Table(rb).select([...b.sparse.features, 'dense']);
    const arrow = await post(tableToIPC(noLabel, 'stream'), 'application/vnd.apache.arrow.stream');
    expect(arrow.status, JSON.stringify(arrow.json)).toBe(200);
    for (let i = 0; i < 64; i++) expect(arrow.json.probabilities[i]).toBeCloseTo(want1[i]!, 6);
  }, 60_000);

  it('refuses each kind of bad request with its code and keeps serving', async () => {
    const good = jsonBody(batches[0]!, 0, 2);
    const cases: [string, unknown, number, string, string?][] = [
      ['malformed JSON', '{"dense": [[1,2', 400, 'INVALID_ARGUMENT'],
      ['unknown top-level field', { ...good, labels: [1, 0] }, 400, 'INVALID_ARGUMENT'],
      ['unknown feature', { ...good, sparse: { ...good.sparse, cat_99: [[1], [2]] } }, 400, 'UNKNOWN_FEATURE'],
      ['missing feature', { ...good, sparse: Object.fromEntries(Object.entries(good.sparse).slice(1)) }, 400, 'MISSING_FEATURE'],
      ['short dense row', { ...good, dense: [good.dense[0]!.slice(1), good.dense[1]] }, 400, 'LENGTH_MISMATCH'],
      ['bags ≠ samples', { ...good, sparse: { ...good.sparse, cat_3: [[1]] } }, 400, 'LENGTH_MISMATCH'],
      ['id ≥ rows', { ...good, sparse: { ...good.sparse, cat_2: [[ROWS], [1]] } }, 400, 'ID_OUT_OF_RANGE'],
      ['negative id', { ...good, sparse: { ...good.sparse, cat_2: [[-1], [1]] } }, 400, 'ID_OUT_OF_RANGE'],
      ['fractional id', { ...good, sparse: { ...good.sparse, cat_2: [[1.5], [1]] } }, 400, 'ID_OUT_OF_RANGE'],
      ['bad hex string', { ...good, sparse: { ...good.sparse, cat_2: [['xyz'], [1]] } }, 400, 'INVALID_ARGUMENT'],
      ['NaN-like dense value', { ...good, dense: [good.dense[0]!.map(() => 'a'), good.dense[1]] }, 400, 'INVALID_ARGUMENT'],
      ['no samples', { dense: [], sparse: {} }, 400, 'INVALID_SIZE'],
      ['too many samples', { dense: Array(513).fill(good.dense[0]), sparse: {} }, 400, 'INVALID_SIZE'],
      ['oversized body', { ...good, pad: 'x'.repeat(300 * 1024) }, 413, 'INVALID_SIZE'],
      ['not Arrow', ['arrow', 'garbage bytes'], 400, 'INVALID_ARGUMENT', 'application/vnd.apache.arrow.stream'],
      ['wrong content type', ['text', 'hello'], 415, 'INVALID_ARGUMENT', 'text/plain'],
      ['wrong content type', ['xml', '<a/>'], 415, 'INVALID_ARGUMENT', 'application/xml'],
    ];
    for (const [name, body, status, code, type] of cases) {
      const r = type ? await post((body as string[])[1]!, type) : await post(body);
      expect([name, r.status, r.json?.error?.code]).toEqual([name, status, code]);
      expect(typeof r.json.error.message).toBe('string');
    }
    // a finite JSON number beyond float32 is refused where the request is read, naming its place
    const huge = await post({ ...good, dense: [good.dense[0]!.map((x: number, j: number) => (j === 2 ? 1e300 : x)), good.dense[1]] });
    expect([huge.status, huge.json.error.code, huge.json.error.message]).toEqual([400, 'INVALID_ARGUMENT', "dense[0][2] = 1e+300 is beyond the float32 range of the model's inputs"]);
    expect((await fetch(`${url}/nope`)).status).toBe(404);
    const ok = await post(good);
    expect(ok.status).toBe(200);
    expect((await (await fetch(`${url}/healthz`)).json()).status).toBe('ok');
    const m = await (await fetch(`${url}/metrics`)).text();
    expect(m).toMatch(/embshard_errors_total\{code="ID_OUT_OF_RANGE"\} 3/);
    expect(m).toMatch(/embshard_request_duration_seconds_bucket\{le="0.001",route="\/v1\/predict"\}/);
  }, 60_000);

  it('an Arrow body that sends the Arrow reader into a minutes-long loop is refused after decodeTimeoutMs; requests meanwhile and after are answered', async () => {
    // a one-column Arrow IPC stream as apache-arrow writes it, and the same with byte 119 (in the schema's
    // metadata) set to 0x7f: the reader then loops over a count it trusts (over 30 s, measured)
    const stream = Buffer.from(
      '/////8AAAAAQAAAAAAAKABAADgAHAAgACgAAAAAAAAEQAAAAAAAEAAgACAAAAAQACAAAAAQAAAABAAAAFAAAABAAGAAEAAsAEwAUAAAADAAQAAAAFAAAAAAAAAEYAAAAAAAAEFwAAAAFAAAAZGVuc2UAAAABAAAAFAAAABAAFAAEAAAADwAQAAAACAAQAAAAEAAAABQAAAAAAAADGAAAAAEAAAB4AAAAAAAAAAAABgAGAAQABgAAAAEABgAIAAQABgAAAAIAAAD/////oAAAABQAAAAAAAAAAAAKAA4ADAAHAAgACgAAAAAAAAMQAAAABAAKABgADAAIAAQACgAAABQAAABIAAAAAQAAAAAAAAAAAAAAAwAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAACAAAAAQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAD/////AAAAAA==',
      'base64',
    );
    const looping = Uint8Array.from(stream);
    looping[119] = 0x7f;
    const s = await createServer({ checkpoint: ck1, decodeTimeoutMs: 300 });
    const u = await s.listen({ port: 0 });
    const send = async (body: Uint8Array | string, type: string) => {
      const res = await fetch(`${u}/v1/predict`, { method: 'POST', headers: { 'content-type': type }, body });
      return { status: res.status, json: (await res.json()) as any };
    };
    try {
      const order: string[] = [];
      const b = batches[0]!;
      const [bad, json] = await Promise.all([
        send(looping, 'application/vnd.apache.arrow.stream').then((r) => (order.push('arrow'), r)),
        send(JSON.stringify(jsonBody(b, 0, 2)), 'application/json').then((r) => (order.push('json'), r)),
      ]);
      expect([bad.status, bad.json.error.code]).toEqual([400, 'INVALID_ARGUMENT']);
      expect(bad.json.error.message).toMatch(/took longer than 300 ms to decode/);
      // the JSON request was answered while the Arrow body was still being decoded
      expect(order).toEqual(['json', 'arrow']);
      expect(json.status).toBe(200);
      // the next Arrow body gets a fresh worker
      const arrow = await send(tableToIPC(new Table(batchToArrow(b)).select([...b.sparse.features, 'dense']), 'stream'), 'application/vnd.apache.arrow.stream');
      expect(arrow.status).toBe(200);
      for (let i = 0; i < b.size; i++) expect(arrow.json.probabilities[i]).toBeCloseTo(want1[i]!, 6);
    } finally {
      await s.close();
    }
  }, 60_000);

  it('reloads under concurrent load: no request fails, each answer is the old or the new model’s', async () => {
    const b = batches[0]!;
    const bodies = Array.from({ length: 64 }, (_, i) => JSON.stringify(jsonBody(b, i, i + 1)));
    const results: { i: number; status: number; p: number; version: number }[] = [];
    let next = 0, reloaded: Promise<{ status: number; json: any }> | undefined;
    const worker = async () => {
      while (next < 600) {
        const k = next++;
        if (k === 150) reloaded = post({ checkpoint: ck2 }, 'application/json', '/admin/reload');
        const r = await post(bodies[k % 64]!);
        results.push({ i: k % 64, status: r.status, p: r.json?.probabilities?.[0], version: r.json?.model });
      }
    };
    await Promise.all(Array.from({ length: 8 }, worker));
    const rl = await reloaded!;
    expect(rl.status).toBe(200);
    expect(rl.json.version).toBe(2);
    expect(results.length).toBe(600);
    expect(results.filter((r) => r.status !== 200)).toEqual([]);
    for (const r of results) expect(r.p).toBeCloseTo((r.version === 1 ? want1 : want2)[r.i]!, 6);
    expect(results.filter((r) => r.version === 2).length).toBeGreaterThan(0);
    expect(results.slice(-50).every((r) => r.version === 2)).toBe(true);
    // a failed reload keeps the model serving
    const bad = await post({ checkpoint: join(dir, 'missing') }, 'application/json', '/admin/reload');
    expect([bad.status, bad.json.error.code]).toEqual([422, 'CHECKPOINT_MISSING']);
    // a file named as the checkpoint folder is the client's mistake too (422), not a server fault (500)
    const notDir = await post({ checkpoint: join(ck1, 'trainer.json') }, 'application/json', '/admin/reload');
    expect([notDir.status, notDir.json.error.code]).toEqual([422, 'CHECKPOINT_MISSING']);
    const again = await post(bodies[0]!);
    expect(again.json.model).toBe(2);
    expect(again.json.probabilities[0]).toBeCloseTo(want2[0]!, 6);
  }, 120_000);

  it('keeps memory flat over a few thousand requests', async () => {
    const body = JSON.stringify(jsonBody(batches[0]!, 0, 8));
    const run = async (n: number) => {
      let k = 0;
      await Promise.all(Array.from({ length: 16 }, async () => {
        while (k < n) {
          k++;
          expect((await post(body)).status).toBe(200);
        }
      }));
    };
    v8.setFlagsFromString('--expose-gc');
    const gc = vm.runInNewContext('gc') as () => void;
    const settle = () => {
      gc();
      gc();
      return process.memoryUsage();
    };
    await run(500);
    const m0 = settle();
    await run(3000);
    const m1 = settle();
    // 3,000 requests of 8 samples: keeping one request's arrays (≈ 2 KiB: dense, lengths, ids) would add
    // ≈ 6 MiB of heap; measured growth is under 1 MiB
    expect(m1.heapUsed - m0.heapUsed).toBeLessThan(4 * 2 ** 20);
    expect(m1.rss - m0.rss).toBeLessThan(48 * 2 ** 20);
  }, 180_000);
});
