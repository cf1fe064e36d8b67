// cuda-disk.test.ts — disk-backed tables on the CUDA engine (the cache in device memory, the table in a
// host file) train bitwise like the same tables in device memory: forward outputs, rows and state over
// several steps, fp16 with Adam and fp32 with Adagrad, Zipf ids, caches of 96 rows. Runs where
// a CUDA device is usable, and under the CUDA emulation (npm run test:cuda-emu).
import { describe, expect, it } from 'vitest';
import { EmbeddingCollection } from '../../lib/index.js';
import type { OptimizerConfig, TableConfig } from '../../lib/index.js';
import { Rng } from '../../lib/random/rng.js';
import { testDevices } from '../embedding/devices.js';
import { everything, grads, idBatch } from './helpers.js';
import { tempDir } from '../temp-dir.js';

const tmp = tempDir('cuda-disk');
const bits = (a: Float32Array) => new Uint32Array(a.buffer, a.byteOffset, a.length);
const cuda = testDevices().find((d) => d.device !== 'cpu')!;

describe('disk-backed tables on the CUDA engine', () => {
  const cases: { name: string; table: TableConfig; optimizer: OptimizerConfig; cacheBytes: number }[] = [
    { name: 'fp16, adam', table: { name: 't', rows: 2000, dim: 8, dtype: 'fp16' }, optimizer: { type: 'adam', lr: 0.02 }, cacheBytes: 96 * (16 + 64 + 32) },
    { name: 'fp32 mean, adagrad', table: { name: 't', rows: 2000, dim: 4, pooling: 'mean' }, optimizer: { type: 'adagrad', lr: 0.1 }, cacheBytes: 96 * (16 + 16 + 32) },
  ];
  for (const c of cases)
    it.skipIf(cuda.skip !== false)(`${c.name} ${cuda.skip || ''}`, async () => {
      const mem = new EmbeddingCollection({ tables: [c.table], optimizer: c.optimizer, device: cuda.device });
      const disk = new EmbeddingCollection({
        tables: [{ ...c.table, storage: { kind: 'disk', path: `${tmp.dir}/${c.name.replace(/\W+/g, '_')}`, cacheBytes: c.cacheBytes } }],
        optimizer: c.optimizer,
        device: cuda.device,
      });
      expect(disk.device).toBe(cuda.device);
      const rng = new Rng(4);
      for (let s = 0; s < 10; s++) {
        const batch = idBatch(mem, rng, 8, 4, 1.05);
        const g = grads(mem, batch, rng);
        const om = await mem.forward(batch);
        const od = await disk.forward(batch);
        expect(bits(od.pooled)).toEqual(bits(om.pooled));
        await mem.backward(om, g);
        await disk.backward(od, g);
      }
      const a = everything(mem), b = everything(disk);
      a.forEach((x, i) => expect(bits(b[i]!)).toEqual(bits(x)));
      expect(disk.storageStats().t!.evictions).toBeGreaterThan(0);
      mem.dispose();
      disk.dispose();
    });
});
