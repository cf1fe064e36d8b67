// Compiles the native addons with cmake-js: the CPU addon always, the CUDA addon when nvcc is found
// (CMakeLists.txt decides). Extra arguments are passed through to cmake-js (e.g. --CDWITH_CUDA=OFF).
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { cpus } from 'node:os';
import { existsSync } from 'node:fs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const cmakeJs = join(root, 'node_modules', 'cmake-js', 'bin', 'cmake-js');
const out = process.env.EMBSHARD_BUILD_DIR ?? 'build';
// NCCL and cuBLAS come from NVIDIA's pip wheels; .ci/run installs them under .deps/ (see README).
const nccl = process.env.NCCL_ROOT ?? (existsSync(join(root, '.deps/nccl/nvidia/nccl')) ? join(root, '.deps/nccl/nvidia/nccl') : '');
const cublas = process.env.CUBLAS_ROOT ?? (existsSync(join(root, '.deps/cublas/nvidia/cu13')) ? join(root, '.deps/cublas/nvidia/cu13') : '');
const args = [cmakeJs, 'compile', '--config', 'Release', '--out', out, '--parallel', process.env.EMBSHARD_JOBS ?? String(cpus().length),
  ...(nccl ? [`--CDNCCL_ROOT=${nccl}`] : []),
  ...(cublas ? [`--CDCUBLAS_ROOT=${cublas}`] : []),
  ...process.argv.slice(2)];
const r = spawnSync(process.execPath, args, { cwd: root, stdio: 'inherit' });
process.exit(r.status ?? 1);
