// call-queue.ts — the one queue that serialises the async calls of a stateful object (a collection, a
// sharded collection, a trainer): each call starts after every call queued before it has settled, in
// call order, so steps never interleave; a call that fails does not block the ones behind it.

export class CallQueue {
  private tail: Promise<unknown> = Promise.resolve();
  private pending = 0;

  /** Runs `op` once every operation queued before it has settled; resolves or rejects as `op` does. */
  run<T>(op: () => Promise<T> | T): Promise<T> {
    this.pending++;
    const result = this.tail.then(op);
    const settled = (): void => {
      this.pending--;
    };
    this.tail = result.then(settled, settled);
    return result;
  }

  /**
   * Runs `op` in call order: now when no operation is queued or running, otherwise once those have settled
   * (a setting that must apply to the calls made after it, not to the ones already queued). `op`'s errors
   * in the queued case are dropped: the caller checks its arguments before.
   */
  inOrder(op: () => void): void {
    if (this.pending === 0) op();
    else void this.run(op).catch(() => undefined);
  }
}
