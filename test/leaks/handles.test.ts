// handles.test.ts — objects created and disposed many times give back their threads, file descriptors
// and event-loop handles: in-process process groups (an executor thread each) created, used for a few
// collectives and closed; collections with a disk-backed table and a dynamic table with a spill file
// (files opened and locked) created, stepped, saved, loaded and disposed. Counted in a child process
// after forced GC: after the first checkpoint (pools started) the counts never change.
import { describe, expect, it } from 'vitest';
import { measure, show } from './measure.js';

describe('created and disposed many times', () => {
  it('in-process groups: threads, descriptors and handles return to where they were', () => {
    const s = measure(
      `const { createInProcessGroups } = await L('sharded/group');`,
      `const gs = createInProcessGroups(2, { timeoutMs: 30000 });
       await Promise.all(gs.map((g) => g.allReduce(new Float32Array(16).fill(1))));
       const r = await Promise.all(gs.map((g) => g.allToAllV(new Float32Array(8), [4, 4])));
       gs[0].release(r[0].data);
       await Promise.all(gs.map((g) => g.barrier()));
       for (const g of gs) g.close();`,
      [20, 100, 200],
    );
    for (const x of s.slice(1)) expect([x.threads, x.fds, x.resources], show(s)).toEqual([s[0]!.threads, s[0]!.fds, s[0]!.resources]);
  });

  it('disk-backed and spilling dynamic tables: descriptors and threads return to where they were', () => {
    const s = measure(
      `const { EmbeddingCollection } = await L('collection');
       const { JaggedBatch } = await L('batch');
       const { mkdtempSync, mkdirSync, rmSync } = await import('node:fs');
       const { tmpdir } = await import('node:os');
       const tmp = mkdtempSync(tmpdir() + '/embshard-leak-files-');
       const teardown = () => rmSync(tmp, { recursive: true, force: true });
       const B = 16;
       const batch = (i) => JaggedBatch.fromLengths({ features: ['a', 'b'], batchSize: B, lengths: new Int32Array(2 * B).fill(2), ids: BigInt64Array.from({ length: 4 * B }, (_, k) => BigInt((k * 7 + i * 13) % 500)) });`,
      `const dir = tmp + '/' + (i % 2);
       rmSync(dir, { recursive: true, force: true });
       for (const d of ['disk', 'spill', 'disk2', 'spill2']) mkdirSync(dir + '/' + d, { recursive: true });
       const ec = new EmbeddingCollection({
         tables: [
           { name: 'k', rows: 500, dim: 4, features: ['a'], storage: { kind: 'disk', path: dir + '/disk', cacheBytes: 64 * 1024 } },
           { name: 'd', rows: 'dynamic', capacity: 32, dim: 4, features: ['b'], spill: { path: dir + '/spill' } },
         ],
         optimizer: { type: 'adagrad', lr: 0.1 },
       });
       const o = await ec.forward(batch(i));
       await ec.backward(o, { pooled: new Float32Array(B * ec.pooledDim).fill(0.01) });
       await ec.save(dir + '/ck');
       ec.dispose();
       const back = await EmbeddingCollection.load(dir + '/ck', { storagePath: dir + '/disk2', spillPath: dir + '/spill2' });
       await back.release(await back.forward(batch(i + 1)));
       back.dispose();`,
      [10, 60, 120],
    );
    for (const x of s.slice(1)) expect([x.threads, x.fds, x.resources], show(s)).toEqual([s[0]!.threads, s[0]!.fds, s[0]!.resources]);
  });
});
