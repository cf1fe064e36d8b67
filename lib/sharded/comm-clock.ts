// comm-clock.ts — CommClock: how long a rank's collectives were in flight (total communication time) and
// how long its caller was blocked on them (exposed communication time). Both are measures of unions of
// intervals, so collectives that run at the same time count once. A collective started inside
// CommClock.hidden(fn) runs behind the caller's compute (the Trainer's overlapped all-reduce, the next
// batch's id exchange): it adds to the total only, and to the exposed time only while the caller waits on
// it with wait(). Every other collective blocks its caller from start to end (the runtime awaits it at once).
// Exposed time is time the caller was blocked while some collective was in flight, so it never exceeds the total.
import { AsyncLocalStorage } from 'node:async_hooks';

/** Milliseconds of communication since a clock was created. */
export interface CommTime {
  /** Some collective of this rank was in flight. */
  totalMs: number;
  /** The caller was blocked while a collective was in flight (not hidden behind its compute); ≤ totalMs. */
  exposedMs: number;
}

const hiddenScope = new AsyncLocalStorage<boolean>();

export class CommClock {
  private inFlight = 0;
  private blocking = 0;
  private last: number;
  private total = 0;
  private exposed = 0;

  /** `now`: the time source in ms (default performance.now). */
  constructor(private readonly now: () => number = () => performance.now()) {
    this.last = now();
  }

  /**
   * Runs `fn` so that the collectives it starts (also later, in the promise chains it creates) count as
   * hidden behind the caller's compute.
   */
  static hidden<T>(fn: () => T): T {
    return hiddenScope.run(true, fn);
  }

  private tick(): void {
    const now = this.now();
    const dt = now - this.last;
    this.last = now;
    if (this.inFlight > 0) this.total += dt;
    if (this.blocking > 0 && this.inFlight > 0) this.exposed += dt;
  }

  private hold(blocks: boolean, counts: boolean): () => void {
    this.tick();
    if (counts) this.inFlight++;
    if (blocks) this.blocking++;
    return () => {
      this.tick();
      if (counts) this.inFlight--;
      if (blocks) this.blocking--;
    };
  }

  /** Counts a collective from now until `p` settles; it blocks its caller unless started inside hidden(). */
  track<T>(p: Promise<T>): Promise<T> {
    return p.finally(this.hold(hiddenScope.getStore() !== true, true));
  }

  /** The caller waits for `p` (hidden collectives) from now on: exposed time until it settles. */
  wait<T>(p: Promise<T>): Promise<T> {
    return p.finally(this.hold(true, false));
  }

  /** Totals since the clock was created (in-flight intervals counted up to now). */
  read(): CommTime {
    this.tick();
    return { totalMs: this.total, exposedMs: this.exposed };
  }
}
