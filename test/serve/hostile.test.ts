// hostile.test.ts — the inference server against clients that misbehave: Arrow bodies whose metadata
// contradicts itself (list offsets that run backwards or past their ids, NaN dense values) are refused
// alone, and a well-formed request batched with them gets Trainer.predict's answer; id strings that are
// not hex digits; paths that are not valid percent-encoding and bytes that are not HTTP get the
// `{ error: { code, message } }` shape; clients that hang up mid-body or before their answer leave
// /metrics consistent (every request counted once, the errors the refused answers); options a timer or
// fastify could not take are INVALID_CONFIG; a reload body that is not an object is refused; a client
// that sends part of a request and stops gets 408 and loses its connection within requestTimeoutMs
// (counted under its route when its headers had arrived), while other clients are answered meanwhile.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RecordBatch, Struct, Table, makeData, tableToIPC, type Data } from 'apache-arrow';
import { CriteoTsvSource } from '../../lib/data/criteo-tsv.js';
import { batchToArrow } from '../../lib/data/arrow.js';
import { createServer, type EmbshardServer } from '../../lib/serve/index.js';
import type { Batch } from '../../lib/data/types.js';
import { trainOn, writeCriteoTsv } from './fixture.js';

const ROWS = 64, ARROW = 'application/vnd.apache.arrow.stream';
let dir: string, ck: string, batch: Batch, want: Float32Array;
let server: EmbshardServer, url: string;

/** The JSON body of samples [a, e) of the batch (integer ids). */
function jsonBody(a: number, e: number): { dense: number[][]; sparse: Record<string, number[][]> } {
  const b = batch, dense: number[][] = [], sparse: Record<string, number[][]> = {};
  for (let r = a; r < e; r++) dense.push(Array.from(b.dense.subarray(r * 13, r * 13 + 13)));
  for (const f of b.sparse.features) {
    const { lengths, ids } = b.sparse.feature(f);
    const bags: number[][] = [];
    for (let r = 0, o = 0; r < b.size; o += lengths[r]!, r++) if (r >= a && r < e) bags.push(Array.from(ids.subarray(o, o + lengths[r]!) as Int32Array));
    sparse[f] = bags;
  }
  return { dense, sparse };
}

/** The batch as an Arrow IPC stream (no label), `edit` applied to its record batch's columns first. */
function arrowBody(edit: (name: string, d: Data) => Data = (_n, d) => d): Uint8Array {
  const rb = new Table(batchToArrow(batch)).select([...batch.sparse.features, 'dense']).batches[0]!;
  const children = rb.schema.fields.map((f, i) => edit(f.name, rb.data.children[i] as Data));
  return tableToIPC(new Table(new RecordBatch(rb.schema, makeData({ type: new Struct(rb.schema.fields), length: rb.numRows, children, nullCount: 0 }))), 'stream');
}

/** A list column with other offsets (its ids as they are). */
function withOffsets(d: Data, edit: (o: Int32Array) => void): Data {
  const off = Int32Array.from(d.valueOffsets as Int32Array);
  edit(off);
  return makeData({ type: d.type, length: d.length, valueOffsets: off, child: d.children[0] as Data } as never) as Data;
}

async function post(body: unknown, type = 'application/json', path = '/v1/predict'): Promise<{ status: number; json: any }> {
  const res = await fetch(`${url}${path}`, { method: 'POST', headers: { 'content-type': type }, body: typeof body === 'string' || body instanceof Uint8Array ? body : JSON.stringify(body) });
  return { status: res.status, json: await res.json() };
}

/** Writes `payload` on a fresh connection; resolves to what came back once the server closes it (or after `ms`). */
function raw(payload: string, ms = 2000): Promise<string> {
  const port = Number(new URL(url).port);
  return new Promise((resolve) => {
    let got = '';
    const c = net.connect(port, '127.0.0.1', () => c.write(payload));
    const timer = setTimeout(() => c.destroy(), ms);
    c.on('data', (d) => (got += d));
    c.on('error', () => undefined);
    c.on('close', () => (clearTimeout(timer), resolve(got)));
  });
}

