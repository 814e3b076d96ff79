import type { Logger } from 'pino';
import type { CleanupStack } from '../../util/cleanup-stack.js';
import type { AddressLease } from '../address-pool.js';
import type { ResourceNames } from '../names.js';
import { ensureIpv4Forwarding } from './forwarding.js';
import { applyNft, applyNftIfPresent, listSetElements, listTables } from './nft.js';
import { EGRESS_SET, POLICY_FAMILY, renderAddEgress, renderDeleteTable, renderPolicyTable, renderRemoveEgress } from './ruleset.js';

/** Per session, at create time: may the sandbox reach the internet (through NAT)? */
export interface NetworkOptions {
  egress: boolean;
}

export const DEFAULT_NETWORK_OPTIONS: NetworkOptions = { egress: false };

/**
 * The guest network policy of one orchestrator (see ruleset.ts for the rules and why):
 * installed at start-up, and removed when the orchestrator stops. The deny rules match our
 * interface prefix, so every sandbox is fenced without any step of its own; a session with
 * egress is added to the allow list before its network exists and taken out when it is
 * destroyed. Everything lives in the kernel; this object holds no state of its own, so a
 * crash loses nothing that start-up cannot find again by the prefix.
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
   * Start-up: every nftables table carrying our prefix (an earlier run's, with the entries
   * of sessions that no longer exist, or an older layout) is deleted, and the policy is
   * installed afresh, with no entries: no session is live yet when this runs. Returns how
   * many stale egress entries went with the old table.
   */
  async reclaim(): Promise<number> {
    let stale = 0;
    for (const { family, name } of await listTables()) {
      if (!name.startsWith(this.names.prefix)) continue;
      if (family === POLICY_FAMILY && name === this.table) stale = (await this.egressInterfaces()).length;
      else await applyNftIfPresent(renderDeleteTable(name, family));
    }
    // The replace is one transaction: the host is never without the policy for a moment.
    await applyNft(renderPolicyTable({ table: this.table, interfacePrefix: this.names.prefix, sandboxSubnet: this.sandboxSubnet }));
    if (stale > 0) this.log.warn({ table: this.table, stale }, 'reclaimed network policy entries of sandboxes left behind by an earlier run');
    return stale;
  }

  /**
   * Applies a session's options. Without egress there is nothing to do: the prefix rules
   * fence it already. With egress, the allow entry is added before the veth exists (it is
   * keyed by name), and its release is pushed first: the release is idempotent, so it is
   * right whether the add happened or not.
   */
  async admit(
    sessionId: string,
    lease: AddressLease,
    options: NetworkOptions,
    cleanup: CleanupStack,
    log: Logger = this.log.child({ sessionId }),
  ): Promise<void> {
    if (!options.egress) return;
    const entry = { hostInterface: this.names.hostVeth(sessionId), guestAddress: lease.guest };
    await cleanup.push(`network egress ${entry.hostInterface}`, () => this.release(sessionId, lease.guest));
    await ensureIpv4Forwarding(log);
    await applyNft(renderAddEgress(this.table, entry));
  }

  /** Withdraws a session's egress. Idempotent; a missing table means nothing to remove. */
  async release(sessionId: string, guestAddress: string): Promise<void> {
    await applyNftIfPresent(renderRemoveEgress(this.table, { hostInterface: this.names.hostVeth(sessionId), guestAddress }));
  }

  /** At shutdown, once every session is gone: the table goes too. */
  async uninstall(): Promise<void> {
    await applyNftIfPresent(renderDeleteTable(this.table));
  }

  /** Host veths allowed egress (for leak counts); empty when the table is gone. */
  async egressInterfaces(): Promise<string[]> {
    const elements = (await listSetElements(POLICY_FAMILY, this.table, EGRESS_SET)) ?? [];
    return elements.map((e) => {
      const concat = (e as { concat?: unknown[] }).concat;
      return Array.isArray(concat) && typeof concat[0] === 'string' ? concat[0] : String(e);
    });
  }
}
