// Run under mpirun (test/sharded/dynamic-mpi.test.ts): a sharded dynamic table trained on the MPI group
// beside the naive model of ../dynamic-oracle.mjs, which every rank runs over the global bags it builds
// itself (the scenario is deterministic). Each rank checks its outputs, its row shards' counters and held
// ids, and readRows / readState by raw id (edge ids, ids never seen) against the model. Optionally loads
// a checkpoint first (the model replays the saved run) and saves one at the end.
// Args: placement capacity optimizer-index steps-from steps-to spill(0|1) [load-dir|-] [save-dir|-] [saved-W]
// One JSON line per rank: { rank, outErr, cellErr, shards: mismatch descriptions, spilled, evictions }.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { JaggedBatch } from '../../../dist/lib/batch.js';
import { ShardPlan } from '../../../dist/lib/plan/shard-plan.js';
import { createMpiGroup } from '../../../dist/lib/sharded/group.js';
import { ShardedEmbeddingCollection } from '../../../dist/lib/sharded/sharded.js';
import * as O from '../dynamic-oracle.mjs';

const [placement, capArg, optArg, fromArg, toArg, spillArg, loadDir = '-', saveDir = '-', savedW = '2'] = process.argv.slice(2);
const lib = { JaggedBatch, ShardPlan };
const g = await createMpiGroup({ timeoutMs: 60_000 });
const W = g.size, r = g.rank, cap = Number(capArg), from = Number(fromArg), to = Number(toArg);
const opt = O.OPTIMIZERS[Number(optArg)];
const plan = O.dynPlan(lib, W, placement, cap, opt.type);
const spills = spillArg === '1';
let spill;
if (spills) {
  spill = { path: join(saveDir !== '-' ? saveDir : loadDir, `spill-np${W}`) };
  mkdirSync(spill.path, { recursive: true });
}
const config = O.dynConfig(opt, spill ? { spill } : {});
const sc = loadDir !== '-' ? await ShardedEmbeddingCollection.load(loadDir, plan, g, config) : new ShardedEmbeddingCollection(plan, g, config);
const model = new O.NaiveShardedDynamic({ capacity: cap, groups: plan.layouts[0].groups.map((x) => [x.a, x.b]), cluster: placement === 'ub' ? 'ub' : 'rb', optimizer: opt, spill: spills });
const pool = O.edgeIds(20);
const gradsOf = (bags, step) => bags.map((b, p) => O.gradOf(p, step, b[0].length));
// the saved run, replayed by the model
for (let step = 0; step < from; step++) {
  const bags = O.edgeBags(pool, Number(savedW), step);
  model.train(bags, gradsOf(bags, step));
}
const off = (f) => sc.featureInfo.find((x) => x.name === f).offset;
const cols = [...Array.from({ length: O.DIM }, (_, c) => off('a') + c), ...Array.from({ length: O.DIM }, (_, c) => off('b') + c)];
let outErr = 0;
const shards = [];
const checkShards = (what) => {
  const mine = sc.stats(), held = sc.heldIds('dyn');
  for (const s of mine) {
    const m = model.shardStats().find((x) => x.range[0] === s.range[0]);
    const got = { hits: s.hits, misses: s.misses, admissions: s.admissions, evictions: s.evictions, rows: s.rows, ...(s.spilled !== undefined ? { spilled: s.spilled } : {}) };
    const want = { hits: m.hits, misses: m.misses, admissions: m.admissions, evictions: m.evictions, rows: m.rows, ...(m.spilled !== undefined ? { spilled: m.spilled } : {}) };
    if (JSON.stringify(got) !== JSON.stringify(want)) shards.push(`${what} [${s.range}]: ${JSON.stringify(got)} != ${JSON.stringify(want)}`);
    const ids = [...held.find((h) => h.range[0] === s.range[0]).ids].sort((x, y) => (x < y ? -1 : x > y ? 1 : 0));
    if (ids.join() !== m.held.join()) shards.push(`${what} [${s.range}]: held ids differ`);
  }
};
if (loadDir !== '-') checkShards('loaded');
for (let step = from; step < to; step++) {
  const bags = O.edgeBags(pool, W, step);
  const grads = gradsOf(bags, step);
  const want = model.train(bags, grads)[r];
  const out = await sc.forward(O.batchOf(lib, bags[r]));
  const B = bags[r][0].length, P = cols.length;
  const got = new Float64Array(B * P), grad = new Float32Array(B * P);
  for (let b = 0; b < B; b++)
    cols.forEach((c, k) => {
      got[b * P + k] = out.pooled[b * P + c];
      grad[b * P + c] = grads[r][b * P + k];
    });
  outErr = Math.max(outErr, O.relErr(got, want));
  await sc.backward(out, { pooled: grad });
  checkShards(`step ${step}`);
}
const ids = BigInt64Array.from([...pool, 987654321987n, -(2n ** 62n) + 3n]);
const rows = await sc.readRows('dyn', ids), state = await sc.readState('dyn', ids);
const cellErr = Math.max(O.relErr(rows, model.rows([...ids])), O.relErr(state, model.state([...ids])));
if (saveDir !== '-') await sc.save(join(saveDir, 'ck'));
const ms = model.shardStats();
console.log(JSON.stringify({ rank: r, outErr, cellErr, shards, spilled: ms.reduce((n, s) => n + (s.spilled ?? 0), 0), evictions: ms.reduce((n, s) => n + s.evictions, 0) }));
sc.dispose();
g.close();
