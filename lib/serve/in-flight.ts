// in-flight.ts — the requests a server holds at a moment. `Places`: the bound on prediction requests held
// at once (maxInFlight); a request holds its place from its headers until both its connection is done with
// it (answered, or the client gone) and its work (decode, forward) has ended, so neither bodies being
// received nor the forwards of clients that hung up can pile up past the bound. `OpenRequests`: every
// request from its headers until its connection is done with it, as being received (its body still
// arriving) or being worked on (its handler running), which close() waits for.

/** One request's place: free once its connection and every piece of work begun on it have ended. */
export class Place {
  private parts = 1; // the connection
  private freed = false;

  constructor(private readonly onFree: () => void) {}

  /** Work that must end before the place is free; false (nothing to end) when it is free already. */
  begin(): boolean {
    if (this.freed) return false;
    this.parts++;
    return true;
  }

  /** The end of the connection's part or of one begin(); the last frees the place. */
  end(): void {
    if (this.freed || --this.parts > 0) return;
    this.freed = true;
    this.onFree();
  }
}

/** At most `limit` places held at once. */
export class Places {
  private held = 0;

  constructor(readonly limit: number) {}

  /** Places held now. */
  get inUse(): number {
    return this.held;
  }

  /** A place, or undefined when all `limit` are held. */
  take(): Place | undefined {
    if (this.held >= this.limit) return undefined;
    this.held++;
    return new Place(() => this.held--);
  }
}

/** Requests between their headers and the end of their connection's part, by stage. */
export class OpenRequests {
  private readonly stage = new Map<object, 'receiving' | 'working'>();
  private nWorking = 0;
  private waiters: (() => void)[] = [];

  /** A request whose headers arrived. */
  opened(key: object): void {
    this.stage.set(key, 'receiving');
  }

  /** Its body has arrived; its handler runs. */
  working(key: object): void {
    if (this.stage.get(key) !== 'receiving') return;
    this.stage.set(key, 'working');
    this.nWorking++;
  }

  /** Its connection is done with it. */
  closed(key: object): void {
    const s = this.stage.get(key);
    if (s === undefined) return;
    this.stage.delete(key);
    if (s === 'working') this.nWorking--;
    this.wake();
  }

  /** Requests open now, by stage. */
  counts(): { receiving: number; working: number } {
    return { receiving: this.stage.size - this.nWorking, working: this.nWorking };
  }

  /**
   * Resolves once no request is open, or once none is being worked on after `receivingMs` (requests still
   * being received by then are given up).
   */
  async drained(receivingMs: number): Promise<void> {
    let late = false;
    const timer = setTimeout(() => {
      late = true;
      this.wake();
    }, receivingMs);
    try {
      for (;;) {
        const { receiving, working } = this.counts();
        if (working === 0 && (receiving === 0 || late)) return;
        await new Promise<void>((resolve) => this.waiters.push(resolve));
      }
    } finally {
      clearTimeout(timer);
    }
  }

  private wake(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }
}
