// docs.test.ts — every code block of README.md and docs/*.md either runs as written in a test or says
// plainly what it is: JavaScript / TypeScript is a file of examples/ shown verbatim (readme.test.ts runs
// the README's) or starts with a `// Fragment:` line; a JSON plan is accepted by ShardPlan.fromJSON;
// `sh` blocks are commands and `text` blocks are output, usage lines or formulas. Package imports name
// entries package.json exports.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { packageRoot } from '../../lib/native.js';
import { ShardPlan } from '../../lib/plan/index.js';

interface Block {
  file: string;
  line: number;
  lang: string;
  body: string;
}

function blocks(file: string): Block[] {
  const lines = readFileSync(join(packageRoot, file), 'utf8').split('\n');
  const out: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    if (!lines[i]!.startsWith('```')) continue;
    const start = i;
    const lang = lines[i]!.slice(3).trim();
    const body: string[] = [];
    for (i++; i < lines.length && !lines[i]!.startsWith('```'); i++) body.push(lines[i]!);
    out.push({ file, line: start + 1, lang, body: body.join('\n') });
  }
  return out;
}

const files = ['README.md', ...readdirSync(join(packageRoot, 'docs')).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)];
const all = files.flatMap(blocks);
const examples = readdirSync(join(packageRoot, 'examples')).map((f) => readFileSync(join(packageRoot, 'examples', f), 'utf8'));
const exported = Object.keys((JSON.parse(readFileSync(join(packageRoot, 'package.json'), 'utf8')) as { exports: Record<string, unknown> }).exports);

describe('code blocks of README.md and docs/', () => {
  it('are found', () => {
    expect(all.length).toBeGreaterThanOrEqual(10);
  });

  it('each say what they are', () => {
    for (const b of all) expect(['js', 'ts', 'sh', 'json', 'text'], `${b.file}:${b.line} language '${b.lang}'`).toContain(b.lang);
  });

  it('JavaScript and TypeScript run as an example file or are marked as fragments', () => {
    for (const b of all.filter((x) => x.lang === 'js' || x.lang === 'ts')) {
      const runs = examples.some((e) => e.includes(b.body.trim()));
      const fragment = b.body.startsWith('// Fragment:');
      expect(runs || fragment, `${b.file}:${b.line}`).toBe(true);
    }
  });

  it('import only entries the package exports', () => {
    for (const b of all.filter((x) => x.lang === 'js' || x.lang === 'ts')) {
      for (const m of b.body.matchAll(/from '(embshard[^']*)'/g)) {
        const entry = m[1] === 'embshard' ? '.' : `./${m[1]!.slice('embshard/'.length)}`;
        expect(exported, `${b.file}:${b.line} imports '${m[1]}'`).toContain(entry);
      }
    }
  });

  it('JSON plans are valid plan files', () => {
    const plans = all.filter((b) => b.lang === 'json' && b.body.includes('"embshard.plan"'));
    expect(plans.length).toBeGreaterThan(0);
    for (const b of plans) expect(() => ShardPlan.fromJSON(b.body), `${b.file}:${b.line}`).not.toThrow();
  });
});
