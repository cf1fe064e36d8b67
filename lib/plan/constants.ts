// constants.ts — every number the planner's cost model and the cluster simulator use, in one place, each
// with its source. Bandwidths are bytes per second; capacities are bytes.
import type { DType, OptimizerType } from '../binding.js';

/** Element size of a table / wire dtype. */
export const DTYPE_BYTES: Readonly<Record<DType, number>> = { fp32: 4, fp16: 2, bf16: 2 };

/** Wire element sizes (docs/wire-protocol.md): ids are int64, lengths int32, per-id weights fp32. */
export const ID_BYTES = 8;
export const LENGTH_BYTES = 4;
export const WEIGHT_BYTES = 4;

/**
 * Optimizer state kept beside each table, as bytes per element (per row element) and per row.
 * Source: TorchRec EmbeddingStorageEstimator multipliers (SGD 0, Adam 2, RowWiseAdagrad 1/D, other 1) and
 * HugeCTR's planner (4 B/element for SGD, 8 B/element for Adagrad, i.e. one fp32 accumulator per element).
 * State is fp32 whatever the table dtype.
 */
export const OPTIMIZER_STATE: Readonly<Record<OptimizerType, { perElement: number; perRow: number }>> = {
  sgd: { perElement: 0, perRow: 0 },
  adagrad: { perElement: 4, perRow: 0 },
  rowwise_adagrad: { perElement: 0, perRow: 4 },
  adam: { perElement: 8, perRow: 0 },
};

/**
 * Gather efficiency by shard width (TorchRec constants.py: FULL_BLOCK_EMB_DIM 128, HALF_BLOCK_PENALTY 1.15,
 * QUARTER_BLOCK_PENALTY 1.75, "empirical studies"): the HBM bytes of a lookup into a shard `cols` wide are
 * multiplied by this penalty when they are turned into time.
 */
export const FULL_BLOCK_COLS = 128;
export const HALF_BLOCK_PENALTY = 1.15;
export const QUARTER_BLOCK_PENALTY = 1.75;
export function blockPenalty(cols: number): number {
  if (cols >= FULL_BLOCK_COLS) return 1;
  if (cols >= FULL_BLOCK_COLS / 2) return HALF_BLOCK_PENALTY;
  return QUARTER_BLOCK_PENALTY;
}

/**
 * Share of device memory the planner may fill with embeddings (tables + optimizer state + hot tiers) by
 * default. Source: HugeCTR's planner default memory_cap_for_embedding = 60 GB on an 80 GB H100 (= 0.75); the
 * rest is left for the dense model, activations and communication buffers.
 */
export const DEFAULT_MEMORY_FRACTION = 0.75;

/** Smallest column shard the planner creates: a multiple of 4 (FBGEMM TBE requires D % 4 == 0) and ≥ 16
 * (HugeCTR's planner only halves an ev_size above 32). */
export const MIN_SHARD_COLS = 16;
export const COL_ALIGN = 4;

/** Zipf exponent of EMBark's synthetic benchmark keys (HugeCTR benchmarks/embedding_collection, α = 1.1). */
export const EMBARK_ZIPF_ALPHA = 1.1;

/**
 * Hardware presets from the public NVIDIA DGX H100 / H200 / A100 datasheets: HBM capacity and bandwidth,
 * NVLink per direction (half the bidirectional figure), one InfiniBand NIC per GPU (NDR 400 Gb/s, HDR
 * 200 Gb/s). Per GPU, per direction.
 */
export interface HardwarePreset {
  readonly name: string;
  readonly description: string;
  readonly deviceMemoryBytes: number;
  readonly hbmBandwidth: number;
  readonly intraNodeBandwidth: number;
  readonly interNodeBandwidth: number;
  readonly ranksPerNode: number;
  readonly source: string;
}

export const HARDWARE_PRESETS: Readonly<Record<'dgx-h100' | 'dgx-h200' | 'dgx-a100', HardwarePreset>> = {
  'dgx-h100': {
    name: 'dgx-h100',
    description: 'DGX H100: 8 × H100 80 GB HBM3, NVLink 4 + NVSwitch, 1 × ConnectX-7 400 Gb/s NDR IB per GPU',
    deviceMemoryBytes: 80e9,
    hbmBandwidth: 3.35e12,
    intraNodeBandwidth: 450e9,
    interNodeBandwidth: 50e9,
    ranksPerNode: 8,
    source: 'NVIDIA DGX H100 datasheet (hardware.md): 3.35 TB/s HBM3, 900 GB/s bidirectional NVLink, 400 Gb/s IB per GPU',
  },
  'dgx-h200': {
    name: 'dgx-h200',
    description: 'DGX H200: 8 × H200 141 GB HBM3e, NVLink 4 + NVSwitch, 400 Gb/s NDR IB per GPU',
    deviceMemoryBytes: 141e9,
    hbmBandwidth: 4.8e12,
    intraNodeBandwidth: 450e9,
    interNodeBandwidth: 50e9,
    ranksPerNode: 8,
    source: 'NVIDIA DGX H200 datasheet (hardware.md): 4.8 TB/s HBM3e, 900 GB/s bidirectional NVLink, 400 Gb/s IB per GPU',
  },
  'dgx-a100': {
    name: 'dgx-a100',
    description: 'DGX A100: 8 × A100 80 GB HBM2e, NVLink 3 + NVSwitch, 200 Gb/s HDR IB per GPU',
    deviceMemoryBytes: 80e9,
    hbmBandwidth: 2.04e12,
    intraNodeBandwidth: 300e9,
    interNodeBandwidth: 25e9,
    ranksPerNode: 8,
    source: 'NVIDIA DGX A100 datasheet (hardware.md): 2.04 TB/s HBM2e, 600 GB/s bidirectional NVLink, 200 Gb/s IB per GPU',
  },
};

/** Size of the buffers the `cpu` preset measures with (bytes), and the row width of its gather test. */
export const CPU_MEASURE_BYTES = 64 * 1024 * 1024;
export const CPU_MEASURE_ROW_FLOATS = 64;

/**
 * Host bytes a dynamic table's id map spends per row of capacity beside the row itself: the id, count and
 * last use (native/storage/dynamic_map.h), the open-addressing index at load ≤ 1/2, the LRU list, and the
 * candidate map (by default as many candidates as rows). An upper estimate the planner adds to each row.
 */
export const DYNAMIC_MAP_ROW_BYTES = 128;
