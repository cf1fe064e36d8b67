// readme.test.ts — the README's example is examples/quickstart.mjs verbatim, and it runs (importing the
// package by its name, as a user would) and prints what its comments say.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { packageRoot } from '../../lib/native.js';

describe('README example', () => {
  it('is examples/quickstart.mjs verbatim and runs', () => {
    const readme = readFileSync(join(packageRoot, 'README.md'), 'utf8');
    const example = readFileSync(join(packageRoot, 'examples', 'quickstart.mjs'), 'utf8');
    const body = example.split('\n').slice(1).join('\n').trim(); // the README shows it without the header line
    expect(readme).toContain(body);
    const out = execFileSync(process.execPath, [join(packageRoot, 'examples', 'quickstart.mjs')], { encoding: 'utf8' });
    const lines = out.trim().split('\n');
    expect(lines).toContain("[ 'user_id', 'item_id', 'clicked_items' ] true");
    expect(lines).toContain('48');
    expect(lines).toContain('1 true');
    expect(lines).toContain('ID_OUT_OF_RANGE');
  });
});
