// train-args.test.ts — `embshard train`'s options read as every other command's (lib/cli/command.ts):
// `--key=value` is `--key value`; an option given twice, an option without its value (or an empty one), a
// flag given a value, an unknown option, a stray argument, a learning rate float32 cannot hold and evaluation
// options without evaluation are usage errors (exit 2) naming it; and outputs that would write
// over each other or over an input (--save and --report the same path or one inside the other, either
// one an input file or a folder holding one, through a link too) are refused before anything is read or
// trained, the inputs left as they were.
import { describe, it, expect, vi, afterEach } from 'vitest';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { runTrain } from '../../lib/cli/train.js';
import { packageRoot } from '../../lib/native.js';
import { capture } from '../train/capture.js';
import { tempDir } from '../temp-dir.js';

afterEach(() => vi.restoreAllMocks());

const tmp = tempDir('train-args');
const MODEL = ['--model', 'custom', '--bottom', '13-8-4', '--top', '8-1', '--max-rows', '50', '--batch', '16'];

/** Runs `embshard train argv`; its exit code, stdout and stderr. */
async function train(argv: string[]): Promise<{ rc: number; out: string; err: string }> {
  const c = capture();
  try {
    const rc = await runTrain(argv);
    return { rc, out: c.out.join('\n'), err: c.err.join('') };
  } finally {
    vi.restoreAllMocks();
  }
}

/** 40 Criteo TSV lines (label, 13 dense, 26 categorical). */
function criteoLines(seed: number): string {
  const line = (i: number) => [i % 2, ...Array.from({ length: 13 }, (_, j) => String((i * j + seed) % 7)), ...Array.from({ length: 26 }, (_, j) => (((i + seed) * 31 + j) * 2654435761 % 4294967296).toString(16).padStart(8, '0'))].join('\t');
  return Array.from({ length: 40 }, (_, i) => line(i)).join('\n') + '\n';
}

