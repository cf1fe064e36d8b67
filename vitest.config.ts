// vitest.config.ts — native addons run in forked workers (never worker threads); MPI and GPU suites
// decide for themselves whether they can run and say why when they skip.
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    pool: 'forks',
    testTimeout: 120_000,
    hookTimeout: 120_000,
  },
});
