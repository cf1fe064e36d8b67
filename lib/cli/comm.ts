// comm.ts — the process group `embshard train` trains over: MPI under mpirun, an in-process group of one
// for a single process that still needs a group (a plan file, Herald), and NCCL on top of either when the
// tables and the dense model live on CUDA devices (`--comm nccl`, or `auto`: NCCL whenever several ranks
// train on CUDA devices and the addon was built with NCCL, MPI otherwise).
import { cudaIndex } from '../backends.js';
import { EmbshardError } from '../errors.js';
import { createInProcessGroups, createMpiGroup, createNcclGroup, type ProcessGroup } from '../sharded/group.js';

export type CommChoice = 'auto' | 'mpi' | 'nccl';
export const COMM_CHOICES: readonly CommChoice[] = ['auto', 'mpi', 'nccl'];

export interface RunGroup {
  /** the group the Trainer uses; undefined for one process without sharding */
  group: ProcessGroup | undefined;
  /** the group NCCL was bootstrapped over (kept open until the run ends), when `group` is NCCL */
  bootstrap?: ProcessGroup;
  /** why `auto` stayed on MPI although the devices are GPUs (printed once by rank 0) */
  note?: string;
}

const TIMEOUT_MS = 300_000;

/**
 * Opens the run's group. `device` is the rank's resolved device (cuda:local already turned into cuda:N by
 * `resolveDevice`, called with the bootstrap group's rank once it exists).
 */
export async function openRunGroup(opts: {
  world: number;
  needsGroup: boolean;
  comm: CommChoice;
  resolveDevice: (bootstrap: ProcessGroup | undefined) => string;
}): Promise<RunGroup> {
  const { world, comm } = opts;
  let boot: ProcessGroup | undefined;
  if (world > 1) boot = await createMpiGroup({ timeoutMs: TIMEOUT_MS });
  else if (opts.needsGroup) boot = createInProcessGroups(1)[0];
  const device = opts.resolveDevice(boot);
  const gpu = cudaIndex(device);
  if (comm === 'nccl' && gpu === undefined) {
    boot?.close();
    throw new EmbshardError('INVALID_ARGUMENT', `--comm nccl needs --device cuda:N or cuda:local (got '${device}')`);
  }
  const wantNccl = comm === 'nccl' || (comm === 'auto' && world > 1 && gpu !== undefined);
  // one process without sharding runs no collective at all: there is nothing for NCCL to carry
  if (!boot || !wantNccl) return { group: boot };
  try {
    const group = await createNcclGroup({ bootstrap: boot, device: gpu!, timeoutMs: TIMEOUT_MS });
    return { group, bootstrap: boot };
  } catch (e) {
    // every rank learns the same outcome (createNcclGroup agrees on it first), so all fall back together
    if (comm === 'auto' && e instanceof EmbshardError && e.code === 'BACKEND_UNAVAILABLE')
      return { group: boot, note: `--comm auto: collectives over MPI (${e.message})` };
    boot.close();
    throw e;
  }
}
