// engine-owner.ts — what the single and the sharded embedding collection share over the native engine
// they own: the call queue, the disposed check, the optimizer step and learning rate, memory, kernel
// times, dispose().
import { EmbshardError } from './errors.js';
import { CallQueue } from './call-queue.js';
import type { ResolvedConfig, ResolvedTable } from './config.js';
import type { NativeEngine } from './binding.js';

/** The largest learning rate an engine takes. */
const MAX_LR = 1e30;

/** INVALID_ARGUMENT unless `lr` is a learning rate an engine takes: a number in [0, 1e30]. */
export function checkLearningRate(lr: unknown): asserts lr is number {
  if (typeof lr !== 'number' || !(lr >= 0 && lr <= MAX_LR))
    throw new EmbshardError('INVALID_ARGUMENT', `the learning rate must be a number in [0, ${MAX_LR}] (got ${String(lr)})`);
}

export abstract class EngineOwner {
  abstract readonly config: ResolvedConfig;
  /** undefined once disposed */
  protected engine: NativeEngine | undefined;
  /** the owner's calls, in call order */
  protected readonly calls = new CallQueue();

  /** `what` names the owner in DISPOSED errors. */
  protected constructor(private readonly what: string) {}

  get tables(): readonly ResolvedTable[] {
    return this.config.tables;
  }

  get disposed(): boolean {
    return this.engine === undefined;
  }

  /** Optimizer steps applied so far (Adam's t). */
  get step(): number {
    return this.live().step;
  }
  set step(t: number) {
    this.live().step = t;
  }

  /** The learning rate of the steps called from now on. */
  get learningRate(): number {
    return this.lr ?? this.config.optimizer.lr;
  }
  /**
   * Changes the optimizer's learning rate for the steps called after this call (schedules; sharded, every
   * rank applies the same). Steps called before it and still queued or running keep the rate they were
   * called with: the engine takes the new one when they have settled.
   */
  setLearningRate(lr: number): void {
    checkLearningRate(lr);
    this.live();
    this.lr = lr;
    this.calls.inOrder(() => {
      this.engine?.setLearningRate(lr);
      this.config.optimizer.lr = lr;
    });
  }
  private lr: number | undefined;

  /** Bytes of table storage and of optimizer state on the device (sharded: this rank's engine). */
  get memory(): { weightBytes: number; stateBytes: number } {
    const e = this.live();
    return { weightBytes: e.weightBytes, stateBytes: e.stateBytes };
  }

  /** CUDA: device time of the last forward / backward kernels, staging excluded (null on the CPU). */
  kernelTimes(): { forwardMs: number; backwardMs: number } | null {
    return this.live().kernelTimes();
  }

  /**
   * CPU: the phases of this engine's last backward in ms, in the order they ran — 'copy+finite' (the
   * gradient rows copied and checked), 'keys', 'partition', 'several' (rows with several contributions:
   * grouped and updated), 'single' (rows with one); for collections over 2^28 rows 'copy+finite', 'keys',
   * 'sort', 'update'. Null on other engines and before the first backward.
   */
  backwardPhases(): Record<string, number> | null {
    return this.live().backwardPhases();
  }

  /** Frees native memory now; any later use raises EmbshardError DISPOSED. */
  dispose(): void {
    const e = this.engine;
    this.engine = undefined;
    e?.dispose();
  }

  /** Async APIs report argument errors as rejections, never as synchronous throws. */
  protected rejecting<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return fn();
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** Runs `op` after the calls queued before it, once the engine is known to be live. */
  protected enqueue<T>(op: () => Promise<T>): Promise<T> {
    return this.calls.run(() => {
      this.live();
      return op();
    });
  }

  protected live(): NativeEngine {
    if (!this.engine) throw new EmbshardError('DISPOSED', `this ${this.what} has been disposed`);
    return this.engine;
  }
}
