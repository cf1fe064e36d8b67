// command.ts — what an `embshard` subcommand does around its work: --help prints the usage (exit 0), a
// usage error prints the problem and the usage (exit 2), an EmbshardError prints its code and message
// (exit 1); the checked number options; and output files, checked before the work (against each other and
// the inputs too) and written whole or not at all.
import { accessSync, closeSync, constants, existsSync, openSync, realpathSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { basename, dirname, isAbsolute, join, relative, resolve, sep } from 'node:path';
import { EmbshardError, isEmbshardError } from '../errors.js';

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

/** The value of option `k` as a finite decimal number in [min, max]. */
export function numArg(k: string, v: string, min = 0, max = Infinity): number {
  const n = Number(v);
  if (!DECIMAL.test(v) || !Number.isFinite(n) || n < min || n > max)
    throw new Error(`${k} must be a number ${max === Infinity ? `>= ${min}` : `in [${min}, ${max}]`} (got '${v}')`);
  return n;
}

/**
 * Walks `--key value` and `--key=value` options and bare `flags`: 'help' for --help / -h, an error message
 * for a stray argument, an unknown option, an option given twice, an option without its value (the end of
 * the line, or the next option in its place), a flag given a value, or a bad value (from `option`'s return
 * or throw); undefined when all is well. With `known`, the options `option` takes, an unknown one is named as
 * such before its value is looked for.
 */
export function parseArgs(argv: string[], flags: Record<string, () => void>, option: (k: string, v: string) => string | undefined, known?: readonly string[]): string | undefined {
  const seen = new Set<string>();
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--help' || arg === '-h') return 'help';
    const eq = arg.startsWith('--') ? arg.indexOf('=') : -1;
    const k = eq > 0 ? arg.slice(0, eq) : arg;
    if (k.startsWith('--') && seen.has(k)) return `${k} is given twice`;
    seen.add(k);
    const flag = Object.hasOwn(flags, k) ? flags[k] : undefined;
    if (flag) {
      if (eq > 0) return `${k} takes no value (got '${arg}')`;
      flag();
      continue;
    }
    if (!k.startsWith('--')) return `unexpected argument '${k}'`;
    if (known && !known.includes(k)) return `unknown option '${k}'`;
    const v = eq > 0 ? arg.slice(eq + 1) : argv[++i];
    if (v === undefined) return `${k} needs a value`;
    if (eq < 0 && v.startsWith('--')) return `${k} needs a value (got the option '${v}')`;
    try {
      const problem = option(k, v);
      if (problem !== undefined) return problem;
    } catch (e) {
      return (e as Error).message;
    }
  }
  return undefined;
}

/** The path as the file system reaches it: absolute, with the links of the part of it that exists resolved. */
export function canonicalPath(path: string): string {
  const rest: string[] = [];
  for (let p = resolve(path); ; p = dirname(p)) {
    try {
      return join(realpathSync(p), ...rest);
    } catch {
      if (dirname(p) === p) return resolve(path);
      rest.unshift(basename(p));
    }
  }
}

/** Whether canonical path `inner` is `outer` or lies inside it. */
export function isWithin(inner: string, outer: string): boolean {
  const r = relative(outer, inner);
  return r === '' || (r !== '..' && !r.startsWith(`..${sep}`) && !isAbsolute(r));
}

/** A path a command reads or writes, and the option (with what it is) that names it. */
export interface NamedPath {
  /** The option, e.g. '--report'. */
  option: string;
  path: string;
  /** What it is, for messages: 'input', 'file', 'folder'. */
  what: string;
}

/**
 * A usage message when an output would write over an input or another output (the same path, or one lying
 * inside the other), else undefined. Outputs are compared both ways; an output only with the inputs inside it
 * (an output file inside an input folder is left alone).
 */
export function outputClash(outputs: readonly NamedPath[], inputs: readonly NamedPath[]): string | undefined {
  const canon = (x: NamedPath) => ({ ...x, at: canonicalPath(x.path) });
  const outs = outputs.map(canon), ins = inputs.map(canon);
  for (let i = 0; i < outs.length; i++) {
    const o = outs[i]!;
    for (const p of outs.slice(i + 1)) {
      if (o.at === p.at) return `${o.option} and ${p.option} name the same path '${p.path}'`;
      const [inner, outer] = isWithin(p.at, o.at) ? [p, o] : isWithin(o.at, p.at) ? [o, p] : [];
      if (inner && outer) return `${inner.option} '${inner.path}' lies inside ${outer.option} '${outer.path}', the ${outer.what} it writes`;
    }
    for (const p of ins)
      if (isWithin(p.at, o.at))
        return `${o.option} '${o.path}' would write over the ${p.option} ${p.what} '${p.path}'${o.at === p.at ? '' : ` (it lies inside ${o.option})`}`;
  }
  return undefined;
}

/**
 * Throws IO_ERROR naming `option` unless `path` can take an output file: its folder exists and is writable,
 * and the path is not a folder nor a file without write permission. Run before the work, so none is lost.
 */
export function checkOutputPath(option: string, path: string): void {
  let why: string | undefined;
  try {
    const exists = existsSync(path);
    if (exists && statSync(path).isDirectory()) why = 'it is a folder';
    else {
      if (exists) accessSync(path, constants.W_OK);
      // the file is written beside itself and renamed into place: its folder must take a new file
      const dir = dirname(exists ? realpathSync(path) : resolve(path));
      if (!statSync(dir).isDirectory()) why = `'${dir}' is not a folder`;
      else accessSync(dir, constants.W_OK);
    }
  } catch (e) {
    why = (e as NodeJS.ErrnoException).code ?? (e as Error).message;
  }
  if (why !== undefined) throw new EmbshardError('IO_ERROR', `${option} '${path}' cannot be written (${why})`);
}

/**
 * Writes every file or none: each text goes to a new temporary file beside its path, and only when all are
 * written are they renamed into place (a path that is a link is written through). A failure removes the
 * temporary files it made and throws IO_ERROR naming the path; the paths are left as they were.
 */
export function writeOutputs(files: readonly (readonly [path: string, text: string])[]): void {
  const targets = files.map(([p]) => (existsSync(p) ? realpathSync(p) : p));
  const temps = targets.map((p) => join(dirname(p), `.${basename(p)}.${process.pid}.tmp`));
  const made: string[] = [];
  let i = 0;
  try {
    for (; i < files.length; i++) {
      const fd = openSync(temps[i]!, 'wx');
      made.push(temps[i]!);
      try {
        writeFileSync(fd, files[i]![1]);
      } finally {
        closeSync(fd);
      }
    }
    for (i = 0; i < files.length; i++) renameSync(temps[i]!, targets[i]!);
  } catch (e) {
    for (const t of made) rmSync(t, { force: true });
    throw new EmbshardError('IO_ERROR', `'${files[i]![0]}' could not be written (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`);
  }
}
