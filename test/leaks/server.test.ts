// server.test.ts — a process that creates, serves from and closes prediction servers again and again
// keeps neither their memory nor their handles: createServer → listen → a few requests (a fresh
// keep-alive agent each time, destroyed after close; not fetch, whose process-wide dispatcher keeps
// state per origin, ~25 KB per port, whatever the server) → close, in a child process, measured after
// forced GC. Each server once stayed reachable from the process-wide collectors
// prom-client starts (a GC observer per server), about 45 KB of JS heap per server.
import { describe, expect, it } from 'vitest';
import { growth, measure, show } from './measure.js';

const SETUP = `
const { EmbeddingCollection, JaggedBatch, Trainer } = await L('index');
const { createServer } = await L('serve/index');
const http = await import('node:http');
const { mkdtempSync, rmSync } = await import('node:fs');
const { tmpdir } = await import('node:os');
const tmp = mkdtempSync(tmpdir() + '/embshard-leak-serve-');
const teardown = () => rmSync(tmp, { recursive: true, force: true });
const B = 4;
const t0 = new Trainer({
  model: { denseIn: 3, bottom: [5, 4], top: [6, 1], numSparse: 2, embDim: 4, interaction: 'dot' },
  embeddings: new EmbeddingCollection({ tables: [{ name: 'A', rows: 30, dim: 4, features: ['a'] }, { name: 'C', rows: 36, dim: 4, features: ['c'] }], optimizer: { type: 'adagrad', lr: 0.1 }, seed: 1 }),
  optimizer: { type: 'adam', lr: 0.01 }, seed: 3,
});
await t0.step({ dense: new Float32Array(B * 3).fill(0.5), sparse: JaggedBatch.fromBags(['a', 'c'], [[[1], [2], [3], [4]], [[5], [6, 7], [8], []]]), labels: Float32Array.of(0, 1, 0, 1), size: B });
await t0.save(tmp + '/ck');
t0.dispose();
t0.embeddings.dispose();
const ask = (agent, url, path, body) => new Promise((resolve, reject) => {
  const r = http.request(url + path, { method: body ? 'POST' : 'GET', agent, headers: body ? { 'content-type': 'application/json' } : {} }, (m) => {
    let text = '';
    m.on('data', (d) => (text += d));
    m.on('end', () => (m.statusCode === 200 ? resolve(text) : reject(new Error(m.statusCode + ' ' + text))));
  });
  r.on('error', reject);
  r.end(body);
});
`;

const CYCLE = `
const s = await createServer({ checkpoint: tmp + '/ck' });
const url = await s.listen({ port: 0, host: '127.0.0.1' });
const agent = new http.Agent({ keepAlive: true });
for (let k = 0; k < 3; k++) await ask(agent, url, '/v1/predict', JSON.stringify({ dense: [[1, 2, 3]], sparse: { a: [[1, 2]], c: [[k]] } }));
await ask(agent, url, '/metrics');
await s.close();
agent.destroy();
`;

describe('servers created and closed many times', () => {
  it('leave no JS heap and no handles behind', () => {
    // heap per cycle measured over cycles 20 → 80: about 45 KB when every server's metrics were kept,
    // 5–6 KB without (V8's own warm-up, falling to ~1 KB by 400 cycles; the bound sits between, at 20 KB); handles: the same set at every checkpoint
    const s = measure(SETUP, CYCLE, [0, 20, 80]);
    expect(growth(s, 'heapUsed', 20, 80), show(s)).toBeLessThan(20 * 1024);
    expect(s[2]!.resources, show(s)).toEqual(s[1]!.resources);
    expect(s[1]!.threads, show(s)).toBe(s[0]!.threads);
  });
});
