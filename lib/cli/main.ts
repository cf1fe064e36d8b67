#!/usr/bin/env node
// main.ts — the `embshard` binary: `train`, `predict`, `serve`, `plan`, `bench` and `backends` under one command.
import { spawn, type ChildProcess } from 'node:child_process';
import { constants as osConstants } from 'node:os';
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

const BENCH_USAGE = `usage: embshard bench [${BENCHES.join('|')}] [options]
Runs one benchmark (default: embedding) and writes its results into bench/results/ of the package;
its options: embshard bench <name> --help`;

const BACKENDS_USAGE = `usage: embshard backends
Lists the compute backends of this machine (cpu, cuda) and why one is unavailable.`;

/** Signals passed on to a running bench: `kill`, `timeout` or a closed terminal stop it too, not only this process. */
const FORWARDED = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;

/** Runs a bench script in a child process with this one's stdio; resolves to its exit code (128 + the signal's number when one ended it). */
function runBench(file: string, args: string[]): Promise<number> {
  return new Promise((done, fail) => {
    // listening before the child exists: a signal is handled (on the event loop) only once `child` is set
    let child: ChildProcess | undefined;
    const forward = (signal: NodeJS.Signals): void => void child?.kill(signal);
    for (const s of FORWARDED) process.on(s, forward);
    child = spawn(process.execPath, [file, ...args], { stdio: 'inherit' });
    child.on('error', fail);
    child.on('exit', (code, signal) => {
      for (const s of FORWARDED) process.off(s, forward);
      done(code ?? 128 + (signal ? osConstants.signals[signal] : 0));
    });
  });
}

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
      if (rest[0] === '--help' || rest[0] === '-h') {
        console.log(BENCH_USAGE);
        return 0;
      }
      const which = rest[0] && !rest[0].startsWith('-') ? rest.shift()! : 'embedding';
      if (!BENCHES.includes(which)) {
        console.error(`unknown bench '${which}' (one of ${BENCHES.join(', ')})`);
        return 2;
      }
      const file = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'bench', `${which}.js`);
      if (!existsSync(file)) {
        // the sources sit beside dist/ in a checkout; an installed package ships neither
        const sources = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'bench', `${which}.ts`);
        console.error(existsSync(sources)
          ? `the ${which} bench is not built (${file}); run npm run build:ts`
          : `the benchmarks are not part of the installed package: run them from a checkout of embshard's sources (npm run bench)`);
        return 2;
      }
      return runBench(file, rest);
    }
    case 'backends': {
      if (rest.length > 0) {
        const help = rest[0] === '--help' || rest[0] === '-h';
        if (help) console.log(BACKENDS_USAGE);
        else console.error(`embshard backends: unexpected argument '${rest[0]}'\n${BACKENDS_USAGE}`);
        return help ? 0 : 2;
      }
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

/**
 * The first error writing stdout met (a full disk, a failing device): the output is incomplete, and a command
 * that succeeded otherwise exits 1 saying so. EPIPE is none: a reader that stopped reading (`| head -1`) wants no more.
 */
let outputError: NodeJS.ErrnoException | undefined;
process.stdout.on('error', (e: NodeJS.ErrnoException) => {
  if (e.code !== 'EPIPE') outputError ??= e;
});

// exit explicitly (workers, sockets or MPI may hold the loop open), but only after stdout and stderr are
// flushed: a reader slower than the command (`embshard plan … | less`) would otherwise lose the output's end
async function exit(code: number): Promise<never> {
  await Promise.all([drained(process.stdout), drained(process.stderr)]);
  // a failed write reports its error on a later turn of the event loop
  await new Promise((done) => setImmediate(done));
  if (outputError && code === 0) {
    console.error(`embshard: IO_ERROR: the output could not be written to stdout (${outputError.code ?? outputError.message})`);
    code = 1;
  }
  process.exit(code);
}

main(process.argv.slice(2)).then(
  (code) => exit(code),
  (e) => {
    console.error(isEmbshardError(e) ? `embshard: ${e.code}: ${e.message}` : e);
    return exit(1);
  },
);