describe('embshard train options', () => {
  it('reads --key=value as --key value', async () => {
    const r = await train(['--model=custom', '--bottom=13-8-4', '--top=8-1', '--data=synthetic', '--max-rows=50', '--steps=2', '--batch=16', '--eval-batches=0', '--quiet']);
    expect(r.rc, r.err).toBe(0);
    expect(r.out).toMatch(/^trained 2 steps, 32 samples/);
  }, 60_000);

  it('names an option given twice, a missing or empty value, a flag with a value, an unknown option, a stray argument, a bad number', async () => {
    const base = ['--model', 'custom', '--bottom', '13-8-4', '--top', '8-1', '--max-rows', '50'];
    const cases: [string[], string][] = [
      [[...base, '--data', 'synthetic', '--steps', '2', '--steps', '3'], '--steps is given twice'],
      [[...base, '--data', 'synthetic', '--steps=2', '--steps', '3'], '--steps is given twice'],
      [[...base, '--data', 'synthetic', '--steps', '2', '--quiet', '--quiet'], '--quiet is given twice'],
      [[...base, '--steps', '2', '--data'], '--data needs a value'],
      [[...base, '--data', '--steps', '2'], "--data needs a value (got the option '--steps')"],
      [[...base, '--data', 'synthetic', '--steps', '2', '--quiet=yes'], "--quiet takes no value (got '--quiet=yes')"],
      [[...base, '--data', 'synthetic', '--steps', '2', '--colour'], "unknown option '--colour'"],
      [[...base, '--data', 'synthetic', '--steps', '2', 'stray'], "unexpected argument 'stray'"],
      [[...base, '--data', 'synthetic', '--steps', '-2'], "--steps must be an integer >= 1 (got '-2')"],
      [[...base, '--data', 'synthetic', '--steps', '2.5'], "--steps must be an integer >= 1 (got '2.5')"],
      // an empty value names nothing (an empty --report would write no report, silently)
      [[...base, '--data', 'synthetic', '--steps', '2', '--report', ''], '--report needs a value (got an empty one)'],
      [[...base, '--data', 'synthetic', '--steps', '2', '--save='], '--save needs a value (got an empty one)'],
      [[...base, '--data=', '--steps', '2'], '--data needs a value (got an empty one)'],
      // learning rates are float32: one past its largest value is refused here, naming the option
      [[...base, '--data', 'synthetic', '--steps', '2', '--lr', '1e39'], "--lr must be a number in [0, 3.4028234663852886e+38] (got '1e39')"],
      [[...base, '--data', 'synthetic', '--steps', '2', '--emb-lr', '4e38'], "--emb-lr must be a number in [0, 3.4028234663852886e+38] (got '4e38')"],
      // evaluation options that no evaluation would use
      [[...base, '--data', 'synthetic', '--steps', '2', '--eval-batches', '0', '--eval-every', '1'], '--eval-batches 0 runs no evaluation; --eval-every would be ignored'],
      [[...base, '--data', 'synthetic', '--steps', '2', '--eval-data', 'synthetic', '--eval-batches', '0'], '--eval-batches 0 runs no evaluation; --eval-data would be ignored'],
    ];
    for (const [argv, problem] of cases) {
      const r = await train(argv);
      expect(r.rc, argv.join(' ')).toBe(2);
      expect(r.err.split('\n')[0], argv.join(' ')).toBe(`embshard train: ${problem}`);
      expect(r.out, argv.join(' ')).not.toMatch(/trained \d+ steps/);
    }
  });

  it('refuses outputs that would write over each other or over an input, before any step', async () => {
    const d = tmp.dir;
    const data = join(d, 'data.tsv'), evalFile = join(d, 'eval.tsv'), plan = join(d, 'plan.json'), link = join(d, 'link.html');
    const inputs: [string, string][] = [[data, criteoLines(0)], [evalFile, criteoLines(3)], [plan, '{"not": "read"}']];
    for (const [f, text] of inputs) writeFileSync(f, text);
    symlinkSync(data, link);
    mkdirSync(join(d, 'inputs'));
    const nested = join(d, 'inputs', 'day.tsv');
    writeFileSync(nested, criteoLines(5));
    const tsv = [...MODEL, '--data', `criteo-tsv:${data}`, '--epochs', '1'];
    const syn = [...MODEL, '--data', 'synthetic', '--steps', '2', '--eval-batches', '0'];
    const ck = join(d, 'ck'), html = join(d, 'r.html');
    const cases: [string[], string][] = [
      [[...syn, '--save', html, '--report', html], `--save and --report name the same path '${html}'`],
      [[...syn, '--save', ck, '--report', `${d}/./ck`], `--save and --report name the same path '${d}/./ck'`],
      [[...syn, '--save', ck, '--report', join(ck, 'r.html')], `--report '${join(ck, 'r.html')}' lies inside --save '${ck}', the checkpoint folder it writes`],
      [[...syn, '--report', join(d, 'out'), '--save', join(d, 'out', 'ck')], `--save '${join(d, 'out', 'ck')}' lies inside --report '${join(d, 'out')}', the report file it writes`],
      [[...tsv, '--report', data], `--report '${data}' would write over the --data input '${data}'`],
      [[...tsv, '--report', link], `--report '${link}' would write over the --data input '${data}'`],
      [[...MODEL, '--data', `criteo-tsv:${evalFile},${data}`, '--epochs', '1', '--save', data], `--save '${data}' would write over the --data input '${data}'`],
      [[...MODEL, '--data', `criteo-tsv:${nested}`, '--epochs', '1', '--save', join(d, 'inputs')], `--save '${join(d, 'inputs')}' would write over the --data input '${nested}' (it lies inside --save)`],
      [[...tsv, '--eval-data', `criteo-tsv:${evalFile}`, '--report', evalFile], `--report '${evalFile}' would write over the --eval-data input '${evalFile}'`],
      [[...syn, '--plan', plan, '--report', plan], `--report '${plan}' would write over the --plan file '${plan}'`],
      [[...syn, '--storage', `disk:${join(d, 'store')}`, '--cache-bytes', '100000', '--save', join(d, 'store')], `--save '${join(d, 'store')}' would write over the --storage folder '${join(d, 'store')}'`],
    ];
    for (const [argv, problem] of cases) {
      const r = await train(argv);
      expect(r.rc, `${argv.join(' ')}: ${r.err}`).toBe(2);
      expect(r.err.split('\n')[0], argv.join(' ')).toBe(`embshard train: ${problem}`);
      expect(r.err + r.out, argv.join(' ')).not.toMatch(/trained \d+ steps|step \d+\//);
    }
    for (const [f, text] of inputs) expect(readFileSync(f, 'utf8'), f).toBe(text);
    expect(readFileSync(nested, 'utf8')).toBe(criteoLines(5));
    for (const f of [ck, html, join(d, 'out'), join(d, 'store')]) expect(existsSync(f), f).toBe(false);
    // the same run with outputs elsewhere trains and writes both
    const r = await train([...tsv, '--eval-data', `criteo-tsv:${evalFile}`, '--save', ck, '--report', html, '--quiet']);
    expect(r.rc, r.err).toBe(0);
    expect(existsSync(join(ck, 'trainer.json')) && existsSync(html)).toBe(true);
  }, 60_000);
});

describe('embshard train --eval-batches on synthetic data', () => {
  it('held-out batches that would not fit in memory are refused after the first is made, naming --eval-batches (a child with a capped address space)', () => {
    // a child whose address space is capped at 4 GB: the held-out set must be refused, not grown into the cap
    const cli = join(packageRoot, 'dist', 'lib', 'cli', 'main.js');
    const args = ['train', ...MODEL, '--data', 'synthetic', '--steps', '1', '--eval-batches', '100000000', '--quiet'];
    const r = spawnSync('/bin/sh', ['-c', 'ulimit -v 4000000 && exec "$0" "$@"', process.execPath, cli, ...args], { encoding: 'utf8', timeout: 120_000 });
    expect(r.status, r.stderr).toBe(1);
    expect(r.stderr).toMatch(/INVALID_CONFIG.*--eval-batches 100000000: the held-out batches are kept in memory/);
  });
});
