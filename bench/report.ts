// report.ts — shared output of the benchmarks: JSON into bench/results/<name>.json and a markdown
// table printed and written to bench/results/<name>.md.
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { join } from 'node:path';
import { packageRoot } from '../lib/native.js';

export function machine(): Record<string, unknown> {
  return { cpu: cpus()[0]?.model ?? 'unknown', cores: cpus().length, memoryGiB: +(totalmem() / 2 ** 30).toFixed(1), node: process.version, date: new Date().toISOString() };
}

export function table(headers: string[], rows: (string | number)[][]): string {
  const fmt = (v: string | number) => (typeof v === 'number' ? (Number.isInteger(v) ? String(v) : v.toPrecision(4)) : v);
  return [`| ${headers.join(' | ')} |`, `|${headers.map(() => '---').join('|')}|`, ...rows.map((r) => `| ${r.map(fmt).join(' | ')} |`)].join('\n');
}

export function writeResults(name: string, json: unknown, markdown: string): void {
  const dir = join(packageRoot, 'bench', 'results');
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, `${name}.json`), JSON.stringify(json, null, 2));
  writeFileSync(join(dir, `${name}.md`), markdown + '\n');
  console.log(markdown);
  console.log(`\nwrote bench/results/${name}.json and bench/results/${name}.md`);
}
