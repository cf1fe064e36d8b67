// model-slot.ts — the model a server answers with, swapped atomically on reload. A request leases the
// current model when it is parsed (its ids are checked against that model's tables) and returns the lease
// when its micro-batch is done; reload loads the new checkpoint completely (every file checked) before
// one assignment makes it current, so no request ever sees a partially loaded model, and the old model
// is disposed only after its last lease comes back — in-flight requests finish on the model they began on.
import { EmbshardError } from '../errors.js';
import { Trainer } from '../train/trainer.js';
import type { ModelInputs } from '../train/inputs.js';

export interface LoadedModel {
  readonly trainer: Trainer;
  readonly inputs: ModelInputs;
  readonly checkpoint: string;
  /** 1 for the first model, +1 per successful reload. */
  readonly version: number;
  /** Training steps the checkpoint had seen. */
  readonly steps: number;
}

interface Entry {
  model: LoadedModel;
  leases: number;
  retired: boolean;
}

async function loadModel(checkpoint: string, version: number, device: string): Promise<LoadedModel> {
  const trainer = await Trainer.load(checkpoint, { device });
  if (!trainer.inputs) {
    trainer.dispose();
    throw new EmbshardError('CHECKPOINT_CORRUPT', `checkpoint '${checkpoint}' does not say what its model takes as input`);
  }
  return { trainer, inputs: trainer.inputs, checkpoint, version, steps: trainer.stepCount };
}

export class ModelSlot {
  private entry: Entry;
  private reloading: Promise<unknown> = Promise.resolve();
  private reloads = 0; // under way or waiting for their turn
  private closed = false;

  private constructor(model: LoadedModel, private readonly device: string) {
    this.entry = { model, leases: 0, retired: false };
  }

  static async open(checkpoint: string, device = 'cpu'): Promise<ModelSlot> {
    return new ModelSlot(await loadModel(checkpoint, 1, device), device);
  }

  /** The model now current (for reading its inputs; lease it to run it). */
  get current(): LoadedModel {
    return this.entry.model;
  }

  /** Leases the current model: it stays alive until release(). */
  acquire(): Lease {
    const e = this.entry;
    e.leases++;
    return { model: e.model, release: () => this.release(e) };
  }

  private release(e: Entry): void {
    e.leases--;
    if (e.retired && e.leases === 0) e.model.trainer.dispose();
  }

  /**
   * Loads `checkpoint` (default: the current one again) and makes it current. Reloads run one at a time;
   * a failed load leaves the current model serving and rejects with the load's error.
   */
  reload(checkpoint?: string): Promise<LoadedModel> {
    this.reloads++;
    const run = this.reloading.then(async () => {
      try {
        return await this.swap(checkpoint);
      } finally {
        this.reloads--;
      }
    });
    this.reloading = run.catch(() => undefined);
    return run;
  }

  private async swap(checkpoint: string | undefined): Promise<LoadedModel> {
    if (this.closed) throw new EmbshardError('DISPOSED', 'the model slot is closed');
    const old = this.entry;
    const model = await loadModel(checkpoint ?? old.model.checkpoint, old.model.version + 1, this.device);
    if (this.closed) {
      model.trainer.dispose();
      throw new EmbshardError('DISPOSED', 'the model slot was closed while the checkpoint loaded');
    }
    this.entry = { model, leases: 0, retired: false };
    old.retired = true;
    if (old.leases === 0) old.model.trainer.dispose();
    return model;
  }

  /**
   * Refuses later reloads (DISPOSED) and disposes the current model, at once or after its last lease comes
   * back (a request whose client hung up may still be in its forward); with a reload under way, once it
   * has been refused and its model freed.
   */
  close(): Promise<void> {
    this.closed = true;
    const retire = (): void => {
      if (this.entry.retired) return;
      this.entry.retired = true;
      if (this.entry.leases === 0) this.entry.model.trainer.dispose();
    };
    if (this.reloads === 0) {
      retire();
      return Promise.resolve();
    }
    return this.reloading.then(retire);
  }
}

export interface Lease {
  readonly model: LoadedModel;
  release(): void;
}
