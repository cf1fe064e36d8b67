// `npm run test:cuda-emu`: the GPU test suites against the CUDA emulation (docs/cuda-emulation.md).
// Builds the test-only addon embshard_cuda_emu.node (CMake option WITH_CUDA_EMU, same build folder as the
// other addons), then runs the suites that need a CUDA device with EMBSHARD_CUDA_EMU=1 once per schedule
// seed (EMBSHARD_CUDA_EMU_SEEDS, default "0,1,2": 0 = blocks and threads in index order, others = seeded
// random orders), and prints the totals as "cuda-emu: N passed, N failed, N skipped". `--json <file>`
// also writes the totals there (.ci/run adds them to its closing line). Extra arguments after `--` go
// to vitest.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CUDA_EMU_SUITES } from './cuda-emu-suites.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const out = process.env.EMBSHARD_BUILD_DIR ?? 'build';
const jobs = process.env.EMBSHARD_JOBS ?? String(cpus().length);

const args = process.argv.slice(2);
const jsonAt = args.indexOf('--json');
const jsonFile = jsonAt >= 0 ? args[jsonAt + 1] : undefined;
const dashes = args.indexOf('--');
const extra = dashes >= 0 ? args.slice(dashes + 1) : [];

function run(cmd, argv, env = process.env) {
  const r = spawnSync(cmd, argv, { cwd: root, stdio: 'inherit', env });
  return r.status ?? 1;
}
function must(cmd, argv) {
  const status = run(cmd, argv);
  if (status !== 0) process.exit(status);
}

// 1. the CPU addon and the TypeScript output, then the emulated CUDA addon in the same build folder
must(process.execPath, [join(root, 'scripts', 'ensure-built.mjs')]);
const cache = join(root, out, 'CMakeCache.txt');
if (!existsSync(cache)) must(process.execPath, [join(root, 'scripts', 'build-native.mjs'), '--CDWITH_CUDA_EMU=ON']);
else if (!readFileSync(cache, 'utf8').includes('WITH_CUDA_EMU:BOOL=ON')) must('cmake', ['-DWITH_CUDA_EMU=ON', join(root, out)]);
must('cmake', ['--build', join(root, out), '--target', 'embshard_cuda_emu', '--parallel', jobs]);

// 2. the suites, once per schedule seed
const seeds = (process.env.EMBSHARD_CUDA_EMU_SEEDS ?? '0,1,2').split(',').map((s) => s.trim()).filter((s) => s !== '');
const dir = mkdtempSync(join(tmpdir(), 'embshard-cuda-emu-'));
const total = { passed: 0, failed: 0, skipped: 0, seeds, seconds: 0 };
let status = 0;
const t0 = Date.now();
for (const seed of seeds) {
  console.log(`\n== CUDA emulation, schedule seed ${seed}${seed === '0' ? ' (in order)' : ' (random order)'}`);
  const report = join(dir, `seed-${seed}.json`);
  const env = { ...process.env, EMBSHARD_CUDA_EMU: '1', EMBSHARD_CUDA_EMU_SEED: seed };
  const vitest = join(root, 'node_modules', 'vitest', 'vitest.mjs');
  const s = run(process.execPath, [vitest, 'run', ...CUDA_EMU_SUITES, '--reporter=default', '--reporter=json', `--outputFile.json=${report}`, ...extra], env);
  if (s !== 0) status = s;
  if (!existsSync(report)) {
    console.log(`seed ${seed}: no vitest report was written`);
    total.failed += 1;
    status ||= 1;
    continue;
  }
  const r = JSON.parse(readFileSync(report, 'utf8'));
  total.passed += r.numPassedTests;
  total.failed += r.numFailedTests;
  total.skipped += r.numPendingTests + r.numTodoTests;
}
total.seconds = Math.round((Date.now() - t0) / 1000);
rmSync(dir, { recursive: true, force: true });
console.log(`\ncuda-emu: ${total.passed} passed, ${total.failed} failed, ${total.skipped} skipped (seeds ${seeds.join(', ')}; ${total.seconds} s)`);
if (jsonFile) writeFileSync(jsonFile, JSON.stringify(total));
if (total.skipped > 0) status ||= 1;  // every GPU test must run against the emulator
process.exit(status);
