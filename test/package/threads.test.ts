// threads.test.ts — EMBSHARD_THREADS sizes the host thread pool every CPU kernel runs on, as backends()
// reports it; a value the pool cannot take is INVALID_CONFIG naming the variable before an addon loads.
// Each case is a child process: the pool is sized once per process, when it is first used.
import { spawnSync } from 'node:child_process';
import { cpus } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { packageRoot } from '../../lib/native.js';

const CHILD = `
import { loadAddon } from ${JSON.stringify(join(packageRoot, 'dist/lib/native.js'))};
import { backends } from ${JSON.stringify(join(packageRoot, 'dist/lib/backends.js'))};
let out;
try { loadAddon(); out = { threads: backends().find((b) => b.name === 'cpu').threads }; }
catch (e) { out = { name: e.name, code: e.code, message: e.message }; }
console.log('@@answer@@' + JSON.stringify(out));
`;

function run(value: string | undefined): { threads?: number; name?: string; code?: string; message?: string } {
  const env = { ...process.env };
  if (value === undefined) delete env.EMBSHARD_THREADS;
  else env.EMBSHARD_THREADS = value;
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', CHILD], { env, encoding: 'utf8' });
  expect(r.status, r.stderr).toBe(0);
  const line = r.stdout.split('\n').find((l) => l.startsWith('@@answer@@'));
  expect(line, r.stdout).toBeDefined();
  return JSON.parse(line!.slice('@@answer@@'.length));
}

describe('EMBSHARD_THREADS', () => {
  it('unset, empty or 0: every core; an integer in [1, 1024]: that many threads', () => {
    const cores = cpus().length;
    expect(run(undefined).threads).toBe(cores);
    expect(run('').threads).toBe(cores);
    expect(run('0').threads).toBe(cores);
    expect(run('1').threads).toBe(1);
    expect(run('3').threads).toBe(3);
  });

  it('anything else is INVALID_CONFIG naming EMBSHARD_THREADS, before the addon loads', () => {
    for (const v of ['abc', '-1', '2.5', '1025', '4x', ' 2']) {
      const o = run(v);
      expect(o.threads, v).toBeUndefined();
      expect(o.name, v).toBe('EmbshardError');
      expect(o.code, v).toBe('INVALID_CONFIG');
      expect(o.message, v).toContain('EMBSHARD_THREADS');
    }
  });
});
