// load.test.ts — the inference server used as a production service is: many clients at once. Hundreds of
// concurrent requests of mixed sizes, bag lengths and bodies (JSON, Arrow) merged into shared forwards
// each get, bit for bit, what the model computes for that request alone (a Trainer loaded from the same
// checkpoint, called on the request's batch), bad ones among them are refused alone, and /metrics counts
// every request once by status; reloads while requests stream: each answer is one version's, none
// fails, every retired model is freed; a merged forward the model refuses fails only the batch at fault;
// at most maxInFlight prediction requests are held (one more gets 503 before its body is read), and a
// client that hangs up before its forward frees its place and costs no forward; clients
// that trickle bodies byte by byte are answered and others are served meanwhile; bodies over bodyLimit
// get 413 without being read; close() and `embshard serve` on SIGTERM answer the requests they hold,
// refuse new connections, free the model (a reload under way too) and end.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { spawn } from 'node:child_process';
import net from 'node:net';
import { join } from 'node:path';
import { Table, tableToIPC } from 'apache-arrow';
import { JaggedBatch } from '../../lib/batch.js';
import { batchToArrow } from '../../lib/data/arrow.js';
import { Trainer, type PredictBatch } from '../../lib/train/trainer.js';
import { ModelSlot, MicroBatcher, createServer } from '../../lib/serve/index.js';
import { tempDir } from '../temp-dir.js';
import { trainOn, writeCriteoTsv } from './fixture.js';

const ROWS = 64, D = 13, F = 26, ARROW = 'application/vnd.apache.arrow.stream';
const features = Array.from({ length: F }, (_, j) => `cat_${j}`);
const tmp = tempDir('serve-load');
let ck1: string, ck2: string, oracle1: Trainer, oracle2: Trainer;
/** Rows of each feature's table (both checkpoints were trained on the same data). */
let rows: readonly number[];

/** A request: its samples' dense rows and bags (one per feature per sample), as numbers. */
interface Req {
  size: number;
  dense: Float32Array;
  bags: number[][][]; // [feature][sample] → ids
}

/** A deterministic stream of numbers in [0, 1). */
function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A request of `size` samples: dense values in [0, 3), bags of 0 to 3 ids of their tables. */
function makeReq(r: () => number, size: number): Req {
  const dense = Float32Array.from({ length: size * D }, () => 3 * r());
  const bags = features.map((_, f) => Array.from({ length: size }, () => Array.from({ length: Math.floor(4 * r()) }, () => Math.floor(rows[f]! * r()))));
  return { size, dense, bags };
}

/** The request as the batch the oracle runs: built here from its numbers, not by the server's parser. */
function batchOf(q: Req): PredictBatch & { labels: Float32Array } {
  const lengths = new Int32Array(F * q.size);
  const ids: number[] = [];
  q.bags.forEach((col, f) => col.forEach((bag, b) => ((lengths[f * q.size + b] = bag.length), ids.push(...bag))));
  return { dense: q.dense, sparse: JaggedBatch.fromLengths({ features, batchSize: q.size, lengths, ids: Int32Array.from(ids) }), size: q.size, labels: new Float32Array(q.size) };
}

function jsonOf(q: Req): string {
  const dense = Array.from({ length: q.size }, (_, b) => Array.from(q.dense.subarray(b * D, (b + 1) * D)));
  return JSON.stringify({ dense, sparse: Object.fromEntries(features.map((f, j) => [f, q.bags[j]])) });
}

function arrowOf(q: Req): Uint8Array {
  return tableToIPC(new Table(batchToArrow(batchOf(q))).select([...features, 'dense']), 'stream');
}

/** What the model in `oracle` computes for the request alone. */
function alone(oracle: Trainer, q: Req): Promise<Float32Array> {
  return oracle.predict(batchOf(q));
}

/** Probabilities from a JSON answer, as the float32 values the server computed (JSON numbers round-trip). */
function f32(p: number[]): number[] {
  return p.map((x) => Math.fround(x));
}

