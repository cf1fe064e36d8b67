// comm-clock.test.ts — CommClock's total and exposed communication time on a scripted timeline (a fake
// time source, collectives as promises settled by hand), against the interval unions worked out by hand.
import { describe, it, expect } from 'vitest';
import { CommClock } from '../../lib/sharded/comm-clock.js';

function deferred(): { p: Promise<void>; resolve: () => void; reject: (e: Error) => void } {
  let resolve!: () => void, reject!: (e: Error) => void;
  const p = new Promise<void>((a, b) => ((resolve = a), (reject = b)));
  return { p, resolve, reject };
}
const settle = () => new Promise<void>((r) => setImmediate(r));

describe('CommClock', () => {
  it('total = union of collectives in flight; exposed = blocking collectives and waits on hidden ones, while one is in flight', async () => {
    let t = 0;
    const clock = new CommClock(() => t);
    // [0, 10): a blocking collective; [5, 30): a hidden one, waited for from 20; [40, 45): a wait on nothing in flight
    const a = deferred(), h = deferred(), idle = deferred();
    const pa = clock.track(a.p);
    t = 5;
    const ph = CommClock.hidden(() => clock.track(h.p));
    t = 10;
    a.resolve();
    await settle();
    expect(clock.read()).toEqual({ totalMs: 10, exposedMs: 10 });
    t = 20;
    const w = clock.wait(ph);
    t = 30;
    h.resolve();
    await settle();
    await Promise.all([pa, w]);
    expect(clock.read()).toEqual({ totalMs: 30, exposedMs: 20 });
    t = 40;
    const wi = clock.wait(idle.p);
    t = 45;
    idle.resolve();
    await wi;
    t = 50;
    expect(clock.read()).toEqual({ totalMs: 30, exposedMs: 20 });
  });

  it('overlapping blocking collectives count once; a rejected one stops counting and rejects as it did', async () => {
    let t = 100;
    const clock = new CommClock(() => t);
    const a = deferred(), b = deferred();
    const pa = clock.track(a.p);
    t = 102;
    const pb = clock.track(b.p);
    t = 104;
    a.reject(new Error('peer gone'));
    await expect(pa).rejects.toThrow('peer gone');
    t = 107;
    b.resolve();
    await pb;
    t = 120;
    expect(clock.read()).toEqual({ totalMs: 7, exposedMs: 7 });
  });

  it('collectives started later in a hidden scope\'s promise chains stay hidden', async () => {
    let t = 0;
    const clock = new CommClock(() => t);
    const d = deferred();
    let inner: Promise<void> | undefined;
    const chain = CommClock.hidden(() =>
      Promise.resolve().then(() => {
        inner = clock.track(d.p);
      }),
    );
    await chain;
    t = 8;
    d.resolve();
    await inner;
    expect(clock.read()).toEqual({ totalMs: 8, exposedMs: 0 });
  });
});
