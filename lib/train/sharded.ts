// sharded.ts — lib/sharded's ShardedEmbeddingCollection (EMBark 3D-sharded tables across the ranks of a
// process group) behind the Trainer's EmbeddingModule surface: learning-rate changes for the schedule,
// and checkpoints through saveSharded / loadSharded (which any world size can read back).
import type { JaggedBatch } from '../batch.js';
import type { ProcessGroup } from '../sharded/group.js';
import { loadSharded, saveSharded } from '../sharded/reshard.js';
import { ShardedEmbeddingCollection, type ShardedConfig, type ShardedForwardOutput } from '../sharded/sharded.js';
import type { ShardPlan } from '../plan/shard-plan.js';
import type { EmbeddingModule } from './embeddings.js';

export class ShardedEmbeddings implements EmbeddingModule {
  private lr: number;

  constructor(readonly collection: ShardedEmbeddingCollection) {
    this.lr = collection.config.optimizer.lr;
  }

  static create(plan: ShardPlan, group: ProcessGroup, config: ShardedConfig = {}): ShardedEmbeddings {
    return new ShardedEmbeddings(new ShardedEmbeddingCollection(plan, group, config));
  }

  /** Reads a checkpoint written by save() (any world size) onto `plan` and `group`. */
  static async load(dir: string, plan: ShardPlan, group: ProcessGroup, config: ShardedConfig = {}): Promise<ShardedEmbeddings> {
    return new ShardedEmbeddings(await loadSharded(dir, plan, group, config));
  }

  get pooledDim(): number {
    return this.collection.pooledDim;
  }
  get pooledFeatures(): readonly string[] {
    return this.collection.pooledFeatures;
  }
  get learningRate(): number {
    return this.lr;
  }
  /** The rate of this rank's shards; every rank applies the same schedule, so all shards agree. */
  setLearningRate(lr: number): void {
    this.collection.localEngine.setLearningRate(lr);
    this.lr = lr;
  }
  get step(): number {
    return this.collection.step;
  }
  set step(t: number) {
    this.collection.step = t;
  }
  /** A collective: every rank calls it with its local batch. */
  forward(batch: JaggedBatch): Promise<ShardedForwardOutput> {
    return this.collection.forward(batch);
  }
  backward(out: ShardedForwardOutput, grads: { pooled?: Float32Array }): Promise<{ skipped: boolean }> {
    return this.collection.backward(out, grads);
  }
  /** A collective: every rank writes its shards into `dir`. */
  save(dir: string): Promise<void> {
    return saveSharded(this.collection, dir);
  }
  dispose(): void {
    this.collection.dispose();
  }
}
