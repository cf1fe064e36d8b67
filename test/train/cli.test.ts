// cli.test.ts — `embshard train` through runTrain: a short synthetic run whose printed summary agrees
// with the planted model (AUC above chance, never above the planted AUC by more than noise), a Criteo TSV
// fixture with malformed lines counted and skipped, usage errors returning exit code 2 and a model that
// does not fit its data's dense width exiting 1 before any step.
import { describe, it, expect, vi, afterEach } from 'vitest';
import { mkdtempSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runTrain } from '../../lib/cli/train.js';
import { SyntheticSource } from '../../lib/data/synthetic.js';
import { planShards } from '../../lib/plan/planner.js';
import { topologyPreset } from '../../lib/plan/topology.js';
import { capture } from '../train/capture.js';

afterEach(() => vi.restoreAllMocks());

describe('embshard train', () => {
  it('trains a custom model on synthetic data and reports AUC against the planted model', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'embshard-cli-'));
    try {
      const c = capture();
      const rc = await runTrain([
        '--model', 'custom', '--bottom', '13-32-8', '--top', '32-1', '--data', 'synthetic', '--max-rows', '500',
        '--steps', '150', '--batch', '256', '--optimizer', 'adagrad', '--lr', '0.05', '--eval-batches', '4', '--save', join(dir, 'ck'),
      ]);
      vi.restoreAllMocks();
      expect(rc, c.err.join('')).toBe(0);
      const text = c.out.join('\n');
      expect(text).toMatch(/trained 150 steps, 38,400 samples/);
      const m = /held-out: AUC ([0-9.]+), logloss ([0-9.]+) over 1,024 samples \[1000000000000, 1000000001024\) of synthetic[^\n]* \(planted model's AUC ([0-9.]+)/.exec(text);
      expect(m, text).not.toBeNull();
      const [aucv, , best] = [Number(m![1]), Number(m![2]), Number(m![3])];
      expect(aucv).toBeGreaterThan(0.65);
      expect(aucv).toBeLessThan(best + 0.03);
      expect(text).toMatch(/dense fwd [0-9.]+%/);
      expect(existsSync(join(dir, 'ck', 'trainer.json'))).toBe(true);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it('reads a Criteo TSV fixture, skipping and counting malformed lines', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'embshard-cli-'));
    try {
      const good = (i: number) => [i % 2, ...Array.from({ length: 13 }, (_, j) => String((i * j) % 7)), ...Array.from({ length: 26 }, (_, j) => ((i * 31 + j) * 2654435761 % 4294967296).toString(16).padStart(8, '0'))].join('\t');
      const lines = Array.from({ length: 40 }, (_, i) => good(i));
      lines.splice(5, 0, 'not a criteo line');
      lines.splice(17, 0, ['1', ...Array.from({ length: 13 }, () => '1')].join('\t')); // too few columns
      const file = join(dir, 'train.txt');
      writeFileSync(file, lines.join('\n') + '\n');
      const c = capture();
      const rc = await runTrain([
        '--model', 'custom', '--bottom', '13-8-4', '--top', '8-1', '--data', `criteo-tsv:${file}`, '--max-rows', '100',
        '--epochs', '2', '--batch', '16', '--eval-batches', '1', '--optimizer', 'sgd', '--lr', '0.01', '--quiet',
      ]);
      vi.restoreAllMocks();
      expect(rc, c.err.join('')).toBe(0);
      const text = c.out.join('\n');
      expect(text).toMatch(/trained 6 steps, 80 samples/); // 40 good lines → batches of 16, 16, 8; two epochs
      expect(text).toMatch(/2 malformed lines skipped of 42/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it('--plan <file>: its tables must be the data\'s (rows after --max-rows, features both ways)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'embshard-cli-'));
    try {
      const src = new SyntheticSource({ batchSize: 1, preset: 'criteo-kaggle', maxRows: 500 });
      const tables = src.features.map((f, i) => ({ name: f, rows: src.tableRows[i]!, dim: 4, features: [f] }));
      await src.close?.();
      const write = (name: string, t: typeof tables) => {
        const file = join(dir, name);
        writeFileSync(file, JSON.stringify(planShards(t, topologyPreset('dgx-h100', { worldSize: 1 }), { batchSize: 64 }).toJSON()));
        return file;
      };
      const good = write('good.json', tables), short = write('short.json', tables.slice(0, 25));
      const run = (plan: string, maxRows: string) =>
        runTrain(['--model', 'custom', '--bottom', '13-8-4', '--top', '8-1', '--data', 'synthetic', '--max-rows', maxRows, '--steps', '2', '--batch', '64', '--eval-batches', '0', '--plan', plan, '--quiet']);
      let c = capture();
      expect(await run(good, '500'), c.err.join('')).toBe(0);
      vi.restoreAllMocks();
      // the plan's tables in another order than the data's features: the same tables, it trains
      c = capture();
      expect(await run(write('reversed.json', [...tables].reverse()), '500'), c.err.join('')).toBe(0);
      vi.restoreAllMocks();
      c = capture();
      expect(await run(good, '400')).toBe(1);
      expect(c.err.join('')).toMatch(/INVALID_ARGUMENT: --plan '.*good\.json': table 'cat_\d+' \(feature 'cat_\d+'\) has 500 rows; the data's has 400 \(--max-rows 400\)/);
      vi.restoreAllMocks();
      c = capture();
      expect(await run(short, '500')).toBe(1);
      expect(c.err.join('')).toMatch(/UNKNOWN_FEATURE: --plan '.*short\.json' has no table for the data's feature 'cat_25'/);
      vi.restoreAllMocks();
      c = capture();
      expect(await run(write('extra.json', [...tables, { name: 'extra', rows: 10, dim: 4, features: ['extra'] }]), '500')).toBe(1);
      expect(c.err.join('')).toMatch(/UNKNOWN_FEATURE: --plan '.*extra\.json': table 'extra' has feature 'extra', which the data lacks/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it('usage errors exit with 2 and name the problem; bad data exits with 1 and the error code', async () => {
    let c = capture();
    expect(await runTrain(['--model', 'dlrm-criteo-kaggle', '--data', 'synthetic'])).toBe(2);
    expect(c.err.join('')).toMatch(/--steps/);
    vi.restoreAllMocks();
    c = capture();
    expect(await runTrain(['--model', 'dlrm-criteo-kaggle', '--data', 'synthetic', '--steps', '0'])).toBe(2);
    expect(c.err.join('')).toMatch(/--steps must be an integer/);
    vi.restoreAllMocks();
    // numbers are decimal: hex, binary, blanks and Infinity are not
    for (const v of ['0x10', '0b1', ' ', '1 ', 'Infinity', '1e', '.']) {
      c = capture();
      expect(await runTrain(['--model', 'dlrm-criteo-kaggle', '--data', 'synthetic', '--steps', '1', '--lr', v]), `--lr '${v}'`).toBe(2);
      expect(c.err.join('')).toMatch(/--lr must be a number/);
      vi.restoreAllMocks();
    }
    // options that would be silently ignored in this combination
    for (const [extra, msg] of [
      [['--cache-policy', 'lfu'], /--cache-policy needs --storage disk:<dir>/],
      [['--decay-start', '10'], /--decay-start needs --decay-steps N/],
      [['--table-rows', '10'], /--table-rows gives the rows of an arrow: source's tables/],
      [['--dynamic-capacity', '100', '--storage', 'disk:/nonexistent', '--cache-bytes', '100000'], /--storage disk:<dir> holds tables of rows, and --dynamic-capacity makes every table dynamic/],
    ] as const) {
      c = capture();
      expect(await runTrain(['--model', 'dlrm-criteo-kaggle', '--data', 'synthetic', '--steps', '1', ...extra])).toBe(2);
      expect(c.err.join('')).toMatch(msg);
      vi.restoreAllMocks();
    }
    // evaluation of synthetic data, which never ends, cannot run to the end of its source
    for (const extra of [[], ['--eval-data', 'synthetic']]) {
      c = capture();
      expect(await runTrain(['--model', 'dlrm-criteo-kaggle', '--data', 'synthetic', '--steps', '1', '--eval-batches', 'all', ...extra])).toBe(2);
      expect(c.err.join('')).toMatch(/--eval-batches all needs a finite evaluation source; --(eval-)?data synthetic is synthetic and never ends/);
      vi.restoreAllMocks();
    }
    // a bottom MLP whose input width is not the data's dense width (Criteo-like synthetic data: 13) fails
    // before any step, naming the option
    for (const [model, msg] of [
      [['--model', 'custom', '--bottom', '12-8-4', '--top', '8-1'], /INVALID_CONFIG: --model custom --bottom 12-8-4 takes 12 dense features \(the bottom MLP's input width\); --data synthetic has 13/],
      [['--model', 'dlrm-benchmark'], /INVALID_CONFIG: --model dlrm-benchmark takes 512 dense features \(the bottom MLP's input width\); --data synthetic:criteo-kaggle has 13/],
    ] as const) {
      c = capture();
      const data = model[1] === 'custom' ? 'synthetic' : 'synthetic:criteo-kaggle';
      expect(await runTrain([...model, '--data', data, '--max-rows', '10', '--steps', '1', '--batch', '8'])).toBe(1);
      expect(c.err.join('')).toMatch(msg);
      expect(c.err.join('') + c.out.join('')).not.toMatch(/step 1|trained/);
      vi.restoreAllMocks();
    }
    c = capture();
    expect(await runTrain(['--model', 'dlrm-criteo-kaggle', '--data', 'synthetic', '--steps', '1', '--cross-layers', '3'])).toBe(1);
    expect(c.err.join('')).toMatch(/INVALID_CONFIG: --cross-layers \/ --cross-rank shape DCNv2 cross layers; this model's interaction is 'dot' \(add --interaction cross\)/);
    vi.restoreAllMocks();
    c = capture();
    expect(await runTrain(['--model', 'dlrm-criteo-kaggle', '--data', 'synthetic', '--steps', '1', '--batch', '2000000000'])).toBe(2);
    expect(c.err.join('')).toMatch(/--batch must be an integer in \[1, 16777216\] \(got '2000000000'\)/);
    vi.restoreAllMocks();
    c = capture();
    expect(await runTrain(['--model', 'dlrm-criteo-kaggle', '--data', 'synthetic', '--epochs', '1'])).toBe(2);
    expect(c.err.join('')).toMatch(/--epochs needs a finite source; synthetic data never ends/);
    vi.restoreAllMocks();
    c = capture();
    expect(await runTrain(['--model', 'dlrm-criteo-kaggle', '--data', 'parquet:x', '--steps', '1'])).toBe(1);
    expect(c.err.join('')).toMatch(/INVALID_ARGUMENT/);
    vi.restoreAllMocks();
    c = capture();
    expect(await runTrain(['--model', 'dlrm-criteo-kaggle', '--data', 'synthetic', '--steps', '1', '--plan', 'no-such-plan.json'])).toBe(1);
    expect(c.err.join('')).toMatch(/INVALID_ARGUMENT.*--plan/);
    vi.restoreAllMocks();
    // a file that is not Arrow IPC: a typed error naming it, not the reader's own
    const dir = mkdtempSync(join(tmpdir(), 'embshard-cli-'));
    try {
      writeFileSync(join(dir, 'x.arrow'), Buffer.from(Array.from({ length: 1000 }, (_, i) => (i * 37) & 255)));
      c = capture();
      expect(await runTrain(['--model', 'dlrm-criteo-kaggle', '--data', `arrow:${join(dir, 'x.arrow')}`, '--steps', '1', '--table-rows', '10'])).toBe(1);
      expect(c.err.join('')).toMatch(/INVALID_ARGUMENT: arrow:.*x\.arrow: not an Arrow IPC file or stream/);
      vi.restoreAllMocks();
      // a file of malformed lines only: the error says what was skipped
      writeFileSync(join(dir, 'bad.tsv'), 'label\tI1\tI2\nnot\ta\tsample\n');
      c = capture();
      expect(await runTrain(['--model', 'dlrm-criteo-kaggle', '--data', `criteo-tsv:${join(dir, 'bad.tsv')}`, '--epochs', '1', '--max-rows', '10'])).toBe(1);
      expect(c.err.join('')).toMatch(/the source yielded no batches \(2 malformed line\(s\) of 2 skipped: \{"columns":2\}\)/);
      vi.restoreAllMocks();
      // --save / --report destinations that cannot be written fail before any step trains
      const file = join(dir, 'x.arrow');
      for (const [opt, path, msg] of [
        ['--report', join(file, 'r.html'), /IO_ERROR: --report: '.*r\.html' cannot be written \(EEXIST/],
        ['--report', dir, /IO_ERROR: --report: '.*' cannot be written \(it is a folder\)/],
        ['--save', join(file, 'ck'), /IO_ERROR: --save: saving checkpoint '.*ck' failed: EEXIST/],
      ] as const) {
        c = capture();
        expect(await runTrain(['--model', 'custom', '--bottom', '13-8-4', '--top', '8-1', '--data', 'synthetic', '--max-rows', '100', '--steps', '2', '--batch', '64', opt, path])).toBe(1);
        expect(c.err.join('')).toMatch(msg);
        expect(c.err.join('') + c.out.join('')).not.toMatch(/step 1|trained/);
        vi.restoreAllMocks();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
