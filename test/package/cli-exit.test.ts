// cli-exit.test.ts — the `embshard` binary hands all of its output to a slow reader before it exits: a
// plan table of ~86 kB (more than a pipe holds) read by a shell pipeline that starts reading only after
// the command is done arrives whole, ending with the baselines. Runs the built CLI (dist/), as a user's
// shell does.
import { describe, it, expect } from 'vitest';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';

const cli = join(process.cwd(), 'dist', 'lib', 'cli', 'main.js');

describe.skipIf(!existsSync(cli))('embshard CLI output through a pipe', () => {
  it('a reader that starts late still gets every line', () => {
    const cmd = `"${process.execPath}" "${cli}" plan --model criteo-kaggle --gpus 768 --time-budget-ms 100 | (sleep 4; cat)`;
    const r = spawnSync('sh', ['-c', cmd], { encoding: 'utf8', maxBuffer: 1 << 24, timeout: 60_000 });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout.length).toBeGreaterThan(80_000);
    const rows = r.stdout.split('\n').filter((l) => /^\d+\s+\|/.test(l));
    expect(rows.length).toBe(768); // one line per rank
    expect(r.stdout).toMatch(/table-row-wise .*\n\s+torchrec .*\n$/);
  }, 60_000);
});
