// The synthetic source's session-locality model: with no session fields (share 0) the batches are exactly the
// i.i.d. ones; with every feature a session field, samples with equal bags (ids uniform over a million rows,
// so equal bags mean one session) stay within one session window and number `samples` per session on
// average; a share of the features becomes session fields; bad options are rejected naming the field.
import { describe, it, expect } from 'vitest';
import { SyntheticGenerator, resolveSynthetic, type SyntheticOptions } from '../../lib/data/synthetic.js';
import { SessionModel } from '../../lib/data/synthetic-sessions.js';

const base: SyntheticOptions = { batchSize: 64, cardinalities: [1_000_000, 1_000_000, 1_000_000], alpha: 0, seed: 11 };

function bags(o: SyntheticOptions, batches: number): string[] {
  const g = new SyntheticGenerator(resolveSynthetic(o));
  const out: string[] = [];
  for (let k = 0; k < batches; k++) {
    const s = g.batch(k).sparse;
    const F = s.features.length, B = s.batchSize;
    for (let b = 0; b < B; b++) {
      const parts: string[] = [];
      for (let f = 0; f < F; f++) parts.push(Array.from(s.ids.subarray(s.offsets[f * B + b]!, s.offsets[f * B + b + 1]!) as ArrayLike<number>).join(','));
      out.push(parts.join('|'));
    }
  }
  return out;
}

describe('synthetic sessions', () => {
  it('share 0 leaves every batch as without sessions', () => {
    expect(bags({ ...base, sessions: { concurrent: 8, samples: 4, share: 0 } }, 4)).toEqual(bags(base, 4));
  });

  it('every feature a session field: sessions of `samples` samples on average, each within its window', () => {
    const A = 16, L = 8, window = A * L;
    const all = bags({ ...base, sessions: { concurrent: A, samples: L, share: 1 } }, 80); // 5120 samples
    const where = new Map<string, number[]>();
    all.forEach((k, i) => (where.get(k) ?? where.set(k, []).get(k)!).push(i));
    for (const idx of where.values()) expect(idx[idx.length - 1]! - idx[0]!).toBeLessThan(window);
    const mean = all.length / where.size;
    expect(mean).toBeGreaterThan(0.85 * L);
    expect(mean).toBeLessThan(1.05 * L);
    // and without sessions, no two samples share their bags
    expect(new Set(bags(base, 80)).size).toBe(all.length);
  });

  it('a share of the features are session fields', () => {
    const m = new SessionModel({ concurrent: 4, samples: 2, share: 0.5 }, 3, 26);
    const n = m.sessionField.filter(Boolean).length;
    expect(n).toBeGreaterThan(5);
    expect(n).toBeLessThan(21);
    expect(new SessionModel({ concurrent: 4, samples: 2, share: 0 }, 3, 26).sessionField.some(Boolean)).toBe(false);
    expect(new SessionModel({ concurrent: 4, samples: 2, share: 1 }, 3, 26).sessionField.every(Boolean)).toBe(true);
  });

  it('rejects bad session options naming the field', () => {
    const bad = (sessions: unknown, field: string) => {
      try {
        resolveSynthetic({ ...base, sessions } as SyntheticOptions);
      } catch (e) {
        expect((e as { code?: string }).code).toMatch(/INVALID/);
        expect(String((e as Error).message)).toContain(field);
        return;
      }
      throw new Error(`accepted sessions ${JSON.stringify(sessions)}`);
    };
    bad({ concurrent: 0, samples: 2 }, 'sessions.concurrent');
    bad({ concurrent: 4, samples: 1.5 }, 'sessions.samples');
    bad({ concurrent: 4, samples: 2, share: 2 }, 'sessions.share');
    bad({ concurrent: 4, samples: 2, span: 3 }, 'span');
  });
});