async function post(url: string, body: string | Uint8Array, type = 'application/json', path = '/v1/predict'): Promise<{ status: number; json: any; headers: Headers }> {
  const res = await fetch(`${url}${path}`, { method: 'POST', headers: { 'content-type': type }, body });
  const text = await res.text();
  return { status: res.status, json: text ? JSON.parse(text) : undefined, headers: res.headers };
}

/** The value of every sample of a metric in /metrics text, by its label set. */
async function metric(url: string, name: string): Promise<Map<string, number>> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    const m = new RegExp(`^${name}(\\{[^}]*\\})? (\\S+)$`).exec(line);
    if (m) out.set(m[1] ?? '', Number(m[2]));
  }
  return out;
}

/** The change of a metric's samples between two readings (those that changed). */
function delta(after: Map<string, number>, before: Map<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, v] of after) if (v !== (before.get(k) ?? 0)) out[k] = v - (before.get(k) ?? 0);
  return out;
}

/** Polls `cond` until it holds (at most 1,000 looks); throws saying `what` otherwise. */
async function until(what: string, cond: () => boolean | Promise<boolean>): Promise<void> {
  for (let i = 0; i < 1000; i++) {
    if (await cond()) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`never: ${what}`);
}

async function healthz(url: string): Promise<{ inFlight: number; waiting: number }> {
  return (await (await fetch(`${url}/healthz`)).json()) as { inFlight: number; waiting: number };
}

/**
 * A POST on its own connection whose bytes the test releases: `send(n)` writes the next n bytes (one at a
 * time with `byByte`), `rest()` the others; `answer` is the status and JSON once the server closes.
 */
