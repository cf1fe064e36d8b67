// Herald scheduling on CUDA engines over the NCCL group: the mode is TypeScript over the engine and the
// process group, so the same code trains tables on `cuda:N` with NCCL collectives. Where a CUDA device
// exists (a GPU, or the CUDA emulation under `npm run test:cuda-emu`, whose one device every rank
// shares), three ranks as threads of this process train against one CPU EmbeddingCollection on the same
// global batches (tables, optimizer state and pooled outputs within 1e-5). Without a device it skips,
// saying so: there is nothing to run it on.
import { describe, it, expect } from 'vitest';
import { JaggedBatch } from '../../lib/batch.js';
import { cudaBackend } from '../../lib/backends.js';
import { EmbeddingCollection } from '../../lib/collection.js';
import { HeraldEmbeddingCollection } from '../../lib/herald/collection.js';
import { takeRows } from '../../lib/data/take.js';
import { createInProcessGroups, createNcclGroup } from '../../lib/sharded/group.js';
// @ts-expect-error plain JS helper shared with the mpirun scripts
import * as S from './scenario.mjs';

const cuda = cudaBackend();
const emulated = process.env.EMBSHARD_CUDA_EMU === '1';
const W = 3;
const devices = emulated ? W : (cuda.devices?.length ?? 0);
const ready = cuda.available && devices >= W;
if (!ready) console.warn(`herald-cuda: skipped: needs ${W} CUDA devices (a GPU per rank) or the CUDA emulation; this machine has ${cuda.available ? devices : 'none'}`);

describe.runIf(ready)('HeraldEmbeddingCollection on cuda engines over NCCL', () => {
  it(`${W} ranks, adagrad, cache 8: equals one CPU collection`, async () => {
    const lib = { JaggedBatch };
    const cfg = S.config({ type: 'adagrad', lr: 0.1 });
    const boot = createInProcessGroups(W);
    const groups = await Promise.all(boot.map((b) => createNcclGroup({ bootstrap: b, device: emulated ? 0 : b.rank, timeoutMs: 60_000 })));
    const B = 6;
    const ranks = groups.map((g) => new HeraldEmbeddingCollection({ ...cfg, device: `cuda:${emulated ? 0 : g.rank}` }, g, { cacheRows: 8, batchSize: B }));
    const oracle = new EmbeddingCollection(cfg);
    try {
      const P = oracle.pooledDim;
      for (let step = 0; step < 3; step++) {
        const global = S.globalBatch(lib, step, W * B) as JaggedBatch;
        const locals = ranks.map((r) => r.assign(global));
        const outs = await Promise.all(ranks.map((r, i) => r.forward(locals[i]!)));
        const go = await oracle.forward(global);
        for (const o of outs) expect(S.relErr(o.pooled, takeRows(go.pooled, P, o.samples))).toBeLessThan(1e-5);
        await oracle.backward(go, { pooled: S.gradsFor(step, Int32Array.from({ length: W * B }, (_, i) => i), P) });
        await Promise.all(ranks.map((r, i) => r.backward(outs[i]!, { pooled: S.gradsFor(step, outs[i]!.samples, P) })));
      }
      for (const t of oracle.tables) {
        const ids = Int32Array.from({ length: t.rows }, (_, j) => j);
        for (const g of await Promise.all(ranks.map((r) => r.gather(t.name)))) {
          expect(S.relErr(g.weights, oracle.readRows(t.name, ids))).toBeLessThan(1e-5);
          expect(S.relErr(g.state, oracle.readState(t.name, ids))).toBeLessThan(1e-5);
        }
      }
    } finally {
      ranks.forEach((r) => r.dispose());
      oracle.dispose();
      groups.forEach((g) => g.close());
      boot.forEach((b) => b.close());
    }
  });
});
