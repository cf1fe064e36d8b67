// cuda-emu-suites.mjs — the test suites that need a CUDA device (their CUDA parts, the NCCL group), which
// `npm run test:cuda-emu` and `npm run test:sanitize` run against the emulated one (docs/cuda-emulation.md).
export const CUDA_EMU_SUITES = [
  'test/cuda/parity.test.ts',
  'test/cuda/device-array.test.ts',
  'test/cuda/odd-configs.test.ts',
  'test/train/cuda-layers.test.ts',
  'test/train/cuda-model.test.ts',
  'test/train/cuda-dense-edges.test.ts',
  'test/train/device-handoff.test.ts',
  'test/embedding/forward-backward.test.ts',
  'test/embedding/errors.test.ts',
  'test/storage/dynamic.test.ts',
  'test/storage/dynamic-default.test.ts',
  'test/sharded/group-nccl.test.ts',
  'test/sharded/sharded-device.test.ts',
  'test/herald/herald-cuda.test.ts',
  'test/storage/cuda-disk.test.ts',
  'test/train/cli-comm.test.ts',
];
