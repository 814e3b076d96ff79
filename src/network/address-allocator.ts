import type { Logger } from 'pino';
import { run } from '../util/exec.js';
import { AddressPool, type AddressLease } from './address-pool.js';

/**
 * The sandbox subnet's /30 blocks as this host has them: the pool's bookkeeping plus a look
 * at the host's interfaces, so that a block some other party already answers on is never
 * handed to a sandbox.
 */
export class AddressAllocator {
  readonly pool: AddressPool;

  constructor(
    subnet: string,
    private readonly log: Logger,
  ) {
    this.pool = new AddressPool(subnet);
  }

  /**
   * The lowest free /30 whose addresses no host interface holds already: another
   * orchestrator given the same subnet, or a sandbox a killed process left behind, would
   * otherwise answer in its place. Blocks found taken stay out of this lease only.
   */
  async leaseFree(): Promise<AddressLease> {
    const onHost = await hostIPv4Addresses();
    const skipped: number[] = [];
    try {
      for (;;) {
        const lease = this.pool.lease(); // throws once the subnet is exhausted
        if (!onHost.has(lease.gateway) && !onHost.has(lease.guest)) return lease;
        skipped.push(lease.index);
        this.log.warn({ gateway: lease.gateway }, 'an address of the sandbox subnet is already on a host interface; skipping its block');
      }
    } finally {
      for (const index of skipped) this.pool.release(index);
    }
  }

  release(index: number): void {
    this.pool.release(index);
  }

  describe(index: number): AddressLease {
    return this.pool.describe(index);
  }

  /** Blocks leased now (sessions and pooled sandboxes): a leak shows here. */
  get inUse(): number {
    return this.pool.inUse;
  }
}

/**
 * Every IPv4 address on the host's interfaces, up or down (os.networkInterfaces() lists only
 * interfaces that are up and running: a leftover veth whose peer is gone would be missed).
 */
export async function hostIPv4Addresses(): Promise<Set<string>> {
  const { stdout } = await run(['ip', '-o', '-4', 'addr', 'show']);
  return new Set([...stdout.matchAll(/\binet (\d+\.\d+\.\d+\.\d+)\//g)].map((m) => m[1] as string));
}
