// index.ts — workload presets and their seeded batch generators.
export { workload, WORKLOAD_NAMES, DCNV2_ROWS, DCNV2_HOTNESS, KAGGLE_ROWS, type Workload, type BagSpec } from './presets.js';
export { generateBatch, generateBatches, type GenerateOptions } from './generator.js';
export { ZipfSampler } from './zipf.js';
export { Rng } from './rng.js';
