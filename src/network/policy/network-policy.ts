import type { Logger } from 'pino';
import type { CleanupStack } from '../../util/cleanup-stack.js';
import type { AddressLease } from '../address-pool.js';
import type { ResourceNames } from '../names.js';
import { SerialQueue } from '../../util/serial-queue.js';
import { ensureIpv4Forwarding } from './forwarding.js';
import { applyNft, applyNftIfPresent, listSetElements, listTable, listTables } from './nft.js';
import { InteractiveNftList } from './nft-interactive.js';
import { blockedHostNetworks, hostElementKey, readHostNetworks } from './host-networks.js';
import {
  EGRESS_SET,
  HOST_NETWORKS_SET,
  POLICY_FAMILY,
  SOURCES_SET,
  renderAddEgress,
  renderAddSource,
  renderDeleteTable,
  renderHostNetworks,
  renderPolicyTable,
  renderRemoveEgress,
  renderRemoveSource,
  type EgressEntry,
  type PolicyEntries,
} from './ruleset.js';
import { describeDrift, tableShape } from './table-shape.js';

/** Per session, at create time: may the sandbox reach the internet (through NAT)? */
export interface NetworkOptions {
  egress: boolean;
}

export const DEFAULT_NETWORK_OPTIONS: NetworkOptions = { egress: false };

/**
 * The guest network policy of one orchestrator (see ruleset.ts for the rules and why):
 * installed at start-up, and removed when the orchestrator stops. The deny rules match our
 * interface prefix, so every sandbox is fenced without any step of its own; every session's
 * own (veth, address) is added before its network exists (anti-spoofing), and so is its
 * egress entry if it has one; both are taken out when it is destroyed.
 *
 * The kernel holds the policy; this object also remembers what it put there (the rules as
 * read back after install, and the sessions admitted), so that `drift` can tell when
 * someone else changed or removed the table and `reinstall` can put it back whole, with
 * its sessions. Changes and checks run one at a time, so a check never sees an admit
 * half-done. A crash loses nothing: start-up replaces the table and re-admits the sessions
 * it adopts.
 */
export class NetworkPolicy {
  readonly table: string;
  /** Admitted sessions by host veth: their own address, and whether they may go out. */
  private readonly admitted = new Map<string, { guestAddress: string; egress: boolean }>();
  /** The table's structure as read back after the last install (table-shape.ts). */
  private installedStructure: string | undefined;
  private readonly queue = new SerialQueue();
  /** The host's own networks in the table now (host-networks.ts). */
  private hostNetworks: string[] = [];
  /** The drift check's listing, from one long-lived nft (a spawn per create stalled this process). */
  private readonly listing = new InteractiveNftList();

  constructor(
    private readonly names: ResourceNames,
    private readonly sandboxSubnet: string,
    private readonly log: Logger,
    /** Sources let through to the host from any sandbox veth (ruleset.ts, hostOnlySources). */
    private readonly hostOnlySources: readonly string[] = [],
    /** The host's networks as they are now (a stand-in only in tests of the refresh). */
    private readonly readNetworks: () => Promise<string[]> = readHostNetworks,
  ) {
    this.table = names.policyTable;
  }

  /** The table as it must be now, with the admitted sessions in its sets. */
  private render(entries?: PolicyEntries): string {
    return renderPolicyTable({
      table: this.table,
      interfacePrefix: this.names.prefix,
      sandboxSubnet: this.sandboxSubnet,
      hostOnlySources: this.hostOnlySources,
      entries,
      hostNetworks: this.hostNetworks,
    });
  }

  private entries(): PolicyEntries {
    const all = [...this.admitted].map(([hostInterface, { guestAddress, egress }]) => ({ hostInterface, guestAddress, egress }));
    const entry = ({ hostInterface, guestAddress }: EgressEntry): EgressEntry => ({ hostInterface, guestAddress });
    return { sources: all.map(entry), egress: all.filter((e) => e.egress).map(entry) };
  }

  /** Installs the table (one transaction: never a moment without it) and notes its structure. */
  private async install(entries?: PolicyEntries): Promise<void> {
    this.hostNetworks = blockedHostNetworks(await this.readNetworks(), this.sandboxSubnet);
    await applyNft(this.render(entries));
    const listed = await listTable(POLICY_FAMILY, this.table);
    if (!listed) throw new Error(`nft: table ${POLICY_FAMILY} ${this.table} is missing right after it was installed`);
    this.installedStructure = tableShape(listed, [SOURCES_SET, EGRESS_SET, HOST_NETWORKS_SET]).structure;
  }

