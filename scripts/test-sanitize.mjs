// `npm run test:sanitize`: the native code under AddressSanitizer and UndefinedBehaviorSanitizer
// (docs/cuda-emulation.md, "Sanitizers"). Builds the CPU addon and the CUDA emulation addon with
// -fsanitize=address,undefined into build-sanitize/ (its own folder: the regular build is untouched), then
// runs the test suites that load them with the ASan runtime preloaded into Node, which is not built with
// it: the CPU suites, and the GPU suites against the emulated device under one schedule seed. Any report
// ends the test process (UBSan does not recover), so a sanitizer finding fails its suite. Not part of
// `.ci/run`: the sanitized build and run take several times the regular ones. Arguments after `--` replace
// the CPU suites (e.g. `npm run test:sanitize -- test/embedding`).
import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CUDA_EMU_SUITES } from './cuda-emu-suites.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const out = 'build-sanitize';
const dir = join(root, out);
const jobs = process.env.EMBSHARD_JOBS ?? String(cpus().length);

// The suites that load the CPU addon. Left out: test/package (it builds and packs copies of the project)
// and test/cuda (its emulator test compiles programs of its own); the GPU suites run in the second pass.
const CPU_SUITES = ['test/embedding', 'test/storage', 'test/checkpoint', 'test/sharded', 'test/herald', 'test/train', 'test/data', 'test/serve', 'test/config', 'test/plan', 'test/cli'];
// Tests that measure the process's memory, which the sanitizers' shadow memory and quarantine inflate, and
// tests that run a child under a capped address space, where AddressSanitizer cannot map its shadow memory.
const SKIP = '^(?!.*(resident memory|memory flat|capped address space))';

function run(cmd, argv, env = process.env) {
  const r = spawnSync(cmd, argv, { cwd: root, stdio: 'inherit', env });
  return r.status ?? 1;
}
function must(cmd, argv, env = process.env) {
  const status = run(cmd, argv, env);
  if (status !== 0) process.exit(status);
}
function output(cmd, argv) {
  const r = spawnSync(cmd, argv, { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() : '';
}

// 1. the sanitized addons. cmake-js sets CMAKE_CXX_FLAGS itself, so the flags travel in a compiler
// wrapper; -Wno-error because the sanitizers' instrumentation makes g++ warn about code it cannot prove
// in bounds (-Warray-bounds), which the regular -Werror build does not see.
mkdirSync(dir, { recursive: true });
const cxx = join(dir, 'sanitize-g++');
writeFileSync(cxx, '#!/bin/sh\nexec g++ "$@" -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -Wno-error\n');
chmodSync(cxx, 0o755);
if (!existsSync(join(dir, 'CMakeCache.txt')))
  must(process.execPath, [join(root, 'scripts', 'build-native.mjs'), '--CDWITH_CUDA=OFF', '--CDWITH_CUDA_EMU=ON', `--CDCMAKE_CXX_COMPILER=${cxx}`], { ...process.env, EMBSHARD_BUILD_DIR: out });
must('cmake', ['--build', dir, '--parallel', jobs]);
must(process.execPath, [join(root, 'scripts', 'ensure-built.mjs'), '--ts-only']);

// 2. the suites, with the ASan runtime first in the process (Node itself is not instrumented)
const asan = output('g++', ['-print-file-name=libasan.so']);
if (!asan || !existsSync(asan)) {
  console.error('test:sanitize: g++ has no libasan.so (install the gcc sanitizer runtime)');
  process.exit(1);
}
const env = {
  ...process.env,
  LD_PRELOAD: asan,
  ASAN_OPTIONS: 'detect_leaks=0', // V8 and Node keep memory for the process's lifetime
  UBSAN_OPTIONS: 'print_stacktrace=1',
  EMBSHARD_ADDON: join(dir, 'Release', 'embshard.node'),
  EMBSHARD_BUILD_DIR: out,
};
const vitest = join(root, 'node_modules', 'vitest', 'vitest.mjs');
const dashes = process.argv.indexOf('--');
const cpu = dashes >= 0 ? process.argv.slice(dashes + 1) : CPU_SUITES;
console.log('\n== sanitized CPU addon');
const cpuStatus = run(process.execPath, [vitest, 'run', ...cpu, '-t', SKIP], env);
console.log('\n== sanitized CUDA emulation, schedule seed 1');
const emuStatus = run(process.execPath, [vitest, 'run', ...CUDA_EMU_SUITES], { ...env, EMBSHARD_CUDA_EMU: '1', EMBSHARD_CUDA_EMU_SEED: '1' });
console.log(`\ntest:sanitize: CPU suites exit ${cpuStatus}, emulated GPU suites exit ${emuStatus}`);
process.exit(cpuStatus || emuStatus);
