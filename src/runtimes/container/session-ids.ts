import path from 'node:path';
import { mountsUnder } from '../../host/mounts.js';
import type { CleanupStack } from '../../util/cleanup-stack.js';
import type { PauseTarget, SandboxSpec } from '../runtime.js';
import { HostIdLeases, hostIdBase } from './id-leases.js';
import type { IdRange } from './idmapped-mount.js';
import { ID_RANGE_SIZE, MAX_ID_RANGES, type ContainerSettings } from './settings.js';

/** The host id range of each container session: leased in the store's ledger and host-wide (id-leases.ts). */
export class SessionIdRanges {
  /** Ranges handed out in this process when the caller keeps no ledger (no store). */
  private readonly unledgered = new Map<string, number>();

  constructor(
    private readonly settings: ContainerSettings,
    private readonly prefix: string,
  ) {}

  /** The first host id of this orchestrator's ranges: SBX_CONTAINER_UID_BASE, or one derived from the prefix. */
  get base(): number {
    return this.settings.uidBase ?? hostIdBase(this.prefix);
  }

  /**
   * The session's host id range: from the store's lease (ledger) when there is one, and free
   * host-wide. Given back host-wide by the cleanup once its idmapped views (which carry the
   * range) are unmounted; one left mounted keeps the lease until a reclaim.
   */
  async lease(spec: SandboxSpec, cleanup: CleanupStack, views: readonly string[]): Promise<IdRange> {
    const base = this.base;
    const leases = this.hostLeases(spec.sessionDir);
    const take = leases.taker(spec.sessionId, await leases.staleRanges());
    let first: number;
    if (spec.leaseIdRange) {
      first = spec.leaseIdRange(base, ID_RANGE_SIZE, MAX_ID_RANGES, take);
    } else {
      const taken = new Set(this.unledgered.values());
      first = base;
      for (let k = 0; taken.has(first) || !take(first); k++, first += ID_RANGE_SIZE) {
        if (k >= MAX_ID_RANGES) throw new Error(`all ${MAX_ID_RANGES} host id ranges from ${base} are held`);
      }
      this.unledgered.set(spec.sessionId, first);
      await cleanup.push('id range', () => void this.unledgered.delete(spec.sessionId));
    }
    const leased = first;
    await cleanup.push(`host id lease ${leased}`, async () => {
      // The mount table names canonical paths.
      const mounted = new Set((await mountsUnder(spec.sessionDir)).map((m) => path.basename(m)));
      if (!views.some((view) => mounted.has(path.basename(view)))) await leases.release(leased, spec.sessionId);
    });
    return { first, size: ID_RANGE_SIZE };
  }

  /** A paused session's range taken host-wide again (its lease went with /run at a reboot); whether it got it. */
  async retake(target: Pick<PauseTarget, 'sessionId' | 'sessionDir'>, ids: IdRange): Promise<boolean> {
    const leases = this.hostLeases(target.sessionDir);
    return leases.taker(target.sessionId, await leases.staleRanges())(ids.first);
  }

  /** Every range the session holds host-wide, given back (its mounts are gone). */
  releaseSession(sessionId: string, sessionDir: string): Promise<void> {
    return this.hostLeases(sessionDir).releaseSession(sessionId);
  }

  /** Host-wide leases, held in the name of the state dir that holds the session dirs. */
  private hostLeases(sessionDir: string): HostIdLeases {
    return new HostIdLeases(this.settings.idLeaseDir, { stateDir: path.dirname(sessionDir), prefix: this.prefix });
  }
}