  /**
   * Reads the host's networks again and, if they changed (an address, a route, an interface
   * came or went), puts the new list in the table in one transaction. Run by every policy
   * check (policy-guard.ts) before the table is compared. Returns the networks now blocked.
   */
  refreshHostNetworks(): Promise<readonly string[]> {
    return this.queue.run(async () => {
      if (this.installedStructure === undefined) return this.hostNetworks;
      const now = blockedHostNetworks(await this.readNetworks(), this.sandboxSubnet);
      if (now.join(' ') === this.hostNetworks.join(' ')) return now;
      // A table gone meanwhile is the drift check's to find; reinstall reads the networks anew.
      await applyNftIfPresent(renderHostNetworks(this.table, now));
      const added = now.filter((n) => !this.hostNetworks.includes(n));
      const removed = this.hostNetworks.filter((n) => !now.includes(n));
      this.hostNetworks = now;
      this.log.warn({ table: this.table, added, removed }, "the host's own networks changed: sandboxes are fenced from the new list");
      return now;
    });
  }

  /**
   * How the table in the kernel differs from what we installed and admitted, in words; or
   * undefined when it is as it must be. "missing" when it is gone.
   */
  drift(): Promise<string | undefined> {
    return this.queue.run(async () => {
      if (this.installedStructure === undefined) return undefined; // not installed yet (or uninstalled)
      const listed = await this.listing.listTable(POLICY_FAMILY, this.table);
      if (!listed) return 'the table is missing';
      const { sources, egress } = this.entries();
      const key = (e: EgressEntry) => `${e.hostInterface} . ${e.guestAddress}`;
      return describeDrift(tableShape(listed, [SOURCES_SET, EGRESS_SET, HOST_NETWORKS_SET]), this.installedStructure, {
        [SOURCES_SET]: sources.map(key),
        [EGRESS_SET]: egress.map(key),
        [HOST_NETWORKS_SET]: this.hostNetworks.map(hostElementKey),
      });
    });
  }

  /** Puts the table back as it must be, with every admitted session's entries. */
  reinstall(): Promise<void> {
    return this.queue.run(() => this.install(this.entries()));
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
    await this.queue.run(async () => {
      this.admitted.clear();
      await this.install();
    });
    if (stale > 0) this.log.warn({ table: this.table, stale }, 'reclaimed network policy entries of sandboxes left behind by an earlier run');
    return stale;
  }

  /**
   * Admits a session: its own (veth, address) as the one source its packets may carry, and
   * with egress its allow entry, added before the veth exists (they are keyed by name). The
   * release is pushed first: it is idempotent, so it is right whether the add happened or not.
   */
  async admit(
    sessionId: string,
    lease: AddressLease,
    options: NetworkOptions,
    cleanup: CleanupStack,
    log: Logger = this.log.child({ sessionId }),
  ): Promise<void> {
    const entry = { hostInterface: this.names.hostVeth(sessionId), guestAddress: lease.guest };
    await cleanup.push(`network policy entries ${entry.hostInterface}`, () => this.release(sessionId, lease.guest));
    if (options.egress) await ensureIpv4Forwarding(log);
    await this.queue.run(async () => {
      this.admitted.set(entry.hostInterface, { guestAddress: entry.guestAddress, egress: options.egress });
      await applyNft(renderAddSource(this.table, entry) + (options.egress ? renderAddEgress(this.table, entry) : ''));
    });
  }

  /** Withdraws a session's entries. Idempotent; a missing table means nothing to remove. */
  async release(sessionId: string, guestAddress: string): Promise<void> {
    const entry = { hostInterface: this.names.hostVeth(sessionId), guestAddress };
    await this.queue.run(async () => {
      this.admitted.delete(entry.hostInterface);
      await applyNftIfPresent(renderRemoveSource(this.table, entry) + renderRemoveEgress(this.table, entry));
    });
  }

  /** At shutdown, once every session is gone: the table goes too. */
  async uninstall(): Promise<void> {
    this.listing.close();
    await this.queue.run(async () => {
      this.installedStructure = undefined;
      await applyNftIfPresent(renderDeleteTable(this.table));
    });
  }

  /** Host veths whose own address is admitted (every live sandbox); empty when the table is gone. */
  async sourceInterfaces(): Promise<string[]> {
    return this.interfacesIn(SOURCES_SET);
  }

  /** Host veths allowed egress (for leak counts); empty when the table is gone. */
  async egressInterfaces(): Promise<string[]> {
    return this.interfacesIn(EGRESS_SET);
  }

  private async interfacesIn(set: string): Promise<string[]> {
    const elements = (await listSetElements(POLICY_FAMILY, this.table, set)) ?? [];
    return elements.map((e) => {
      const concat = (e as { concat?: unknown[] }).concat;
      return Array.isArray(concat) && typeof concat[0] === 'string' ? concat[0] : String(e);
    });
  }
}
