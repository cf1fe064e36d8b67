// load.ts — a Herald collection continued from its checkpoint (HeraldEmbeddingCollection.load). The
// checkpoint is one collection's (save() gathers the whole tables; EmbeddingCollection.save writes the
// same): every rank reads it, keeps the rows and optimizer state of its own row ranges (lib/herald/owners.ts)
// and the step count, and starts with empty caches. The scheduler counts on from that step, so the
// seeded random placement and the allocator's tie rotation are those of the run that was not interrupted.
// What the next steps hold (test/herald/load.test.ts): under random placement a loaded collection trains
// bitwise as the run that went on; under Herald's allocation (the default) it places the next samples by
// caches that are empty, not by those the run had filled, so its rows are summed in other groups and agree
// with that run to rounding only.
import { EmbeddingCollection } from '../collection.js';
import { resolveConfig, type CollectionConfig, type ResolvedConfig } from '../config.js';
import { EmbshardError } from '../errors.js';
import type { ProcessGroup } from '../sharded/group.js';
import { agreeOnLoad } from '../sharded/step-status.js';
import { HeraldEmbeddingCollection, type HeraldOptions } from './collection.js';

export async function loadHerald(dir: string, config: CollectionConfig, group: ProcessGroup, options: HeraldOptions): Promise<HeraldEmbeddingCollection> {
  return agreeOnLoad(group, dir, () => loadLocal(dir, config, group, options));
}

/** This rank's part: the checkpoint read and checked against `config`, its row ranges kept. */
async function loadLocal(dir: string, config: CollectionConfig, group: ProcessGroup, options: HeraldOptions): Promise<HeraldEmbeddingCollection> {
  const want = resolveConfig(config);
  const ec = await EmbeddingCollection.load(dir, { device: 'cpu' });
  try {
    checkTables(dir, ec.config, want);
    const h = new HeraldEmbeddingCollection(config, group, options, { initialize: false });
    try {
      const O = h.owners, r = group.rank, chunk = 1 << 16;
      want.tables.forEach((t, i) => {
        const lo = O.lo(i, r), n = O.owned(i, r), sw = ec.stateWidth(t.name);
        for (let s = 0; s < n; s += chunk) {
          const m = Math.min(chunk, n - s);
          const from = Int32Array.from({ length: m }, (_, j) => lo + s + j), to = Int32Array.from({ length: m }, (_, j) => s + j);
          h.local.writeRows(t.name, to, ec.readRows(t.name, from));
          if (sw) h.local.writeState(t.name, to, ec.readState(t.name, from));
        }
      });
      h.step = ec.step;
      h.scheduler.steps = ec.step;
    } catch (e) {
      h.dispose();
      throw e;
    }
    return h;
  } finally {
    ec.dispose();
  }
}

/** INVALID_CONFIG unless the checkpoint's tables are `want`'s (names in order, rows, dim, dtype, pooling, features) under its optimizer type. */
function checkTables(dir: string, got: ResolvedConfig, want: ResolvedConfig): void {
  const shape = (t: ResolvedConfig['tables'][number]) => `${t.dynamic ? 'dynamic ' : ''}${String(t.rows)} rows × ${t.dim} ${t.dtype}, pooling ${t.pooling}, features ${t.features.join(', ')}`;
  if (got.tables.length !== want.tables.length || got.tables.some((t, i) => t.name !== want.tables[i]!.name))
    throw new EmbshardError('INVALID_CONFIG', `checkpoint '${dir}' holds tables ${got.tables.map((t) => `'${t.name}'`).join(', ')}; the config has ${want.tables.map((t) => `'${t.name}'`).join(', ')}`);
  want.tables.forEach((w, i) => {
    const g = got.tables[i]!;
    if (shape(g) !== shape(w)) throw new EmbshardError('INVALID_CONFIG', `checkpoint '${dir}': table '${w.name}' has ${shape(g)}; the config's has ${shape(w)}`);
  });
  if (got.optimizer.type !== want.optimizer.type)
    throw new EmbshardError('INVALID_CONFIG', `checkpoint '${dir}' holds ${got.optimizer.type} optimizer state; config.optimizer.type is ${want.optimizer.type}`);
}
