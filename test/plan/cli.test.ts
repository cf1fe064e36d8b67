// `embshard plan`: writes a plan that ShardPlan.fromJSON accepts, whose placement is the one printed; usage and
// planning errors give exit codes; --out and --svg are written together or not at all.
import { lstatSync, mkdirSync, readdirSync, readFileSync, rmdirSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { JaggedBatch } from '../../lib/batch.js';
import { PLAN_USAGE, runPlan } from '../../lib/cli/plan.js';
import { criteoTsvSource } from '../../lib/data/criteo-tsv.js';
import { ShardPlan } from '../../lib/plan/shard-plan.js';
import { workload } from '../../lib/workloads/presets.js';
import { tempDir } from '../temp-dir.js';

const tmp = tempDir('plan-cli');

describe('embshard plan', () => {
  afterEach(() => vi.restoreAllMocks());

  it('prints the explanation and writes a valid plan', async () => {
    const log = vi.spyOn(console, 'log').mockImplementation(() => {});
    const out = join(tmp.dir, 'plan-a.json');
    const code = await runPlan(['--model', 'dlrm-dcnv2', '--gpus', '16', '--preset', 'dgx-h100', '--batch', '1024', '--time-budget-ms', '3000', '--out', out]);
    expect(code).toBe(0);
    const text = log.mock.calls.map((c) => String(c[0])).join('\n');
    expect(text).toContain('Predicted embedding stage');
    expect(text).toContain('table-row-wise');
    const plan = ShardPlan.fromJSON(readFileSync(out, 'utf8'));
    expect(plan.topology).toMatchObject({ worldSize: 16, ranksPerNode: 8, name: 'dgx-h100' });
    expect(plan.batchSize).toBe(1024);
    expect(plan.tables.map((t) => t.name)).toEqual(workload('dlrm-dcnv2').tables.map((t) => t.name));
    expect(plan.meta.model).toBe('dlrm-dcnv2');
  });

  it('returns 2 on usage errors and 1 on planning errors', async () => {
    const err = vi.spyOn(console, 'error').mockImplementation(() => {});
    expect(await runPlan(['--gpus', '8'])).toBe(2);
    expect(await runPlan(['--model', 'dlrm-dcnv2', '--gpus', 'eight'])).toBe(2);
    expect(await runPlan(['--model', 'dlrm-dcnv2', '--gpus', '8', '--colour', 'red'])).toBe(2);
    expect(await runPlan(['--model', 'nope', '--gpus', '8'])).toBe(1);
    expect(await runPlan(['--model', 'dlrm-dcnv2', '--gpus', '12', '--ranks-per-node', '8'])).toBe(1);
    // 510 tables of 114.6B parameters cannot fit on one GPU
    expect(await runPlan(['--model', 't510', '--gpus', '1'])).toBe(1);
    expect(err.mock.calls.map((c) => String(c[0])).join('\n')).toContain('PLAN_INFEASIBLE');
    // an --out / --svg the system cannot write: 1 with one IO_ERROR line naming the path
    vi.spyOn(console, 'log').mockImplementation(() => {});
    err.mockClear();
    const missing = join(tmp.dir, 'no-such-folder', 'plan.svg');
    expect(await runPlan(['--model', 'criteo-kaggle', '--gpus', '2', '--time-budget-ms', '200', '--svg', missing])).toBe(1);
    expect(err.mock.calls.map((c) => String(c[0]))).toEqual([`embshard plan: IO_ERROR: --svg '${missing}' cannot be written (ENOENT)`]);
  });

  it('writes --out and --svg together or not at all: an --svg it cannot write leaves an existing --out as it was', async () => {
    vi.spyOn(console, 'log').mockImplementation(() => {});
    const err = vi.spyOn(console, 'error').mockImplementation(() => {});
    const out = join(tmp.dir, 'kept.json');
    writeFileSync(out, 'the previous plan\n');
    for (const svg of [join(tmp.dir, 'no-such-folder', 'plan.svg'), tmp.dir]) {
      err.mockClear();
      expect(await runPlan(['--model', 'criteo-kaggle', '--gpus', '2', '--time-budget-ms', '100', '--out', out, '--svg', svg])).toBe(1);
      expect(readFileSync(out, 'utf8')).toBe('the previous plan\n');
      expect(err.mock.calls.map((c) => String(c[0]))).toEqual([expect.stringMatching(new RegExp(`^embshard plan: IO_ERROR: --svg '.*' cannot be written \\((ENOENT|it is a folder)\\)$`))]);
    }
    // a file that fails while written (here: the name of its temporary file is taken by a folder) is named,
    // the other is not written either, and what was there before is left alone
    const svgOk = join(tmp.dir, 'blocked.svg'), blocker = join(tmp.dir, `.blocked.svg.${process.pid}.tmp`);
    mkdirSync(blocker);
    err.mockClear();
    expect(await runPlan(['--model', 'criteo-kaggle', '--gpus', '2', '--time-budget-ms', '100', '--out', out, '--svg', svgOk])).toBe(1);
    expect(readFileSync(out, 'utf8')).toBe('the previous plan\n');
    expect(err.mock.calls.map((c) => String(c[0]))).toEqual([`embshard plan: IO_ERROR: '${svgOk}' could not be written (EEXIST)`]);
    expect(statSync(blocker).isDirectory()).toBe(true);
    expect(readdirSync(tmp.dir).filter((f) => f.endsWith('.tmp'))).toEqual([`.blocked.svg.${process.pid}.tmp`]);
    rmdirSync(blocker);
    // the same file for both: a usage error, before anything is written
    err.mockClear();
    expect(await runPlan(['--model', 'criteo-kaggle', '--gpus', '2', '--out', out, '--svg', join(tmp.dir, '.', 'kept.json')])).toBe(2);
    expect(String(err.mock.calls[0]![0])).toContain(`--out and --svg name the same file`);
    expect(readFileSync(out, 'utf8')).toBe('the previous plan\n');
    // written: the plan replaces the file, a link is written through, and no temporary file is left beside them
    const real = join(tmp.dir, 'real.json'), link = join(tmp.dir, 'link.json'), svg = join(tmp.dir, 'both.svg');
    writeFileSync(real, 'old\n');
    symlinkSync(real, link);
    const before = readdirSync(tmp.dir).sort();
    expect(await runPlan(['--model', 'criteo-kaggle', '--gpus', '2', '--time-budget-ms', '100', '--out', link, '--svg', svg])).toBe(0);
    expect(lstatSync(link).isSymbolicLink()).toBe(true);
    expect(ShardPlan.fromJSON(readFileSync(real, 'utf8')).topology.worldSize).toBe(2);
    expect(readFileSync(svg, 'utf8')).toMatch(/^<svg /);
    expect(readdirSync(tmp.dir).sort()).toEqual([...before, 'both.svg'].sort());
  });

  it('options: --key=value, each at most once, with a value that is not the next option; paths not empty', async () => {
    const log = vi.spyOn(console, 'log').mockImplementation(() => {});
    const err = vi.spyOn(console, 'error').mockImplementation(() => {});
    const out = join(tmp.dir, 'eq.json');
    expect(await runPlan(['--model=criteo-kaggle', '--gpus=4', '--ranks-per-node=2', '--batch=512', '--time-budget-ms=100', `--out=${out}`])).toBe(0);
    const plan = ShardPlan.fromJSON(readFileSync(out, 'utf8'));
    expect([plan.topology.worldSize, plan.topology.ranksPerNode, plan.batchSize]).toEqual([4, 2, 512]);
    expect(log.mock.calls.map((c) => String(c[0]))).toContain(`wrote ${out}`);
    for (const [args, problem] of [
      [['--model', 'criteo-kaggle', '--gpus', '2', '--gpus', '4'], '--gpus is given twice'],
      [['--model', 'criteo-kaggle', '--model=t180', '--gpus', '2'], '--model is given twice'],
      [['--model', 'criteo-kaggle', '--gpus'], '--gpus needs a value'],
      [['--model', 'criteo-kaggle', '--gpus', '2', '--out', '--svg', 'x.svg'], "--out needs a value (got the option '--svg')"],
      [['--model', 'criteo-kaggle', '--gpus', '2', '--out='], '--out must not be empty'],
      [['--model', 'criteo-kaggle', '--gpus', '2', '--svg', ''], '--svg must not be empty'],
      [['--model', 'criteo-kaggle', '--gpus', '2', '--colour'], "unknown option '--colour'"],
      [['--model', 'criteo-kaggle', '--gpus=2.5'], "--gpus must be an integer >= 1 (got '2.5')"],
      [['--model', 'criteo-kaggle', '--gpus', '2', 'extra'], "unexpected argument 'extra'"],
    ] as const) {
      err.mockClear();
      expect(await runPlan([...args]), args.join(' ')).toBe(2);
      expect(String(err.mock.calls[0]![0])).toBe(`embshard plan: ${problem}\n${PLAN_USAGE}`);
    }
  });

  it('the printed placement is the plan file\'s: clusters, shards per rank and each table\'s cluster, rows and ranks, counted from the JSON', async () => {
    const log = vi.spyOn(console, 'log').mockImplementation(() => {});
    const out = join(tmp.dir, 'counted.json');
    expect(await runPlan(['--model', 'dlrm-dcnv2', '--gpus', '16', '--batch', '1024', '--time-budget-ms', '300', '--out', out])).toBe(0);
    const text = log.mock.calls.map((c) => String(c[0])).join('\n');
    const json = JSON.parse(readFileSync(out, 'utf8')) as { tables: { name: string; rows: number; cluster: string; shards: { rank: number }[] }[]; topology: { worldSize: number } };
    const clusters = { dp: 0, rb: 0, ub: 0 } as Record<string, number>;
    const shards = new Array<number>(json.topology.worldSize).fill(0);
    for (const t of json.tables) {
      clusters[t.cluster]!++;
      for (const s of t.shards) shards[s.rank]!++;
    }
    expect(text).toContain(`Clusters: dp ${clusters.dp}, rb ${clusters.rb}, ub ${clusters.ub};`);
    const cells = (l: string) => l.split('|').map((c) => c.trim());
    const rankRows = text.split('\n').filter((l) => /^\d+\s+\|/.test(l)).map(cells);
    expect(rankRows.map((r) => Number(r[0]))).toEqual(shards.map((_, r) => r));
    expect(rankRows.map((r) => Number(r.at(-1)))).toEqual(shards);
    const tableRows = new Map(text.split('\n').filter((l) => /^\S+\s+\|\s+(dp|rb|ub)\s+\|/.test(l)).map(cells).map((r) => [r[0]!, r]));
    expect([...tableRows.keys()]).toEqual(json.tables.map((t) => t.name));
    for (const t of json.tables) {
      const r = tableRows.get(t.name)!;
      expect([r[1], Number(r[2])], t.name).toEqual([t.cluster, t.rows]);
      // the ranks holding a shard of the table (dp: every rank)
      expect(Number(r[6]), t.name).toBe(t.cluster === 'dp' ? json.topology.worldSize : new Set(t.shards.map((s) => s.rank)).size);
    }
  });

  it('--profile criteo-tsv:<file> plans from the ids measured there: each table\'s most frequent ids are its hot ids', async () => {
    const log = vi.spyOn(console, 'log').mockImplementation(() => {});
    const file = fileURLToPath(new URL('../fixtures/data/criteo-sample.tsv', import.meta.url));
    const out = join(tmp.dir, 'plan-b.json');
    const B = 4, N = 2, K = 5, H = 2;
    const code = await runPlan(['--model', 'criteo-kaggle', '--gpus', '4', '--ranks-per-node', '2', '--batch', String(B), '--time-budget-ms', '500',
      '--profile', `criteo-tsv:${file}`, '--profile-batches', String(N), '--top-k', String(K), '--min-hits', String(H), '--out', out]);
    expect(code).toBe(0);
    expect(log.mock.calls.map((c) => String(c[0])).join('\n')).toContain(`Profiled ${N} batches of Criteo TSV`);
    const plan = ShardPlan.fromJSON(readFileSync(out, 'utf8'));
    expect(plan.meta.profile).toBe(`criteo-tsv:${file}`);
    expect(plan.tables.filter((t) => t.hotIds.length > 0).length).toBeGreaterThan(3);
    // oracle: the same file read directly, every id counted with a Map, those hit H times or more sorted by (count desc, id asc)
    const w = workload('criteo-kaggle');
    const source = criteoTsvSource({ path: file, batchSize: B, tableRows: w.tables.map((t) => t.rows) });
    const batches: JaggedBatch[] = [];
    for await (const b of source) if (batches.length < N) batches.push(b.sparse);
    for (const t of plan.tables) {
      const m = new Map<number, number>();
      for (const b of batches) for (const id of b.feature(t.features[0]!).ids) m.set(Number(id), (m.get(Number(id)) ?? 0) + 1);
      const top = [...m].filter((x) => x[1] >= H).sort((x, y) => y[1] - x[1] || x[0] - y[0]).slice(0, K);
      expect(t.hotIds, t.name).toEqual(top.map((x) => x[0]));
      // counts below 20 are planned from the fitted law, with the same total
      const sum = (a: number[]) => a.reduce((x, y) => x + y, 0);
      expect(sum(t.access.top!.counts), t.name).toBeCloseTo(sum(top.map((x) => x[1])), 9);
    }
  });

  it('--profile errors: a source that cannot open gives 1, a profiling option without --profile gives 2', async () => {
    const err = vi.spyOn(console, 'error').mockImplementation(() => {});
    for (const [k, v] of [['--max-rows', '100'], ['--top-k', '5'], ['--min-hits', '3'], ['--profile-batches', '2']]) {
      err.mockClear();
      expect(await runPlan(['--model', 'criteo-kaggle', '--gpus', '4', k!, v!])).toBe(2);
      expect(err.mock.calls.map((c) => String(c[0])).join('\n')).toContain(`${k} needs --profile`);
    }
    expect(await runPlan(['--model', 'criteo-kaggle', '--gpus', '4', '--batch', '99999999999'])).toBe(2);
    expect(await runPlan(['--model', 'criteo-kaggle', '--gpus', '4', '--profile', 'binary:/nonexistent'])).toBe(1);
    expect(err.mock.calls.map((c) => String(c[0])).join('\n')).toContain('binary:<dir>');
  });
});
