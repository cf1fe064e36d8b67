// The NCCL group: where a GPU exists, a one-rank group (bootstrapped through the in-process group) runs
// every collective exactly; without a GPU or without an NCCL build, createNcclGroup refuses with
// BACKEND_UNAVAILABLE (never a crash or a hang) and the bootstrap group stays usable.
import { describe, it, expect } from 'vitest';
import { spawnSync } from 'node:child_process';
import { createInProcessGroups, createNcclGroup } from '../../lib/sharded/group.js';

const gpu = spawnSync('nvidia-smi', ['-L'], { stdio: 'ignore' }).status === 0;

describe('NCCL process group', () => {
  it.skipIf(gpu)('without a GPU (or an NCCL build) createNcclGroup rejects with BACKEND_UNAVAILABLE', async () => {
    const [boot] = createInProcessGroups(1);
    await expect(createNcclGroup({ bootstrap: boot!, timeoutMs: 10_000 })).rejects.toMatchObject({ code: 'BACKEND_UNAVAILABLE' });
    await boot!.barrier();
    boot!.close();
  });

  it.runIf(gpu)('a one-rank group on GPU 0: every collective exact', async () => {
    const [boot] = createInProcessGroups(1);
    const g = await createNcclGroup({ bootstrap: boot!, device: 0, timeoutMs: 60_000 });
    expect(g.kind).toBe('nccl');
    const a = await g.allToAllV(Float64Array.from([1.5, 2.5, 3.5]), [3]);
    expect(Array.from(a.data)).toEqual([1.5, 2.5, 3.5]);
    const ag = await g.allGather(Int32Array.from([7, 8]));
    expect(Array.from(ag.data)).toEqual([7, 8]);
    const x = Float32Array.from([1, -2]);
    await g.allReduce(x, 'sum');
    expect(Array.from(x)).toEqual([1, -2]);
    const b = Uint16Array.from([9, 10]);
    await g.broadcast(b, 0);
    expect(Array.from(b)).toEqual([9, 10]);
    await g.barrier();
    g.close();
    boot!.close();
  });
});
