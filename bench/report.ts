// report.ts — what the benchmarks share: their command line (--help, unknown arguments refused before any
// work) and environment settings (checked, named when wrong), temporary folders removed also when a run is interrupted, and their output: JSON into
// bench/results/<name>.json and a markdown table printed and written to bench/results/<name>.md.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { constants as osConstants, cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from '../lib/cli/command.js';
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

/** A bench's flags given and options with their values. */
export interface BenchArgs {
  flags: Set<string>;
  options: Map<string, string>;
}

/**
 * The command line of a bench, read before any work: --help prints `usage` and exits 0; an argument other
 * than `known.flags` and `known.options` (each with its value), or one given twice, prints the problem and
 * the usage and exits 2.
 */
export function benchArgs(usage: string, known: { flags?: readonly string[]; options?: readonly string[] } = {}): BenchArgs {
  const args: BenchArgs = { flags: new Set(), options: new Map() };
  const flags = Object.fromEntries((known.flags ?? []).map((f) => [f, () => void args.flags.add(f)]));
  const problem = parseArgs(process.argv.slice(2), flags, (k, v) => void args.options.set(k, v), known.options ?? []);
  if (problem === 'help') {
    console.log(usage);
    process.exit(0);
  }
  if (problem !== undefined) {
    console.error(`${problem}\n${usage}`);
    process.exit(2);
  }
  return args;
}

/** The --device of a bench: cpu (default), cuda or cuda:N; exits 2 on anything else. */
export function benchDevice(args: BenchArgs, usage: string): string {
  const device = args.options.get('--device') ?? 'cpu';
  if (!/^(cpu|cuda(:(0|[1-9][0-9]{0,3}))?)$/.test(device)) {
    console.error(`--device must be cpu, cuda or cuda:N (got '${device}')\n${usage}`);
    process.exit(2);
  }
  return device;
}

/** Ends a bench whose command line or environment is wrong: one line naming the problem, exit 2. */
function usageError(problem: string): never {
  console.error(problem);
  process.exit(2);
}

/** The integers ≥ `min` of the comma-separated environment variable `name`, or `fallback` when it is unset. */
export function envInts(name: string, fallback: readonly number[], min = 1): number[] {
  const v = process.env[name];
  if (v === undefined) return [...fallback];
  const parts = v.split(',');
  if (!parts.every((p) => /^[0-9]+$/.test(p) && Number.isSafeInteger(Number(p)) && Number(p) >= min))
    usageError(`${name} must be ${parts.length > 1 ? 'integers' : 'an integer'} >= ${min}, separated by commas (got '${v}')`);
  return parts.map(Number);
}

/** One integer ≥ `min` from the environment variable `name`, or `fallback` when it is unset. */
export function envInt(name: string, fallback: number, min = 1): number {
  const v = envInts(name, [fallback], min);
  if (v.length !== 1) usageError(`${name} must be one integer (got '${process.env[name]}')`);
  return v[0]!;
}

/** The comma-separated names of the environment variable `name`, each one of `known`, or `fallback` when it is unset. */
export function envNames(name: string, fallback: readonly string[], known: readonly string[]): string[] {
  const v = process.env[name];
  if (v === undefined) return [...fallback];
  const bad = v.split(',').find((x) => !known.includes(x));
  if (bad !== undefined) usageError(`${name}: unknown name '${bad}' (known: ${known.join(', ')})`);
  return v.split(',');
}

/** The base name of a bench's result files from the environment variable `name` (letters, digits, '.', '_', '-'). */
export function envFileName(name: string, fallback: string): string {
  const v = process.env[name] ?? fallback;
  if (!/^[A-Za-z0-9_-][A-Za-z0-9._-]*$/.test(v)) usageError(`${name} must be a file name of letters, digits, '.', '_' and '-' (got '${v}')`);
  return v;
}

/** What to undo when a bench is interrupted (Ctrl-C, SIGTERM) before it undoes it itself. */
const cleanups = new Set<() => void>();

function interrupted(signal: NodeJS.Signals): void {
  for (const c of cleanups) {
    try {
      c();
    } catch {
      // the other cleanups still run
    }
  }
  process.exit(128 + (osConstants.signals[signal] ?? 0));
}

/** Runs `cleanup` if the process is interrupted; the returned function forgets it (call it once done). */
export function onInterrupt(cleanup: () => void): () => void {
  if (cleanups.size === 0) {
    process.on('SIGINT', interrupted);
    process.on('SIGTERM', interrupted);
  }
  cleanups.add(cleanup);
  return () => {
    cleanups.delete(cleanup);
    if (cleanups.size === 0) {
      process.off('SIGINT', interrupted);
      process.off('SIGTERM', interrupted);
    }
  };
}

/** A fresh temporary folder; `remove()` deletes it, as does an interruption before that. */
export function benchTempDir(prefix: string): { dir: string; remove: () => void } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const rm = (): void => rmSync(dir, { recursive: true, force: true });
  const forget = onInterrupt(rm);
  return {
    dir,
    remove: () => {
      forget();
      rm();
    },
  };
}