/** The value of every sample of a metric in /metrics text, by its label set. */
function samples(text: string, name: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    const m = new RegExp(`^${name}(\\{[^}]*\\})? (\\S+)$`).exec(line);
    if (m) out.set(m[1] ?? '', Number(m[2]));
  }
  return out;
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'embshard-hostile-'));
  const file = join(dir, 'd.txt');
  writeCriteoTsv(file, 64);
  const t = await trainOn(file, { batchSize: 16, seed: 5, maxRows: ROWS });
  ck = join(dir, 'ck');
  await t.save(ck);
  for await (const b of new CriteoTsvSource({ path: file, batchSize: 64, maxRows: ROWS })) batch = b;
  want = await t.predict(batch); // the oracle: the trained model itself, in process
  t.dispose();
  // requests wait up to 200 ms for company, so the bad and the good request below share a forward
  // unless the bad one is refused before it joins
  server = await createServer({ checkpoint: ck, maxWaitMs: 200 });
  url = await server.listen({ port: 0, host: '127.0.0.1' });
}, 60_000);

afterAll(async () => {
  await server?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('embshard serve against hostile clients', () => {
  it('refuses a corrupt Arrow body alone: the request batched with it gets Trainer.predict’s answer', async () => {
    // the body unedited is answered (and the decoding worker has started: the bodies below are decoded
    // within the good request's 200 ms wait)
    const ok = await post(arrowBody(), ARROW);
    expect(ok.status).toBe(200);
    for (let i = 0; i < batch.size; i++) expect(ok.json.probabilities[i]).toBeCloseTo(want[i]!, 6);
    const nan = Float32Array.from(batch.dense);
    nan[3 * 13 + 5] = Number.NaN;
    const bodies: [string, Uint8Array, RegExp][] = [
      ['a NaN dense value', arrowBody((n, d) => (n === 'dense' ? makeData({ type: d.type, length: d.length, child: makeData({ type: (d.children[0] as Data).type, length: nan.length, data: nan }) } as never) as Data : d)),
        /column 'dense': row 3, value 5 is NaN/],
      // cat_0 holds one id per row: offsets 0, 3, 2, … make row 0 three ids and row 1 minus one
      ['offsets that run backwards', arrowBody((n, d) => (n === 'cat_0' ? withOffsets(d, (o) => (o[1] = 3)) : d)), /column 'cat_0': its list offsets run backwards at row 1/],
      // cat_3's last bag claims 100 ids beyond the column's (they would be read from cat_4's)
      ['offsets past the ids', arrowBody((n, d) => (n === 'cat_3' ? withOffsets(d, (o) => (o[o.length - 1]! += 100)) : d)), /column 'cat_3': its list offsets span \[0, 164\) but the column holds 64 ids/],
    ];
    const got: unknown[] = [];
    for (const [what, body, message] of bodies) {
      const [bad, good] = await Promise.all([post(body, ARROW), post(jsonBody(0, 4))]);
      got.push({ what, good: good.status, bad: bad.status, code: bad.json.error?.code, message: message.test(bad.json.error?.message) || bad.json.error?.message });
      if (good.status === 200) for (let i = 0; i < 4; i++) expect(good.json.probabilities[i]).toBeCloseTo(want[i]!, 6);
    }
    expect(got).toEqual(bodies.map(([what]) => ({ what, good: 200, bad: 400, code: 'INVALID_ARGUMENT', message: true })));
  }, 60_000);

  it('refuses an id string that is not 1 to 8 hex digits, whatever its characters’ low bytes', async () => {
    const body = jsonBody(0, 1);
    // 'Ł' is U+0141 and 'İ' U+0130: read as latin1 bytes they would be 'A' and '0'
    for (const id of ['Ł', 'İİ', 'a\u0000', ' 1a', '1a ']) {
      const r = await post({ ...body, sparse: { ...body.sparse, cat_2: [[id]] } });
      expect([id, r.status, r.json.error?.code]).toEqual([id, 400, 'INVALID_ARGUMENT']);
      expect(r.json.error.message).toMatch(/^sparse\.cat_2\[0\]\[0\] = .* is not a Criteo hex value of 1 to 8 digits$/);
    }
  });

  it('answers a path that is not valid percent-encoding, and bytes that are not HTTP, in the error shape', async () => {
    for (const path of ['/%zz', '/v1/predict%']) {
      const res = await fetch(`${url}${path}`, { method: 'POST' });
      const json = (await res.json()) as any;
      expect([path, res.status, json.error?.code]).toEqual([path, 400, 'INVALID_ARGUMENT']);
      expect(json.error.message).toMatch(/not a valid url component/);
    }
    for (const [payload, status, code] of [
      ['GARBAGE\r\n\r\n', 400, 'INVALID_ARGUMENT'],
      ['POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n', 400, 'INVALID_ARGUMENT'],
      [`GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`, 431, 'INVALID_SIZE'],
    ] as const) {
      const got = await raw(payload);
      expect(got.split('\r\n')[0]).toMatch(new RegExp(`^HTTP/1.1 ${status} `));
      expect(JSON.parse(got.slice(got.indexOf('\r\n\r\n') + 4)).error.code).toBe(code);
    }
    expect((await fetch(`${url}/healthz`)).status).toBe(200);
  });

  it('keeps /metrics consistent when clients hang up mid-body or before their answer', async () => {
    const before = await (await fetch(`${url}/metrics`)).text();
    const body = JSON.stringify(jsonBody(0, 8));
    const head = `POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`;
    // 3 answered, 2 refused, 1 bad path; 3 hang up mid-body, 3 once their body is sent (the server then
    // waits up to 200 ms for company, so they are gone before their answer)
    const answered = await Promise.all([
      post(body), post(body), post(body),
      post({ dense: [] }), post('{"dense": [[1'),
      fetch(`${url}/%zz`).then((r) => ({ status: r.status })),
    ]);
    expect(answered.map((r) => r.status)).toEqual([200, 200, 200, 400, 400, 400]);
    await Promise.all([1, 2, 3].map(() => raw(head + body.slice(0, body.length >> 1), 20)));
    await Promise.all([1, 2, 3].map(() => raw(head + body, 20)));
    await new Promise((r) => setTimeout(r, 400)); // their forward has run
    const after = await (await fetch(`${url}/metrics`)).text();
    const delta = (name: string) => {
      const a = samples(after, name), b = samples(before, name), out: Record<string, number> = {};
      for (const [k, v] of a) if (!k.includes('/metrics') && v - (b.get(k) ?? 0) !== 0) out[k] = v - (b.get(k) ?? 0);
      return out;
    };
    expect(delta('embshard_requests_total')).toEqual({
      '{route="/v1/predict",status="200"}': 3,
      '{route="/v1/predict",status="400"}': 2,
      '{route="unmatched",status="400"}': 1,
      '{route="/v1/predict",status="aborted"}': 6,
    });
    // one error per refused answer (INVALID_SIZE: no samples; INVALID_ARGUMENT: malformed JSON, bad path)
    expect(delta('embshard_errors_total')).toEqual({ '{code="INVALID_SIZE"}': 1, '{code="INVALID_ARGUMENT"}': 2 });
  }, 30_000);

  it('refuses options a timer or fastify cannot take, and a reload body that is not an object', async () => {
    for (const [o, message] of [
      [{ decodeTimeoutMs: 2 ** 31 }, /decodeTimeoutMs must be at most 2147483647/],
      [{ requestTimeoutMs: 2 ** 31 }, /requestTimeoutMs must be at most 2147483647/],
      [{ requestTimeoutMs: 0 }, /requestTimeoutMs must be an integer >= 1/],
      [{ requestTimeoutMs: 1.5 }, /requestTimeoutMs must be an integer >= 1/],
      [{ requestTimeoutMs: '300' }, /requestTimeoutMs must be an integer >= 1/],
      [{ device: 5 }, /device must be 'cpu' or 'cuda:N'/],
      [{ logger: 'yes' }, /logger must be a boolean/],
    ] as const)
      await expect(createServer({ checkpoint: ck, ...(o as object) })).rejects.toMatchObject({ code: 'INVALID_CONFIG', message: expect.stringMatching(message) });
    const version = server.model.version;
    for (const body of ['[]', '["x"]', '"ck"']) {
      const r = await post(body, 'application/json', '/admin/reload');
      expect([body, r.status, r.json.error?.code]).toEqual([body, 400, 'INVALID_ARGUMENT']);
    }
    expect(server.model.version).toBe(version);
  });

  it('answers a request not received within requestTimeoutMs with 408 and closes it, serving others meanwhile', async () => {
    // each predict waits 400 ms for company: longer than the deadline, which bounds only receiving a request
    const slow = await createServer({ checkpoint: ck, requestTimeoutMs: 300, maxWaitMs: 400 });
    const base = await slow.listen({ port: 0, host: '127.0.0.1' });
    try {
      const port = Number(new URL(base).port);
      /** Sends `payload` and stops; resolves to what came back and when the server closed (or null after 5 s). */
      const stall = (payload: string) =>
        new Promise<{ got: string; ms: number | null }>((resolve) => {
          const t0 = Date.now();
          let got = '';
          const c = net.connect(port, '127.0.0.1', () => c.write(payload));
          const timer = setTimeout(() => (c.destroy(), resolve({ got, ms: null })), 5000);
          c.on('data', (d) => (got += d));
          c.on('error', () => undefined);
          c.on('close', () => (clearTimeout(timer), resolve({ got, ms: Date.now() - t0 })));
        });
      const body = JSON.stringify(jsonBody(0, 2));
      // a body of 100 bytes announced, 10 sent; headers never finished; nothing sent at all
      const stalled = [
        stall(`POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"dense": `),
        stall('POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Le'),
        stall(''),
      ];
      // meanwhile, other connections are answered (after their 400 ms wait)
      const during: number[] = [];
      for (let i = 0; i < 3; i++) {
        await new Promise((r) => setTimeout(r, 80));
        const res = await fetch(`${base}/v1/predict`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
        during.push(res.status);
        await res.arrayBuffer();
      }
      expect(during).toEqual([200, 200, 200]);
      for (const { got, ms } of await Promise.all(stalled)) {
        expect(ms, `closed within 5 s (got ${JSON.stringify(got)})`).not.toBeNull();
        expect(ms!).toBeGreaterThanOrEqual(250);
        expect(got.split('\r\n')[0]).toBe('HTTP/1.1 408 Request Timeout');
        expect(JSON.parse(got.slice(got.indexOf('\r\n\r\n') + 4))).toEqual({ error: { code: 'INVALID_ARGUMENT', message: expect.stringMatching(/not received within 300 ms/) } });
      }
      // only the one whose headers had arrived became a request: counted once, as answered 408
      const text = await (await fetch(`${base}/metrics`)).text();
      expect(samples(text, 'embshard_requests_total').get('{route="/v1/predict",status="408"}')).toBe(1);
      expect(samples(text, 'embshard_requests_total').get('{route="/v1/predict",status="aborted"}')).toBeUndefined();
      expect(samples(text, 'embshard_errors_total').get('{code="INVALID_ARGUMENT"}')).toBe(1);
      expect(samples(text, 'embshard_requests_total').get('{route="/v1/predict",status="200"}')).toBe(3);
    } finally {
      await slow.close();
    }
  }, 30_000);
});
