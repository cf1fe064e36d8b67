// command.ts — what an `embshard` subcommand does around its work: --help prints the usage (exit 0), a
// usage error prints the problem and the usage (exit 2), an EmbshardError prints its code and message
// (exit 1); and the checked number options.
import { isEmbshardError } from '../errors.js';

/** Runs a subcommand on its parsed arguments ('help', a usage error, or the options). */
export async function runCommand<A extends object>(name: string, usage: string, parsed: A | string, body: (a: A) => Promise<number>): Promise<number> {
  if (parsed === 'help') {
    console.log(usage);
    return 0;
  }
  if (typeof parsed === 'string') {
    console.error(`embshard ${name}: ${parsed}\n${usage}`);
    return 2;
  }
  try {
    return await body(parsed);
  } catch (e) {
    if (isEmbshardError(e)) {
      console.error(`embshard ${name}: ${e.code}: ${e.message}`);
      return 1;
    }
    // an operating-system failure on a path the user named (an --out in a missing folder, a file
    // without permission): one line, as IO_ERROR, rather than Node's error object
    const sys = e as NodeJS.ErrnoException;
    if (e instanceof Error && typeof sys.syscall === 'string' && typeof sys.code === 'string') {
      console.error(`embshard ${name}: IO_ERROR: ${sys.syscall}${typeof sys.path === 'string' ? ` '${sys.path}'` : ''} failed (${sys.code})`);
      return 1;
    }
    throw e;
  }
}

/** The value of option `k` as an integer in [min, max]; throws an Error naming the option otherwise. */
export function intArg(k: string, v: string, min = 1, max = Number.MAX_SAFE_INTEGER): number {
  if (!/^[0-9]+$/.test(v) || Number(v) < min || Number(v) > max || !Number.isSafeInteger(Number(v)))
    throw new Error(`${k} must be an integer ${max === Number.MAX_SAFE_INTEGER ? `>= ${min}` : `in [${min}, ${max}]`} (got '${v}')`);
  return Number(v);
}

/** A decimal number as written on a command line: 5, -0.5, .5, 1e-3 (not hex, binary, blanks or Infinity). */
const DECIMAL = /^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$/i;

/** The value of option `k` as a finite decimal number ≥ min. */
export function numArg(k: string, v: string, min = 0): number {
  const n = Number(v);
  if (!DECIMAL.test(v) || !Number.isFinite(n) || n < min) throw new Error(`${k} must be a number >= ${min} (got '${v}')`);
  return n;
}

/**
 * Walks `--key value` options and bare `flags`: 'help' for --help / -h, an error message for a stray
 * argument, an unknown option or a bad value (from `option`'s return or throw), undefined when all is well.
 */
export function parseArgs(argv: string[], flags: Record<string, () => void>, option: (k: string, v: string) => string | undefined): string | undefined {
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i]!;
    if (k === '--help' || k === '-h') return 'help';
    const flag = flags[k];
    if (flag) {
      flag();
      continue;
    }
    const v = argv[++i];
    if (!k.startsWith('--') || v === undefined) return `unexpected argument '${k}'`;
    try {
      const problem = option(k, v);
      if (problem !== undefined) return problem;
    } catch (e) {
      return (e as Error).message;
    }
  }
  return undefined;
}
