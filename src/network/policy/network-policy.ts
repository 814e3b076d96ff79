import type { Logger } from 'pino';
import type { CleanupStack } from '../../util/cleanup-stack.js';
import type { AddressLease } from '../address-pool.js';
import type { ResourceNames } from '../names.js';
import { ensureIpv4Forwarding } from './forwarding.js';
import { applyNft, applyNftIfPresent, listSetElements, listTables } from './nft.js';
import { EGRESS_SET, POLICY_FAMILY, renderAddSession, renderDeleteTable, renderPolicyTable, renderRemoveSession, SESSIONS_SET } from './ruleset.js';

/** Per session, at create time: may the sandbox reach the internet (through NAT)? */
export interface NetworkOptions {
  egress: boolean;
}

export const DEFAULT_NETWORK_OPTIONS: NetworkOptions = { egress: false };

/**
 * The guest network policy of one orchestrator (see ruleset.ts for the rules and why):
 * installed at start-up, a session is put under it before its network exists and taken out
 * when it is destroyed, and the table goes when the orchestrator stops. Everything lives in
 * the kernel's sets; this object holds no state of its own, so a crash loses nothing that
 * start-up cannot find again by the prefix.
 */
export class NetworkPolicy {
  readonly table: string;

  constructor(
    private readonly names: ResourceNames,
    private readonly sandboxSubnet: string,
    private readonly log: Logger,
  ) {
    this.table = names.policyTable;
  }

  /**
   * Start-up: every nftables table carrying our prefix (an earlier run's, with the elements
   * of sessions that no longer exist, or an older layout) is deleted, and the policy is
   * installed afresh, empty: no session is live yet when this runs. Returns how many stale
   * session elements went with the old table.
   */
  async reclaim(): Promise<number> {
    let stale = 0;
    for (const { family, name } of await listTables()) {
      if (!name.startsWith(this.names.prefix)) continue;
      if (family === POLICY_FAMILY && name === this.table) stale = (await this.sessionInterfaces()).length;
      if (family !== POLICY_FAMILY || name !== this.table) await applyNftIfPresent(renderDeleteTable(name, family));
    }
    // The replace is one transaction: the host is never without the policy for a moment.
    await applyNft(renderPolicyTable({ table: this.table, sandboxSubnet: this.sandboxSubnet }));
    if (stale > 0) this.log.warn({ table: this.table, stale }, 'reclaimed network policy entries of sandboxes left behind by an earlier run');
    return stale;
  }

  /**
   * Puts a session under the policy. Called before its veth exists (the sets are keyed by
   * name), so there is no moment when the sandbox is on the network without its rules. The
   * release is pushed first: it is idempotent, so it is right whether the add happened or not.
   */
  async admit(sessionId: string, lease: AddressLease, options: NetworkOptions, cleanup: CleanupStack): Promise<void> {
    const elements = { hostInterface: this.names.hostVeth(sessionId), guestAddress: lease.guest };
    await cleanup.push(`network policy ${elements.hostInterface}`, () => this.release(sessionId, lease.guest));
    if (options.egress) await ensureIpv4Forwarding(this.log.child({ sessionId }));
    await applyNft(renderAddSession(this.table, { ...elements, egress: options.egress }));
  }

  /** Takes a session out of the sets. Idempotent; a missing table means nothing to remove. */
  async release(sessionId: string, guestAddress: string): Promise<void> {
    await applyNftIfPresent(renderRemoveSession(this.table, { hostInterface: this.names.hostVeth(sessionId), guestAddress }));
  }

  /** At shutdown, once every session is gone: the table goes too. */
  async uninstall(): Promise<void> {
    await applyNftIfPresent(renderDeleteTable(this.table));
  }

  /** Host veths under the policy (for leak counts); empty when the table is gone. */
  async sessionInterfaces(): Promise<string[]> {
    const elements = (await listSetElements(POLICY_FAMILY, this.table, SESSIONS_SET)) ?? [];
    return elements.filter((e): e is string => typeof e === 'string');
  }

  /** How many sessions are allowed egress (for leak counts). */
  async egressCount(): Promise<number> {
    return ((await listSetElements(POLICY_FAMILY, this.table, EGRESS_SET)) ?? []).length;
  }
}
