import type { ResourceKindEntry } from '../entry.js';

/**
 * A VMM's uid from the pool (vm-user-pool.ts). A lease lives in the pool's memory, gone with
 * the process that held it; the VMM that ran under it is the 'process' entry, killed in an
 * earlier stage. Nothing is left to free.
 */
export const VM_USER: ResourceKindEntry = { stage: 'leases', reclaim: async () => undefined };
