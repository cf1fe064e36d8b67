// Plan files from a hostile author: values nested deep or made huge where a number or string belongs,
// numbers past the double range, keys named after Object.prototype's, fields of the wrong type. Each is an
// INVALID_PLAN naming the JSON path, with a short message; never another error, never a plan accepted.
import { describe, expect, it } from 'vitest';
import { ShardPlan, type PlanJSON } from '../../lib/plan/shard-plan.js';
import { smallTopology } from './helpers.js';

function base(): PlanJSON {
  return {
    format: 'embshard.plan',
    version: 2,
    topology: smallTopology(4, 2),
    batchSize: 8,
    wire: { forward: 'fp32', backward: 'fp32' },
    tables: [
      {
        name: 'a',
        rows: 100,
        dim: 8,
        features: ['fa'],
        cluster: 'rb',
        tiers: { replicated: 2, node: 0 },
        shards: [
          { rows: [2, 50], cols: [0, 8], rank: 0 },
          { rows: [50, 100], cols: [0, 4], rank: 1 },
          { rows: [50, 100], cols: [4, 8], rank: 2 },
        ],
      },
      { name: 'b', rows: 10, dim: 4, features: ['fb'], cluster: 'dp', shards: [] },
    ],
  };
}

const text = (): string => JSON.stringify(base());

/** The plan text with `patch` applied to the plan object. */
function patched(patch: (j: PlanJSON) => void): string {
  const j = base();
  patch(j);
  return JSON.stringify(j);
}

/** The plan text with the first `from` replaced by `to` (which must be found). */
function edited(from: string, to: string): string {
  const s = text();
  expect(s).toContain(from);
  return s.replace(from, to);
}

/** The error fromJSON throws on `json`, or undefined when it accepts it. */
function errorOf(json: string): Error & { code?: string; details?: { path?: string } } {
  try {
    ShardPlan.fromJSON(json);
  } catch (e) {
    return e as Error;
  }
  throw new Error('the plan was accepted');
}

function expectInvalid(json: string, path: string): Error {
  const e = errorOf(json);
  expect(e, path).toMatchObject({ code: 'INVALID_PLAN', details: { path } });
  expect(e.message.startsWith(`${path}: `)).toBe(true);
  return e;
}

