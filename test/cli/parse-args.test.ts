// parse-args.test.ts — the option walk every `embshard` command shares (lib/cli/command.ts) and the
// progress line's rate: `--key value` and `--key=value` read the same; an option given twice, an option
// whose value is missing or is the next option, a flag given a value, and an unknown option are each named;
// a rate is printed in the unit its rounded value fits (never '1000.0k').
import { describe, expect, it } from 'vitest';
import { parseArgs } from '../../lib/cli/command.js';
import { fmtRate } from '../../lib/cli/progress.js';

/** Runs parseArgs with a flag --quiet and the options --out and --batch; returns what it read, or its message. */
function walk(argv: string[], known?: string[]): { problem?: string; quiet: number; options: [string, string][] } {
  const options: [string, string][] = [];
  let quiet = 0;
  const problem = parseArgs(argv, { '--quiet': () => void quiet++ }, (k, v) => {
    if (k !== '--out' && k !== '--batch') return `unknown option '${k}'`;
    options.push([k, v]);
    return undefined;
  }, known);
  return { ...(problem === undefined ? {} : { problem }), quiet, options };
}

describe('parseArgs', () => {
  it('reads --key value and --key=value alike, values with = and leading dashes included', () => {
    expect(walk(['--out', 'a.csv', '--quiet', '--batch=64'])).toEqual({ quiet: 1, options: [['--out', 'a.csv'], ['--batch', '64']] });
    expect(walk(['--out=x=y.csv', '--batch', '-1'])).toEqual({ quiet: 0, options: [['--out', 'x=y.csv'], ['--batch', '-1']] });
    expect(walk(['--out='])).toEqual({ quiet: 0, options: [['--out', '']] });
    expect(walk(['--batch', '8', '-h']).problem).toBe('help');
  });

  it('names the problem: twice, missing value, the next option as a value, a flag with a value, unknown, stray', () => {
    const cases: [string[], string][] = [
      [['--out', 'a', '--out', 'b'], '--out is given twice'],
      [['--out', 'a', '--out=b'], '--out is given twice'],
      [['--quiet', '--quiet'], '--quiet is given twice'],
      [['--out'], '--out needs a value'],
      [['--out', '--quiet'], "--out needs a value (got the option '--quiet')"],
      [['--quiet=yes'], "--quiet takes no value (got '--quiet=yes')"],
      [['--colour', 'red'], "unknown option '--colour'"],
      [['out.csv'], "unexpected argument 'out.csv'"],
    ];
    for (const [argv, problem] of cases) expect(walk(argv).problem, argv.join(' ')).toBe(problem);
  });

  it('with the known options, an unknown one is named even without its value', () => {
    expect(walk(['--out', 'a', '--colour'], ['--out', '--batch']).problem).toBe("unknown option '--colour'");
    expect(walk(['--colour'], ['--out', '--batch']).problem).toBe("unknown option '--colour'");
  });

  it('a name every object inherits (constructor, toString) is no flag', () => {
    expect(walk(['--out', 'a', 'constructor']).problem).toBe("unexpected argument 'constructor'");
    expect(walk(['toString']).problem).toBe("unexpected argument 'toString'");
  });
});

describe('fmtRate', () => {
  it('prints each rate in the smallest unit whose rounded value is below 1000, within half its last digit', () => {
    const unit = { '': 1, k: 1e3, M: 1e6 } as Record<string, number>;
    const decimals = { '': 0, k: 1, M: 2 } as Record<string, number>;
    for (const x of [0, 1, 12.4, 999.4, 999.5, 999.7, 1000, 1049.9, 12345, 99_949, 99_951, 999_949, 999_950, 999_999, 1e6, 1_234_567, 5e9]) {
      const s = fmtRate(x);
      const m = /^(\d+(?:\.\d+)?)([kM]?)$/.exec(s);
      expect(m, `${x} → ${s}`).not.toBeNull();
      const [, digits, u] = m!;
      expect(digits!.split('.')[1]?.length ?? 0, s).toBe(decimals[u!]);
      expect(Math.abs(Number(digits) * unit[u!]! - x), `${x} → ${s}`).toBeLessThanOrEqual(0.5 * 10 ** -decimals[u!]! * unit[u!]! * (1 + 1e-12));
      if (u !== 'M') expect(Number(digits), `${x} → ${s}`).toBeLessThan(1000);
      // a smaller unit would have needed 1000 or more
      if (u === 'k') expect(Math.round(x)).toBeGreaterThanOrEqual(1000);
      if (u === 'M') expect(Math.round(x * 10 / 1e3) / 10).toBeGreaterThanOrEqual(1000);
    }
    expect([fmtRate(999.7), fmtRate(999_999), fmtRate(12_345), fmtRate(1_234_567), fmtRate(123)]).toEqual(['1.0k', '1.00M', '12.3k', '1.23M', '123']);
  });
});
