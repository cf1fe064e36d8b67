#!/usr/bin/env node
// main.ts — the `embshard` binary: `train`, `predict`, `serve`, `plan`, `bench` and `backends` under one command.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { isEmbshardError } from '../errors.js';

const USAGE = `usage: embshard <command> [options]
  train      train a DLRM / DCNv2 on synthetic, Criteo TSV, binary or Arrow data   (embshard train --help)
  predict    score a data source with a saved model into CSV or Arrow             (embshard predict --help)
  serve      serve a saved model over HTTP (POST /v1/predict)                      (embshard serve --help)
  plan       plan the sharding of a model over a cluster and explain it            (embshard plan --help)
  bench      run a benchmark: embedding (default) | plan | dist | train | data      (embshard bench embedding --device cpu)
  backends   list the compute backends of this machine and why one is unavailable`;

const BENCHES = ['embedding', 'plan', 'dist', 'train', 'data'];

async function main(argv: string[]): Promise<number> {
  const [cmd, ...rest] = argv;
  switch (cmd) {
    case 'train':
      return (await import('./train.js')).runTrain(rest);
    case 'predict':
      return (await import('./predict.js')).runPredict(rest);
    case 'serve':
      return (await import('./serve.js')).runServe(rest);
    case 'plan':
      return (await import('./plan.js')).runPlan(rest);
    case 'bench': {
      const which = rest[0] && !rest[0].startsWith('-') ? rest.shift()! : 'embedding';
      if (!BENCHES.includes(which)) {
        console.error(`unknown bench '${which}' (one of ${BENCHES.join(', ')})`);
        return 2;
      }
      const file = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'bench', `${which}.js`);
      if (!existsSync(file)) {
        console.error(`the ${which} bench is not built (${file}); run npm run build:ts`);
        return 2;
      }
      return spawnSync(process.execPath, [file, ...rest], { stdio: 'inherit' }).status ?? 1;
    }
    case 'backends': {
      const { backends } = await import('../backends.js');
      for (const b of backends()) {
        console.log(`${b.name.padEnd(5)} ${b.available ? 'available' : `unavailable: ${b.reason ?? ''}`}`);
        if (b.dense) console.log(`      dense layers on ${b.dense.backend} (${b.dense.reason})`);
      }
      return 0;
    }
    case undefined:
    case '-h':
    case '--help':
    case 'help':
      console.log(USAGE);
      return cmd === undefined ? 2 : 0;
    default:
      console.error(`unknown command '${cmd}'\n${USAGE}`);
      return 2;
  }
}

/** Resolves once everything written to `s` so far has been handed to the OS (a pipe may still hold some). */
function drained(s: NodeJS.WriteStream): Promise<void> {
  return new Promise((done) => {
    if (s.destroyed || !s.writable) done();
    else s.write('', () => done());
  });
}

// exit explicitly (workers, sockets or MPI may hold the loop open), but only after stdout and stderr are
// flushed: a reader slower than the command (`embshard plan … | less`) would otherwise lose the output's end
async function exit(code: number): Promise<never> {
  await Promise.all([drained(process.stdout), drained(process.stderr)]);
  process.exit(code);
}

main(process.argv.slice(2)).then(
  (code) => exit(code),
  (e) => {
    console.error(isEmbshardError(e) ? `embshard: ${e.code}: ${e.message}` : e);
    return exit(1);
  },
);
