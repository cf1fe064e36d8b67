// call-queue.ts — the one queue that serialises the async calls of a stateful object (a collection, a
// sharded collection, a trainer): each call starts after every call queued before it has settled, in
// call order, so steps never interleave; a call that fails does not block the ones behind it.

export class CallQueue {
  private tail: Promise<unknown> = Promise.resolve();

  /** Runs `op` once every operation queued before it has settled; resolves or rejects as `op` does. */
  run<T>(op: () => Promise<T> | T): Promise<T> {
    const result = this.tail.then(op);
    this.tail = result.catch(() => undefined);
    return result;
  }
}
