// measure.ts — the leak tests' child process: runs a case's cycle many times in a fresh `node --expose-gc`
// (TypeScript imported through the package's loader hooks) and reports, at each checkpoint after forcing
// garbage collection, process.memoryUsage(), process.getActiveResourcesInfo(), its threads and its open
// file descriptors. A leak shows as growth proportional to the cycles run after warm-up; `growth` gives it
// per cycle between two checkpoints. A case may define `teardown` in its setup, run after the last sample.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { expect } from 'vitest';
import { TS_HOOKS } from '../../lib/worker-thread.js';

const LIB = fileURLToPath(new URL('../../lib/', import.meta.url));

export interface Sample {
  /** cycles run when it was taken */
  n: number;
  rss: number;
  external: number;
  arrayBuffers: number;
  heapUsed: number;
  heapTotal: number;
  /** process.getActiveResourcesInfo(), sorted */
  resources: string[];
  /** threads of the process (/proc/self/status) */
  threads: number;
  /** open file descriptors (/proc/self/fd) */
  fds: number;
}

/**
 * Runs `setup` once, then `cycle` (an async body with `i` the cycle's index and every name `setup`
 * declared in scope) until each of `checkpoints` cycles have run, sampling after each. `L('x/y')` imports
 * lib/x/y.ts. What the case prints on stdout is ignored; a child that fails fails the test.
 */
export function measure(setup: string, cycle: string, checkpoints: number[], env: Record<string, string> = {}): Sample[] {
  const script = `
const { register } = await import('node:module');
register('data:text/javascript,' + encodeURIComponent(${JSON.stringify(TS_HOOKS)}), { data: { base: ${JSON.stringify(LIB + 'worker-thread.ts')} } });
const L = (p) => import(${JSON.stringify('file://' + LIB)} + p + '.ts');
const { setImmediate: tick } = await import('node:timers/promises');
const { readFileSync: readProc, readdirSync: listProc } = await import('node:fs');
const threadCount = () => Number(/Threads:\\s+(\\d+)/.exec(readProc('/proc/self/status', 'utf8'))[1]);
${setup}
const run = async (i) => { ${cycle} };
const settle = async () => { for (let k = 0; k < 4; k++) { await tick(); global.gc(); } };
const samples = [];
let n = 0;
for (const upTo of ${JSON.stringify(checkpoints)}) {
  for (; n < upTo; n++) await run(n);
  await settle();
  const m = process.memoryUsage();
  samples.push({ n, rss: m.rss, external: m.external, arrayBuffers: m.arrayBuffers, heapUsed: m.heapUsed, heapTotal: m.heapTotal, resources: process.getActiveResourcesInfo().sort(), threads: threadCount(), fds: listProc('/proc/self/fd').length });
}
if (typeof teardown === 'function') await teardown();
console.log('@@samples@@' + JSON.stringify(samples));
`;
  const r = spawnSync(process.execPath, ['--expose-gc', '--unhandled-rejections=strict', '--input-type=module', '-e', script], {
    encoding: 'utf8',
    timeout: 240_000,
    env: { ...process.env, EMBSHARD_THREADS: '2', ...env },
    maxBuffer: 64 << 20,
  });
  expect(r.signal, `the child did not finish: ${r.stderr}`).toBeNull();
  expect(r.status, r.stderr).toBe(0);
  const line = r.stdout.split('\n').find((l) => l.startsWith('@@samples@@'));
  expect(line, r.stdout + r.stderr).toBeDefined();
  return JSON.parse(line!.slice('@@samples@@'.length)) as Sample[];
}

/** Bytes per cycle of `key` between the samples taken after `from` and after `to` cycles. */
export function growth(samples: Sample[], key: 'rss' | 'external' | 'arrayBuffers' | 'heapUsed' | 'heapTotal', from: number, to: number): number {
  const a = samples.find((s) => s.n === from)!;
  const b = samples.find((s) => s.n === to)!;
  return (b[key] - a[key]) / (to - from);
}

/** A one-line summary of the samples, for failure messages and reports. */
export function show(samples: Sample[]): string {
  const k = (x: number) => `${(x / 1024).toFixed(0)}k`;
  return samples.map((s) => `${s.n}: rss ${k(s.rss)} ext ${k(s.external)} ab ${k(s.arrayBuffers)} heap ${k(s.heapUsed)}/${k(s.heapTotal)} thr ${s.threads} fd ${s.fds} [${s.resources.join(',')}]`).join(' | ');
}
