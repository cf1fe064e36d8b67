// worker-lifecycle.test.ts — how a worker-thread source's passes end, each case in a child process run
// with --unhandled-rejections=strict that must exit by itself with code 0: breaking out early, return()
// twice, next() after return(), a source iterated twice, a pass failing mid-way (worker or lookahead
// queue around it) leave no worker running; an iterator dropped unfinished and unclosed neither holds
// the process open nor keeps its worker once collected. Workers are counted by the process 'worker'
// event and their 'exit' events.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { TS_HOOKS } from '../../lib/worker-thread.js';

const LIB = fileURLToPath(new URL('../../lib/', import.meta.url));

/** Runs `body` (an ES module's code; `L('data/x')` imports lib/data/x.ts) in a child; what it printed as its answer. */
function child(body: string): Record<string, unknown> {
  const script = `
const { register } = await import('node:module');
register('data:text/javascript,' + encodeURIComponent(${JSON.stringify(TS_HOOKS)}), { data: { base: ${JSON.stringify(LIB + 'worker-thread.ts')} } });
const L = (p) => import(${JSON.stringify('file://' + LIB)} + p + '.ts');
const { setTimeout: sleep } = await import('node:timers/promises');
let started = 0, exited = 0;
process.on('worker', (w) => { started++; w.on('exit', () => exited++); });
const answer = (o) => console.log('@@answer@@' + JSON.stringify(o));
${body}
`;
  const r = spawnSync(process.execPath, ['--unhandled-rejections=strict', '--expose-gc', '--input-type=module', '-e', script], { encoding: 'utf8', timeout: 180_000 });
  expect(r.signal, `the child did not exit by itself: ${r.stderr}`).toBeNull();
  expect(r.status, r.stderr).toBe(0);
  const line = r.stdout.split('\n').find((l) => l.startsWith('@@answer@@'));
  expect(line, r.stdout + r.stderr).toBeDefined();
  return JSON.parse(line!.slice('@@answer@@'.length)) as Record<string, unknown>;
}

const OPEN = `
const { workerSource } = await L('data/worker-source');
const { prefetch } = await L('data/prefetch');
const ws = await workerSource({ kind: 'synthetic', options: { batchSize: 16, maxRows: 100, seed: 1 } }, { depth: 2 });
`;

describe('worker passes end with their iterators', () => {
  it('break, return() twice, next() after return(), iterating twice: every worker ends, the process exits', () => {
    const a = child(`${OPEN}
const ends = [];
for (const wrap of [false, true]) {
  let n = 0;
  for await (const _ of wrap ? prefetch(ws, { depth: 3 }) : ws) if (++n === 3) break;
  const it = (wrap ? prefetch(ws, { depth: 2 }) : ws)[Symbol.asyncIterator]();
  await it.next();
  ends.push((await it.return()).done, (await it.return()).done, (await it.next()).done);
  const a = ws[Symbol.asyncIterator](), b = ws[Symbol.asyncIterator]();
  const [x, y] = [await a.next(), await b.next()];
  ends.push(x.value.size === 16 && y.value.size === 16);
  await Promise.all([a.return(), b.return()]);
}
answer({ ends, started, exited });
`);
    expect(a.ends).toEqual([true, true, true, true, true, true, true, true]);
    expect(a.started).toBe(8);
    expect(a.exited).toBe(8);
  });

  it('a pass failing mid-way, or a consumer breaking during a failure, leaves no worker and no unhandled rejection', () => {
    const a = child(`${OPEN}
const ended = [];
for (const wrap of [false, true]) {
  let killer;
  const take = (w) => (killer = w);
  process.on('worker', take);
  let n = 0;
  try {
    for await (const _ of wrap ? prefetch(ws, { depth: 2 }) : ws) if (++n === 2) killer.terminate();
  } catch (e) {
    ended.push(e.code);
  }
  process.off('worker', take);
}
// a lookahead queue whose pump meets the failure after the consumer has left
const { EmbshardError } = await L('errors');
const late = { features: ['f'], numDense: 0, batchSize: 1, async *[Symbol.asyncIterator]() { yield 1; await sleep(50); throw new EmbshardError('IO_ERROR', 'late'); } };
let n = 0;
for await (const _ of prefetch(late, { depth: 4 })) if (++n === 1) break;
answer({ ended, started, exited });
`);
    expect(a.ended).toEqual(['INTERNAL', 'INTERNAL']);
    expect(a.started).toBe(2);
    expect(a.exited).toBe(2);
  });

  it('an iterator dropped unfinished and unclosed: the process exits by itself, and its worker ends once collected', () => {
    const a = child(`${OPEN}
async function drop(wrap) {
  const it = (wrap ? prefetch(ws, { depth: 2 }) : ws)[Symbol.asyncIterator]();
  await it.next();
  await it.next();
}
await drop(false);
await drop(true);
await drop(false);
for (let t = 0; t < 600 && exited < started; t++) { globalThis.gc(); await sleep(100); }
answer({ started, exited });
`);
    expect(a.started).toBe(3);
    expect(a.exited).toBe(3);
  });

  it('a dropped iterator does not hold the process open while its worker is still running', () => {
    const a = child(`${OPEN}
for (const wrap of [false, true]) {
  const it = (wrap ? prefetch(ws, { depth: 2 }) : ws)[Symbol.asyncIterator]();
  await it.next();
}
answer({ started, exited });
`);
    expect(a.started).toBe(2);
  });
});