function manual(url: string, body: string, byByte = false): { socket: net.Socket; send(n: number): Promise<void>; rest(): Promise<void>; answer: Promise<{ status: number; json: any }> } {
  const bytes = Buffer.from(`POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
  const c = net.connect(Number(new URL(url).port), '127.0.0.1');
  c.setNoDelay(true);
  let at = 0, got = '';
  const answer = new Promise<{ status: number; json: any }>((resolve, reject) => {
    c.on('data', (d) => (got += d));
    c.on('error', reject);
    c.on('close', () => {
      const status = Number(/^HTTP\/1\.1 (\d+)/.exec(got)?.[1] ?? 0);
      const text = got.slice(got.indexOf('\r\n\r\n') + 4);
      resolve({ status, json: text ? JSON.parse(text) : undefined });
    });
  });
  const send = async (n: number) => {
    const end = Math.min(bytes.length, at + n);
    if (!byByte) {
      c.write(bytes.subarray(at, end));
      at = end;
      return;
    }
    for (; at < end; at++) {
      c.write(bytes.subarray(at, at + 1));
      await new Promise((r) => setImmediate(r));
    }
  };
  answer.catch(() => undefined); // a socket the test destroys
  return { socket: c, send, rest: () => send(bytes.length - at), answer };
}

beforeAll(async () => {
  const file = join(tmp.dir, 'd.txt');
  writeCriteoTsv(file, 256);
  const t1 = await trainOn(file, { batchSize: 64, seed: 5, maxRows: ROWS });
  const t2 = await trainOn(file, { batchSize: 32, seed: 9, maxRows: ROWS });
  ck1 = join(tmp.dir, 'ck1');
  ck2 = join(tmp.dir, 'ck2');
  await t1.save(ck1);
  await t2.save(ck2);
  t1.dispose();
  t2.dispose();
  oracle1 = await Trainer.load(ck1);
  oracle2 = await Trainer.load(ck2);
  rows = oracle1.inputs!.tableRows;
  expect(oracle2.inputs!.tableRows).toEqual(rows);
}, 120_000);

afterAll(() => {
  oracle1?.dispose();
  oracle2?.dispose();
});

describe('embshard serve under load', () => {
  it('answers hundreds of concurrent requests of mixed sizes and bodies bit for bit as each alone; bad ones fail alone; /metrics counts each', async () => {
    const s = await createServer({ checkpoint: ck1 });
    const url = await s.listen({ port: 0 });
    try {
      const r = rng(1);
      const N = 400;
      type Case = { body: string | Uint8Array; type: string; want?: number[]; code?: string };
      const cases: Case[] = [];
      for (let i = 0; i < N; i++) {
        const q = makeReq(r, 1 + Math.floor(24 * r()));
        if (i % 8 === 7) {
          // refused where it is read, whatever it would have been merged with
          const withBags = (f: number, col: number[][]) => jsonOf({ ...q, bags: q.bags.map((c, g) => (g === f ? col : c)) });
          const kinds: [string, string][] = [
            [withBags(3, [[ROWS], ...q.bags[3]!.slice(1)]), 'ID_OUT_OF_RANGE'],
            [jsonOf(q).replace('"cat_5":', '"cat_99":'), 'UNKNOWN_FEATURE'],
            [withBags(2, q.bags[2]!.slice(1)), 'LENGTH_MISMATCH'],
            [jsonOf(q).slice(0, 40), 'INVALID_ARGUMENT'],
          ];
          const [body, code] = kinds[(i >> 3) % kinds.length]!;
          cases.push({ body, type: 'application/json', code });
          continue;
        }
        const want = Array.from(await alone(oracle1, q));
        cases.push(i % 5 === 0 ? { body: arrowOf(q), type: ARROW, want } : { body: jsonOf(q), type: 'application/json', want });
      }
      const good = cases.filter((c) => c.want), bad = cases.filter((c) => c.code);
      const [req0, err0, fwd0, smp0] = await Promise.all(['embshard_requests_total', 'embshard_errors_total', 'embshard_batch_requests_count', 'embshard_batch_samples_sum'].map((m) => metric(url, m)));
      const answers = await Promise.all(cases.map((c) => post(url, c.body, c.type)));
      const wrong = answers.flatMap((a, i) => {
        const c = cases[i]!;
        if (c.want) return a.status === 200 && a.json.model === 1 && JSON.stringify(f32(a.json.probabilities)) === JSON.stringify(c.want) ? [] : [{ i, status: a.status, json: a.json }];
        return a.status === 400 && a.json.error.code === c.code ? [] : [{ i, status: a.status, json: a.json, code: c.code }];
      });
      expect(wrong).toEqual([]);
      const [req1, err1, fwd1, smp1] = await Promise.all(['embshard_requests_total', 'embshard_errors_total', 'embshard_batch_requests_count', 'embshard_batch_samples_sum'].map((m) => metric(url, m)));
      const metricsRoute = (d: Record<string, number>) => Object.fromEntries(Object.entries(d).filter(([k]) => !k.includes('/metrics')));
      expect(metricsRoute(delta(req1, req0))).toEqual({ '{route="/v1/predict",status="200"}': good.length, '{route="/v1/predict",status="400"}': bad.length });
      const codes: Record<string, number> = {};
      for (const c of bad) codes[`{code="${c.code}"}`] = (codes[`{code="${c.code}"}`] ?? 0) + 1;
      expect(delta(err1, err0)).toEqual(codes);
      // every good sample went through exactly one forward, and forwards were shared
      expect(smp1.get('')! - smp0.get('')!).toBe(good.reduce((n, c) => n + c.want!.length, 0));
      expect(fwd1.get('')! - fwd0.get('')!).toBeLessThan(good.length);
    } finally {
      await s.close();
    }
  }, 120_000);

  it('reloads while requests stream: every answer is bit for bit one version’s, none fails, each retired model is freed', async () => {
    const s = await createServer({ checkpoint: ck1 });
    const url = await s.listen({ port: 0 });
    try {
      const r = rng(2);
      const reqs = Array.from({ length: 48 }, () => makeReq(r, 1 + Math.floor(8 * r())));
      const want = await Promise.all([oracle1, oracle2].map((o) => Promise.all(reqs.map(async (q) => JSON.stringify(Array.from(await alone(o, q)))))));
      const bodies = reqs.map(jsonOf);
      // versions 2, 3, 4 load ck2, ck1, ck2: odd versions are ck1's model, even ones ck2's
      const reloadAt = new Map([[60, ck2], [140, ck1], [220, ck2]]);
      const first = s.model;
      const reloads: Promise<typeof first>[] = [];
      const got: { k: number; status: number; version: number; p: string }[] = [];
      let next = 0, lastSeen = false;
      // requests stream until 300 are sent and one has been answered by the last reload's model (version 4),
      // however long the reloads take on a loaded machine (a bound of 20 000 ends a run whose reloads hang)
      await Promise.all(Array.from({ length: 16 }, async () => {
        while ((next < 300 || !lastSeen) && next < 20_000) {
          const k = next++;
          const ckAt = reloadAt.get(k);
          if (ckAt) reloads.push(s.reload(ckAt));
          const a = await post(url, bodies[k % bodies.length]!);
          if (a.json?.model === 4) lastSeen = true;
          got.push({ k, status: a.status, version: a.json?.model, p: JSON.stringify(f32(a.json?.probabilities ?? [])) });
        }
      }));
      const loaded = await Promise.all(reloads);
      expect(loaded.map((m) => [m.version, m.checkpoint])).toEqual([[2, ck2], [3, ck1], [4, ck2]]);
      const retired = [first, ...loaded.slice(0, 2)];
      expect(got.length).toBe(next);
      const off = got.filter((g) => g.status !== 200 || g.p !== want[g.version % 2 === 1 ? 0 : 1]![g.k % bodies.length]);
      expect(off).toEqual([]);
      expect(got.some((g) => g.version === 1) && got.some((g) => g.version === 4)).toBe(true);
      // every model retired by a reload has been freed once its last request was answered
      const oneReq = batchOf(reqs[0]!);
      await until('the retired models are freed', async () => {
        const settled = await Promise.all(retired.map((m) => m.trainer.predict(oneReq).then(() => 'alive', (e: { code?: string }) => e.code)));
        return settled.every((c) => c === 'DISPOSED');
      });
      expect(s.model.version).toBe(4);
      expect(Array.from(await s.model.trainer.predict(oneReq))).toEqual(JSON.parse(want[1]![0]!));
    } finally {
      await s.close();
    }
  }, 120_000);

  it('runs a merged forward the model refuses again request by request: only the batch at fault fails', async () => {
    const slot = await ModelSlot.open(ck1);
    const forwards: number[] = [];
    const batcher = new MicroBatcher({ maxBatch: 1024, maxWaitMs: 0, onBatch: (_s, n) => forwards.push(n) });
    try {
      const r = rng(3);
      const qs = [makeReq(r, 3), makeReq(r, 2), makeReq(r, 4)];
      const nan = batchOf(qs[1]!);
      nan.dense = Float32Array.from(nan.dense);
      nan.dense[D + 4] = Number.NaN; // a batch submitted as is (an embedder's, not a parsed request's)
      const settled = await Promise.allSettled([batchOf(qs[0]!), nan, batchOf(qs[2]!)].map((b) => batcher.submit(b, slot.acquire())));
      expect(forwards).toEqual([3]);
      expect(settled[1]).toMatchObject({ status: 'rejected', reason: { code: 'INVALID_ARGUMENT' } });
      // the error names the sample of the batch that holds it, not its place in the merged forward
      expect((settled[1] as PromiseRejectedResult).reason.message).toMatch(/\(sample 1,/);
      for (const k of [0, 2]) expect(settled[k]).toEqual({ status: 'fulfilled', value: await alone(oracle1, qs[k]!) });
    } finally {
      await slot.close();
    }
  }, 60_000);

  it('holds at most maxInFlight prediction requests: one more gets 503 before its body is read, and is counted', async () => {
    const s = await createServer({ checkpoint: ck1, maxInFlight: 4 });
    const url = await s.listen({ port: 0 });
    try {
      const r = rng(4);
      const qs = Array.from({ length: 4 }, () => makeReq(r, 2));
      const held = qs.map((q) => manual(url, jsonOf(q)));
      for (const h of held) await h.send(200); // headers and part of the body
      await until('four requests are held', async () => (await healthz(url)).inFlight === 4);
      const over = await post(url, jsonOf(qs[0]!));
      expect([over.status, over.json.error.code, over.headers.get('retry-after')]).toEqual([503, 'OVERLOADED', '1']);
      expect(over.json.error.message).toMatch(/maxInFlight/);
      // a body of 1 GiB announced and never sent is answered all the same
      const huge = await new Promise<string>((resolve) => {
        let got = '';
        const c = net.connect(Number(new URL(url).port), '127.0.0.1', () => c.write(`POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${2 ** 30}\r\n\r\n`));
        c.on('data', (d) => {
          got += d;
          if (got.includes('}}')) c.destroy();
        });
        c.on('close', () => resolve(got));
      });
      expect(huge.split('\r\n')[0]).toBe('HTTP/1.1 503 Service Unavailable');
      expect((await fetch(`${url}/healthz`)).status).toBe(200);
      for (const h of held) await h.rest();
      const answers = await Promise.all(held.map((h) => h.answer));
      for (const [k, a] of answers.entries()) expect([a.status, f32(a.json.probabilities)]).toEqual([200, Array.from(await alone(oracle1, qs[k]!))]);
      await until('no request is held', async () => (await healthz(url)).inFlight === 0);
      expect((await post(url, jsonOf(qs[1]!))).status).toBe(200);
      const req = await metric(url, 'embshard_requests_total');
      expect([req.get('{route="/v1/predict",status="200"}'), req.get('{route="/v1/predict",status="503"}')]).toEqual([5, 2]);
      expect((await metric(url, 'embshard_errors_total')).get('{code="OVERLOADED"}')).toBe(2);
    } finally {
      await s.close();
    }
  }, 60_000);

  it('a client that hangs up before its forward leaves the queue and frees its place; no forward runs for it', async () => {
    // a forward starts once 3 samples wait (or after 10 s)
    const s = await createServer({ checkpoint: ck1, maxInFlight: 2, maxBatch: 3, maxWaitMs: 10_000 });
    const url = await s.listen({ port: 0 });
    try {
      const r = rng(10);
      const [qa, qb, qc] = [makeReq(r, 1), makeReq(r, 1), makeReq(r, 2)];
      const gone = manual(url, jsonOf(qa));
      await gone.rest();
      await until('its request waits for a forward', async () => (await healthz(url)).waiting === 1);
      gone.socket.destroy();
      await until('the server saw it hang up', async () => (await metric(url, 'embshard_requests_total')).get('{route="/v1/predict",status="aborted"}') === 1);
      expect(await healthz(url)).toMatchObject({ waiting: 0, inFlight: 0 });
      // two places free: 1 + 2 samples wait, and their forward runs
      const [b, c] = await Promise.all([post(url, jsonOf(qb)), post(url, jsonOf(qc))]);
      expect([b.status, f32(b.json.probabilities)]).toEqual([200, Array.from(await alone(oracle1, qb))]);
      expect([c.status, f32(c.json.probabilities)]).toEqual([200, Array.from(await alone(oracle1, qc))]);
      expect([(await metric(url, 'embshard_batch_samples_sum')).get(''), (await metric(url, 'embshard_batch_requests_sum')).get('')]).toEqual([3, 2]);
      await until('no request is held', async () => (await healthz(url)).inFlight === 0);
    } finally {
      await s.close();
    }
  }, 60_000);

  it('2,000 concurrent requests against maxInFlight 32: each is answered 200 (bit for bit) or 503, as /metrics counts', async () => {
    const s = await createServer({ checkpoint: ck1, maxInFlight: 32 });
    const url = await s.listen({ port: 0 });
    try {
      const r = rng(5);
      const qs = Array.from({ length: 16 }, () => makeReq(r, 4));
      const want = await Promise.all(qs.map(async (q) => JSON.stringify(Array.from(await alone(oracle1, q)))));
      const bodies = qs.map(jsonOf);
      const N = 2000;
      const answers = await Promise.all(Array.from({ length: N }, (_, i) => post(url, bodies[i % 16]!).then((a) => ({ i, ...a }), (e: Error) => ({ i, status: -1, json: String(e), headers: undefined }))));
      const ok = answers.filter((a) => a.status === 200), busy = answers.filter((a) => a.status === 503);
      expect(answers.filter((a) => a.status !== 200 && a.status !== 503)).toEqual([]);
      expect(ok.filter((a) => JSON.stringify(f32(a.json.probabilities)) !== want[a.i % 16])).toEqual([]);
      expect(busy.every((a) => a.json.error.code === 'OVERLOADED')).toBe(true);
      const req = await metric(url, 'embshard_requests_total');
      expect([req.get('{route="/v1/predict",status="200"}'), req.get('{route="/v1/predict",status="503"}') ?? 0]).toEqual([ok.length, busy.length]);
      await until('no request is held', async () => (await healthz(url)).inFlight === 0);
    } finally {
      await s.close();
    }
  }, 180_000);

  it('serves others while clients trickle their bodies byte by byte, then answers those too', async () => {
    const s = await createServer({ checkpoint: ck1 });
    const url = await s.listen({ port: 0 });
    try {
      const r = rng(6);
      const slowQs = Array.from({ length: 6 }, () => makeReq(r, 1 + Math.floor(4 * r())));
      const slow = slowQs.map((q) => manual(url, jsonOf(q), true));
      await Promise.all(slow.map((c) => c.send(400)));
      await until('the trickling requests arrived', async () => (await healthz(url)).inFlight === 6);
      // while every trickling request is part-way through its body
      const quick = Array.from({ length: 20 }, () => makeReq(r, 2));
      const quickAnswers = await Promise.all(quick.map((q) => post(url, jsonOf(q))));
      for (const [k, a] of quickAnswers.entries()) expect([a.status, f32(a.json.probabilities)]).toEqual([200, Array.from(await alone(oracle1, quick[k]!))]);
      await Promise.all(slow.map((c) => c.rest()));
      const slowAnswers = await Promise.all(slow.map((c) => c.answer));
      for (const [k, a] of slowAnswers.entries()) expect([a.status, f32(a.json.probabilities)]).toEqual([200, Array.from(await alone(oracle1, slowQs[k]!))]);
      const req = await metric(url, 'embshard_requests_total');
      expect(req.get('{route="/v1/predict",status="200"}')).toBe(26);
    } finally {
      await s.close();
    }
  }, 60_000);

  it('refuses a body over bodyLimit with 413 without reading it: announced by its length, or chunked', async () => {
    const s = await createServer({ checkpoint: ck1, bodyLimit: 64 * 1024 });
    const url = await s.listen({ port: 0 });
    const port = Number(new URL(url).port);
    try {
      // 1 GiB announced, nothing sent: the answer comes without the body
      const announced = await new Promise<string>((resolve) => {
        let got = '';
        const c = net.connect(port, '127.0.0.1', () => c.write(`POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${2 ** 30}\r\n\r\n`));
        c.on('data', (d) => (got += d));
        c.on('error', () => undefined);
        c.on('close', () => resolve(got));
      });
      expect(announced.split('\r\n')[0]).toBe('HTTP/1.1 413 Payload Too Large');
      expect(JSON.parse(announced.slice(announced.indexOf('\r\n\r\n') + 4)).error.code).toBe('INVALID_SIZE');
      // chunked, without end: the server answers and closes once it has read past the limit; the client
      // stops at 64 MiB, which it would reach only if the server read on
      const chunked = await new Promise<{ got: string; sent: number }>((resolve) => {
        let got = '', sent = 0, done = false;
        const chunk = Buffer.alloc(16 * 1024, 0x20);
        const c = net.connect(port, '127.0.0.1');
        const pump = () => {
          while (!done && sent < 64 * 2 ** 20) {
            sent += chunk.length;
            if (!c.write(`${chunk.length.toString(16)}\r\n`) || !c.write(chunk) || !c.write('\r\n')) return void c.once('drain', pump);
          }
        };
        c.on('connect', () => {
          c.write('POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n');
          pump();
        });
        c.on('data', (d) => (got += d));
        c.on('error', () => undefined);
        c.on('close', () => ((done = true), resolve({ got, sent })));
      });
      expect(chunked.got.split('\r\n')[0]).toBe('HTTP/1.1 413 Payload Too Large');
      expect(chunked.sent).toBeLessThan(64 * 2 ** 20);
      expect((await fetch(`${url}/healthz`)).status).toBe(200);
    } finally {
      await s.close();
    }
  }, 60_000);

  it('close() answers the requests it holds, refuses new connections, frees the model and resolves', async () => {
    const s = await createServer({ checkpoint: ck1 });
    const url = await s.listen({ port: 0 });
    const r = rng(7);
    const qs = Array.from({ length: 3 }, () => makeReq(r, 3));
    const held = qs.map((q) => manual(url, jsonOf(q)));
    for (const h of held) await h.send(200);
    await until('three requests are held', async () => (await healthz(url)).inFlight === 3);
    const model = s.model;
    const closed = s.close();
    // a request that reaches a route from now on (one on a connection the server had) is refused in the
    // error shape, and its connection closed
    const late = await s.app.inject({ method: 'GET', url: '/healthz' });
    expect([late.statusCode, late.json().error.code, late.headers.connection]).toEqual([503, 'DISPOSED', 'close']);
    await until('the server stops listening', () => !s.app.server.listening);
    await expect(fetch(`${url}/healthz`)).rejects.toThrow();
    for (const h of held) await h.rest();
    const answers = await Promise.all(held.map((h) => h.answer));
    for (const [k, a] of answers.entries()) expect([a.status, f32(a.json?.probabilities ?? [])]).toEqual([200, Array.from(await alone(oracle1, qs[k]!))]);
    await closed;
    await expect(model.trainer.predict(batchOf(qs[0]!))).rejects.toMatchObject({ code: 'DISPOSED' });
  }, 60_000);

  it('a reload under way when the server closes is refused and its model freed; close() waits for it', async () => {
    const slot = await ModelSlot.open(ck1);
    const first = slot.current, one = batchOf(makeReq(rng(9), 1));
    const seen: (typeof first)[] = [];
    const reloading = slot.reload(ck2).then((m) => (seen.push(m), m));
    const closing = slot.close();
    await expect(reloading).rejects.toMatchObject({ code: 'DISPOSED' });
    await closing;
    expect(seen).toEqual([]);
    await expect(first.trainer.predict(one)).rejects.toMatchObject({ code: 'DISPOSED' });
    await expect(slot.reload(ck2)).rejects.toMatchObject({ code: 'DISPOSED' });
  }, 60_000);

  it('`embshard serve --max-in-flight 2` refuses a third request; on SIGTERM it answers the two it holds, then exits 0', async () => {
    const cli = join(process.cwd(), 'dist', 'lib', 'cli', 'main.js');
    const p = spawn(process.execPath, [cli, 'serve', '--checkpoint', ck1, '--port', '0', '--max-in-flight', '2'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    p.stderr.on('data', (d: Buffer) => void (stderr += d.toString()));
    const exited = new Promise<number | null>((resolve) => p.on('exit', (code) => resolve(code)));
    try {
      await until('the server says where it listens', () => / on http:\/\/\S+/.test(stderr) || p.exitCode !== null);
      const url = / on (http:\/\/\S+)/.exec(stderr)![1]!;
      const r = rng(8);
      const qs = Array.from({ length: 2 }, () => makeReq(r, 2));
      const held = qs.map((q) => manual(url, jsonOf(q)));
      for (const h of held) await h.send(200);
      await until('two requests are held', async () => (await healthz(url)).inFlight === 2);
      expect((await post(url, jsonOf(qs[0]!))).status).toBe(503);
      p.kill('SIGTERM');
      await until('the server stops listening', () => fetch(`${url}/healthz`).then(() => false, () => true));
      for (const h of held) await h.rest();
      const answers = await Promise.all(held.map((h) => h.answer));
      for (const [k, a] of answers.entries()) expect([a.status, f32(a.json?.probabilities ?? [])]).toEqual([200, Array.from(await alone(oracle1, qs[k]!))]);
      expect(await exited).toBe(0);
    } finally {
      p.kill('SIGKILL');
    }
  }, 60_000);
});