describe('a hostile plan file', () => {
  const deep = '['.repeat(100_000) + ']'.repeat(100_000);

  it('a value nested 100,000 deep where a number or string belongs: INVALID_PLAN naming the field', () => {
    expectInvalid(edited('"version":2', `"version":${deep}`), '$.version');
    expectInvalid(edited('"rank":0', `"rank":${deep}`), '$.tables[0].shards[0].rank');
    expectInvalid(edited('"replicated":2', `"replicated":${deep}`), '$.tables[0].tiers.replicated');
    expectInvalid(edited('"rows":100', `"rows":${deep}`), '$.tables[0].rows');
    expectInvalid(edited('"dim":8', `"dim":${deep}`), '$.tables[0].dim');
    expectInvalid(edited('"cluster":"rb"', `"cluster":${deep}`), '$.tables[0].cluster');
    expectInvalid(edited('"worldSize":4', `"worldSize":${deep}`), '$.topology.worldSize');
    expectInvalid(edited('"features":["fa"]', `"features":["fa"],"poolingFactors":[${deep}]`), '$.tables[0].poolingFactors[0]');
    expectInvalid(edited('"features":["fa"]', `"features":["fa"],"access":{"zipf":${deep}}`), '$.tables[0].access.zipf');
    expectInvalid(edited('"features":["fa"]', `"features":["fa"],"hotIds":[${deep}]`), '$.tables[0].hotIds[0]');
  });

  it('a huge string or array in a field: the message stays short', () => {
    const long = 'x'.repeat(10_000_000);
    for (const [json, path] of [
      [edited('"format":"embshard.plan"', `"format":"${long}"`), '$.format'],
      [edited('"version":2', `"version":[${'1,'.repeat(1_000_000)}1]`), '$.version'],
      [patched((j) => Object.assign(j.tables[0]!, { dtype: long })), '$.tables[0].dtype'],
      [edited('"rank":0', `"rank":"${long}"`), '$.tables[0].shards[0].rank'],
    ] as const) {
      const e = expectInvalid(json, path);
      expect(e.message.length).toBeLessThan(300);
    }
  });

  it('a number past the double range is shown as read (Infinity), not as null', () => {
    expect(expectInvalid(edited('"rank":0', '"rank":1e400'), '$.tables[0].shards[0].rank').message).toContain('got Infinity');
    expect(expectInvalid(edited('"rank":0', '"rank":-1e400'), '$.tables[0].shards[0].rank').message).toContain('got -Infinity');
    expect(expectInvalid(edited('"batchSize":8', '"batchSize":1e400'), '$.batchSize').message).toContain('got Infinity');
  });

  it('shards of the wrong type, null included, is named as such (a dp table too)', () => {
    expect(expectInvalid(edited('"cluster":"dp","shards":[]', '"cluster":"dp","shards":null'), '$.tables[1].shards').message).toContain('must be an array');
    expect(expectInvalid(edited('"cluster":"dp","shards":[]', '"cluster":"dp","shards":{}'), '$.tables[1].shards').message).toContain('must be an array');
    expect(expectInvalid(patched((j) => Object.assign(j.tables[0]!, { shards: null })), '$.tables[0].shards').message).toContain('must be an array');
  });

  it('keys named __proto__ or constructor are unknown fields at every level', () => {
    for (const key of ['__proto__', 'constructor']) {
      const v = `"${key}":{"cluster":"dp"},`;
      expectInvalid(edited('{"format"', `{${v}"format"`), `$.${key}`);
      expectInvalid(edited('{"name":"a"', `{${v}"name":"a"`), `$.tables[0].${key}`);
      expectInvalid(edited('{"rows":[2,50]', `{${v}"rows":[2,50]`), `$.tables[0].shards[0].${key}`);
      expectInvalid(edited('{"replicated"', `{${v}"replicated"`), `$.tables[0].tiers.${key}`);
      expectInvalid(edited('{"name":"test"', `{${v}"name":"test"`), `$.topology.${key}`);
      expectInvalid(edited('{"forward"', `{${v}"forward"`), `$.wire.${key}`);
    }
  });

  it('a meta key __proto__ is an entry of meta, not its prototype', () => {
    const p = ShardPlan.fromJSON(edited('"batchSize":8', '"batchSize":8,"meta":{"__proto__":"x","model":"m"}'));
    expect(Object.getPrototypeOf(p.meta)).toBe(Object.prototype);
    expect(Object.getOwnPropertyNames(p.meta).sort()).toEqual(['__proto__', 'model']);
    expect(JSON.parse(JSON.stringify(p.toJSON())).meta).toEqual(JSON.parse('{"__proto__":"x","model":"m"}'));
    expect(({} as Record<string, unknown>).x).toBeUndefined();
  });

  it('ranks, rows and columns out of range, fractional or overlapping are named', () => {
    expectInvalid(edited('"rank":0', '"rank":-1'), '$.tables[0].shards[0].rank');
    expectInvalid(edited('"rank":0', '"rank":0.5'), '$.tables[0].shards[0].rank');
    expectInvalid(edited('"rank":0', '"rank":4'), '$.tables[0].shards[0].rank');
    expectInvalid(edited('"rank":0', '"rank":9007199254740993'), '$.tables[0].shards[0].rank');
    expectInvalid(edited('"rows":100', '"rows":9007199254740993'), '$.tables[0].rows');
    expectInvalid(edited('"rows":[2,50]', '"rows":[2,50.5]'), '$.tables[0].shards[0].rows[1]');
    expectInvalid(edited('"rows":[2,50]', '"rows":[50,2]'), '$.tables[0].shards[0].rows');
    expectInvalid(edited('"rows":[2,50]', '"rows":[2,60]'), '$.tables[0].shards[1].rows');
    expectInvalid(edited('"rows":[2,50]', '"rows":[2,40]'), '$.tables[0].shards');
    expectInvalid(edited('"cols":[4,8]', '"cols":[4,9]'), '$.tables[0].shards[2].cols');
    expectInvalid(edited('"cols":[4,8]', '"cols":[3,8]'), '$.tables[0].shards[2].cols');
    expectInvalid(edited('"cols":[4,8]', '"cols":[5,8]'), '$.tables[0].shards');
    expectInvalid(edited('"version":2', '"version":"2"'), '$.version');
    expectInvalid(edited('"name":"b"', '"name":"a"'), '$.tables[1].name');
  });
});
