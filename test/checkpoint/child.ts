// child.ts — runs saver.mjs (a child process that saves checkpoints of known contents) and checks what a
// checkpoint holds against the formulas the child wrote it from.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { expect } from 'vitest';
import { compileTs, root } from '../sharded/mpi-harness.js';
import type { EmbeddingCollection } from '../../lib/index.js';
// @ts-expect-error a plain ES module shared with the child process
import { TABLES, accum, weight } from './saver.mjs';

export const saver = join(root, 'test', 'checkpoint', 'saver.mjs');
export const libIndex = join(root, 'dist', 'lib', 'index.js');
export const trainIndex = join(root, 'dist', 'lib', 'train', 'index.js');

export interface ChildRun {
  signal: NodeJS.Signals | null;
  code: number | null;
  lines: string[];
  stderr: string;
}

/**
 * Runs saver.mjs with `args` (the compiled library first made current); `killWhen(lines)` is asked after
 * each line of output and, once true, the child gets SIGKILL after `delayMs`.
 */
export function runSaver(args: string[], killWhen?: (lines: string[]) => boolean, delayMs = 0): Promise<ChildRun> {
  compileTs();
  const child = spawn(process.execPath, [saver, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  const lines: string[] = [];
  let stderr = '', pending = '', armed = false;
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  child.stdout.on('data', (d: Buffer) => {
    pending += d.toString();
    const parts = pending.split('\n');
    pending = parts.pop()!;
    lines.push(...parts);
    if (!armed && killWhen?.(lines)) {
      armed = true;
      setTimeout(() => child.kill('SIGKILL'), delayMs);
    }
  });
  return new Promise((resolve) => child.on('close', (code, signal) => resolve({ signal, code, lines: pending ? [...lines, pending] : lines, stderr })));
}

/** The largest k of the lines `<word> k`, 0 when none. */
export function last(lines: readonly string[], word: string): number {
  return Math.max(0, ...lines.filter((l) => l.startsWith(`${word} `)).map((l) => Number(l.split(' ')[1])));
}

/** Table t's values of state k by `f` (saver.mjs's formulas), [rows × width]. */
function expected(k: number, t: number, f: (k: number, t: number, r: number, c: number) => number): Float32Array {
  const { rows, dim } = TABLES[t] as { rows: number; dim: number };
  const out = new Float32Array(rows * dim);
  for (let r = 0; r < rows; r++) for (let c = 0; c < dim; c++) out[r * dim + c] = f(k, t, r, c);
  return out;
}

const bytes = (a: Float32Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);

/** Whether `ec` holds exactly state k of saver.mjs's collection: step, every row and its optimizer state, bitwise. */
export function holdsState(ec: EmbeddingCollection, k: number): void {
  expect(ec.step).toBe(k);
  (TABLES as { name: string; rows: number }[]).forEach((t, i) => {
    const ids = BigInt64Array.from({ length: t.rows }, (_, r) => BigInt(r));
    expect(bytes(ec.readRows(t.name, ids)).equals(bytes(expected(k, i, weight)))).toBe(true);
    expect(bytes(ec.readState(t.name, ids)).equals(bytes(expected(k, i, accum)))).toBe(true);
  });
}

/** The steps a trainer has completed (saved with it; the class keeps the count private). */
export function trainerSteps(t: object): number {
  return (t as { steps: number }).steps;
}

/** Starts `args` (a saving child) and resolves once it has saved once: its output lines and a kill. */
export function savingInLoop(args: string[]): Promise<{ lines: string[]; stop: () => Promise<void> }> {
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'] });
  const lines: string[] = [];
  const exited = new Promise<void>((resolve) => child.on('close', () => resolve()));
  return new Promise((resolve, reject) => {
    let pending = '';
    child.stdout.on('data', (d: Buffer) => {
      pending += d.toString();
      const parts = pending.split('\n');
      pending = parts.pop()!;
      lines.push(...parts);
      if (last(lines, 'saved') >= 1) resolve({ lines, stop: () => (child.kill('SIGKILL'), exited) });
    });
    child.on('close', () => reject(new Error('the saving process ended')));
  });
}
