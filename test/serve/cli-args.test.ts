// cli-args.test.ts — `embshard serve` argument errors: a port outside [0, 65535] or not an integer, a
// --request-timeout-ms or --decode-timeout-ms that is not an integer in [1, 2^31 − 1], a --max-in-flight
// below 1, an unknown option and a missing --checkpoint exit with 2 and name the problem, before any
// model loads.
import { describe, it, expect, vi, afterEach } from 'vitest';
import { runServe } from '../../lib/cli/serve.js';
import { capture } from '../train/capture.js';

afterEach(() => vi.restoreAllMocks());

describe('embshard serve arguments', () => {
  it('usage errors exit with 2 and name the option', async () => {
    for (const [args, msg] of [
      [['--checkpoint', '/no/such/ck', '--port', '99999'], /--port must be an integer in \[0, 65535\] \(got '99999'\)/],
      [['--checkpoint', '/no/such/ck', '--port', '80.5'], /--port must be an integer in \[0, 65535\]/],
      [['--checkpoint', '/no/such/ck', '--prot', '80'], /unknown option '--prot'/],
      [['--port', '8080'], /--checkpoint is required/],
      [['--checkpoint', '/no/such/ck', '--request-timeout-ms', '0'], /--request-timeout-ms must be an integer in \[1, 2147483647\] \(got '0'\)/],
      [['--checkpoint', '/no/such/ck', '--request-timeout-ms', '2.5'], /--request-timeout-ms must be an integer in \[1, 2147483647\]/],
      [['--checkpoint', '/no/such/ck', '--request-timeout-ms', '2147483648'], /--request-timeout-ms must be an integer in \[1, 2147483647\]/],
      [['--checkpoint', '/no/such/ck', '--request-timeout-ms', 'soon'], /--request-timeout-ms must be an integer in \[1, 2147483647\]/],
      [['--checkpoint', '/no/such/ck', '--decode-timeout-ms', '2147483648'], /--decode-timeout-ms must be an integer in \[1, 2147483647\]/],
      [['--checkpoint', '/no/such/ck', '--max-in-flight', '0'], /--max-in-flight must be an integer >= 1 \(got '0'\)/],
    ] as const) {
      const c = capture();
      const rc = await runServe([...args]);
      vi.restoreAllMocks();
      expect(rc, c.err.join('')).toBe(2);
      expect(c.err.join('')).toMatch(msg);
    }
  });
});
