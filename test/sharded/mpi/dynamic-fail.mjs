// Run under mpirun (test/sharded/dynamic-mpi.test.ts): failures of one rank of a sharded collection with
// dynamic tables (spilling). Modes:
//  - save: a first save succeeds; then the last rank cannot read its shards for the second (its temporary
//    folder does not exist): every rank must reject that save with one code, and the ranks then still
//    read rows together. One JSON line per rank: { rank, first, second, after }.
//  - kill / throw (mpirun --enable-recovery, 4 ranks): at the start of step 2 the last rank dies (SIGKILL)
//    or throws in its own code and leaves the step (it stays alive, silent, past the others' timeout);
//    the survivors print { rank, step, code, message, waitedMs } (test/sharded/mpi-harness.ts).
// Args: mode dir [timeoutMs]
import { join } from 'node:path';
import { JaggedBatch } from '../../../dist/lib/batch.js';
import { ShardPlan } from '../../../dist/lib/plan/shard-plan.js';
import { createMpiGroup } from '../../../dist/lib/sharded/group.js';
import { ShardedEmbeddingCollection } from '../../../dist/lib/sharded/sharded.js';
import { mkdirSync } from 'node:fs';
import * as O from '../dynamic-oracle.mjs';

const [mode, dir, timeoutArg = '20000'] = process.argv.slice(2);
const timeoutMs = Number(timeoutArg);
const lib = { JaggedBatch, ShardPlan };
const g = await createMpiGroup({ timeoutMs });
const W = g.size, r = g.rank, last = W - 1;
const opt = O.OPTIMIZERS[1];
const plan = O.dynPlan(lib, W, 'rb', 3 * W, opt.type);
const spill = { path: join(dir, `spill-${mode}`) };
mkdirSync(spill.path, { recursive: true });
const sc = new ShardedEmbeddingCollection(plan, g, O.dynConfig(opt, { spill }));
const pool = O.edgeIds(20);
const code = (p) => p.then(() => 'ok', (e) => e.code ?? String(e));

if (mode === 'save') {
  for (let step = 0; step < 3; step++) {
    const bags = O.edgeBags(pool, W, step);
    const out = await sc.forward(O.batchOf(lib, bags[r]));
    await sc.backward(out, { pooled: O.gradOf(r, step, bags[r][0].length) });
  }
  const first = await code(sc.save(join(dir, 'ck')));
  if (r === last) process.env.TMPDIR = join(dir, 'no', 'such', 'folder');
  const second = await code(sc.save(join(dir, 'ck')));
  const after = await code(sc.readRows('dyn', BigInt64Array.from(pool)));
  console.log(JSON.stringify({ rank: r, first, second, after }));
} else {
  let step = 0, t0 = Date.now();
  try {
    for (; step < 5; step++) {
      if (step === 2 && r === last) {
        if (mode === 'kill') process.kill(process.pid, 'SIGKILL');
        await new Promise((res) => setTimeout(res, timeoutMs + 3000)); // thrown out of the step: silent, alive
        process.exit(0);
      }
      t0 = Date.now();
      const bags = O.edgeBags(pool, W, step);
      const out = await sc.forward(O.batchOf(lib, bags[r]));
      await sc.backward(out, { pooled: O.gradOf(r, step, bags[r][0].length) });
    }
    console.log(JSON.stringify({ rank: r, error: null }));
  } catch (e) {
    console.log(JSON.stringify({ rank: r, step, code: e.code, message: e.message, waitedMs: Date.now() - t0 }));
  }
  process.exit(0);
}
sc.dispose();
g.close();
