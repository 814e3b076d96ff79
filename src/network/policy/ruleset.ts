import { BLOCKED_IPV4_RANGES } from './ranges.js';

/**
 * The nftables text of the guest network policy. One `inet` table per orchestrator, named
 * after its resource prefix, so that orchestrators with other prefixes (a test suite beside
 * a dev server) never touch each other's rules; `inet`, so one set of rules covers IPv4 and
 * IPv6 alike (a guest could otherwise reach the host over IPv6 link-local).
 *
 * Sandboxes are told apart by their host-side veth, whose name carries our prefix (a VM's
 * TAP is bridged to the veth inside the netns, so its traffic enters the host through the
 * same veth). The deny rules match that prefix (`iifname "sbx-*"`), not a list of sessions:
 * the policy fails closed. A veth of ours is fenced from the moment it exists, whether or
 * not its session got as far as registering anything, and a lost or stale entry can only
 * take a permission away, never leave a sandbox open.
 *
 * Two per-session entries, each a set of (host veth . guest address): `sources`, every
 * sandbox's own address on its own veth (anti-spoofing: a packet from a sandbox whose source
 * is anything else is dropped before any other rule, so it can neither leave nor pass as a
 * reply of someone else's connection; a veth of ours not in the set sends nothing at all,
 * fail-closed), and `egress`, the allow list of the sessions allowed out. Keying it on the guest's own address as well means
 * a guest that forges another source address is not "allowed out", so it cannot masquerade
 * someone else's traffic. Adding or removing a session is one atomic set update: no rule is
 * rewritten, lookups cost the same with 1 or 1,000 sessions, and a leak is visible as a
 * leftover element.
 *
 * The chains, in words:
 * - both filter chains first drop, from a sandbox, every IPv6 packet (guests have no IPv6
 *   address of ours) and every IPv4 packet whose (veth, source) is not in `sources`. On
 *   input only, `hostOnlySources` are also let through (the Firecracker template address
 *   that a snapshot clone answers from while the host rotates its keys): the host's own
 *   connections are all they can be part of.
 * - input (to the host's own addresses, any of them, on any port, the orchestrator's
 *   included): from a sandbox only replies to connections the host opened (the SSH
 *   connection to the guest) pass; everything new is dropped.
 * - forward: nothing new enters a sandbox from anywhere (another sandbox, the LAN); what
 *   leaves one is dropped if it is IPv6, goes to a private range, to the sandbox subnet or to
 *   one of the host's own networks (`host4`: its addresses and connected subnets whatever
 *   their range, host-networks.ts, kept current by each policy check), and else passes only
 *   for sessions with egress.
 * - postrouting (nat): egress sessions are masqueraded behind the host's address.
 * Drops are silent (no reject): a probing guest learns nothing, and waits for its timeout.
 * Priority filter - 10 runs our chains before the usual filter chains; an accept here does
 * not override a drop elsewhere (an `iptables -P FORWARD DROP`, e.g. Docker's, still blocks
 * egress, by design of netfilter).
 */
export interface RulesetOptions {
  table: string;
  /** The resource prefix (e.g. "sbx-"): every interface named with it is a sandbox's. */
  interfacePrefix: string;
  /** The sandbox subnet (SBX_SUBNET): never reachable from a sandbox, whatever its range. */
  sandboxSubnet: string;
  /** Sources let through to the host (input only) from any sandbox veth; see above. */
  hostOnlySources?: readonly string[];
  /** Elements of the per-session sets, when a table is put back with its sessions in it. */
  entries?: PolicyEntries;
  /** The host's own networks not covered by the fixed ranges (host-networks.ts blockedHostNetworks). */
  hostNetworks?: readonly string[];
}

/** The per-session elements of the table. */
export interface PolicyEntries {
  /** Every admitted sandbox: its veth and its own address. */
  sources: readonly EgressEntry[];
  /** The sandboxes allowed out. */
  egress: readonly EgressEntry[];
}

export const POLICY_FAMILY = 'inet';
export const EGRESS_SET = 'egress';
export const SOURCES_SET = 'sources';
/** The host's own networks (an interval set, refreshed by renderHostNetworks). */
export const HOST_NETWORKS_SET = 'host4';

const NAME = /^[a-z0-9-]{1,15}$/; // ifnames and table names we make (see ResourceNames)
const IPV4 = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/;
const CIDR4 = /^(\d{1,3}\.){3}\d{1,3}\/\d{1,2}$/;

/** Values reach nft as text: only the shapes we generate ourselves are let through. */
function checked(value: string, shape: RegExp, what: string): string {
  if (!shape.test(value)) throw new Error(`network policy: not a valid ${what}: "${value}"`);
  return value;
}

/**
 * The whole table, replacing any earlier one in the same transaction (`table` then `delete
 * table` makes the delete safe when there was none): stale sessions' elements go with it.
 */
export function renderPolicyTable(opts: RulesetOptions): string {
  const t = checked(opts.table, /^[a-z][a-z0-9_-]{0,30}$/, 'table name');
  const blocked = [...BLOCKED_IPV4_RANGES, checked(opts.sandboxSubnet, CIDR4, 'subnet')].join(', ');
  const sandbox = `"${checked(opts.interfacePrefix, /^[a-z]{3}-$/, 'resource prefix')}*"`;
  const hostOnly = (opts.hostOnlySources ?? []).map((a) => checked(a, IPV4, 'IPv4 address'));
  const hostOnlyClause = hostOnly.length > 0 ? ` ip saddr != { ${hostOnly.join(', ')} }` : '';
  return `table ${POLICY_FAMILY} ${t} {}
delete table ${POLICY_FAMILY} ${t}
table ${POLICY_FAMILY} ${t} {
  set ${SOURCES_SET} { type ifname . ipv4_addr;${elementsOf(opts.entries?.sources)} }
  set ${EGRESS_SET} { type ifname . ipv4_addr;${elementsOf(opts.entries?.egress)} }
  set blocked4 { type ipv4_addr; flags interval; auto-merge; elements = { ${blocked} } }
  set ${HOST_NETWORKS_SET} { type ipv4_addr; flags interval;${hostElements(opts.hostNetworks ?? [])} }

  chain input {
    type filter hook input priority filter - 10; policy accept;
    iifname != ${sandbox} return
    meta nfproto != ipv4 counter drop comment "IPv6 from a sandbox"
    iifname . ip saddr != @${SOURCES_SET}${hostOnlyClause} counter drop comment "source address not the sandbox's own"
    ct state established,related accept
    counter drop comment "new connection from a sandbox to the host"
  }

  chain forward {
    type filter hook forward priority filter - 10; policy accept;
    iifname ${sandbox} meta nfproto != ipv4 counter drop comment "IPv6 from a sandbox"
    iifname ${sandbox} iifname . ip saddr != @${SOURCES_SET} counter drop comment "source address not the sandbox's own"
    oifname ${sandbox} ct state established,related accept
    oifname ${sandbox} counter drop comment "new connection into a sandbox"
    iifname != ${sandbox} return
    ct state established,related accept
    ip daddr @blocked4 counter drop comment "private range or sandbox subnet"
    ip daddr @${HOST_NETWORKS_SET} counter drop comment "the host's own address or connected subnet"
    iifname . ip saddr @${EGRESS_SET} accept
    counter drop comment "sandbox without egress"
  }

  chain postrouting {
    type nat hook postrouting priority srcnat; policy accept;
    iifname . ip saddr @${EGRESS_SET} masquerade
  }
}
`;
}

function hostElements(networks: readonly string[]): string {
  return networks.length > 0 ? ` elements = { ${networks.map((n) => checked(n, CIDR4, 'host network')).join(', ')} };` : '';
}

/** Replaces the host's networks in the table, in one transaction (never a moment without them). */
export function renderHostNetworks(table: string, networks: readonly string[]): string {
  const t = checked(table, /^[a-z][a-z0-9_-]{0,30}$/, 'table name');
  const add =
    networks.length > 0
      ? `add element ${POLICY_FAMILY} ${t} ${HOST_NETWORKS_SET} { ${networks.map((n) => checked(n, CIDR4, 'host network')).join(', ')} }\n`
      : '';
  return `flush set ${POLICY_FAMILY} ${t} ${HOST_NETWORKS_SET}\n${add}`;
}

export function renderDeleteTable(table: string, family = POLICY_FAMILY): string {
  const t = checked(table, /^[A-Za-z0-9_-]{1,64}$/, 'table name');
  const f = checked(family, /^(ip|ip6|inet|arp|bridge|netdev)$/, 'table family');
  return `table ${f} ${t} {}\ndelete table ${f} ${t}\n`;
}

/** A session allowed out: its host veth and its guest address. */
export interface EgressEntry {
  hostInterface: string;
  guestAddress: string;
}

/** One element of a per-session set, checked: `"<veth>" . <address>`. */
function elementText(e: EgressEntry): string {
  return `"${checked(e.hostInterface, NAME, 'interface name')}" . ${checked(e.guestAddress, IPV4, 'IPv4 address')}`;
}

function elementsOf(entries: readonly EgressEntry[] | undefined): string {
  return entries && entries.length > 0 ? ` elements = { ${entries.map(elementText).join(', ')} };` : '';
}

function setElement(table: string, set: string, e: EgressEntry): string {
  const t = checked(table, /^[a-z][a-z0-9_-]{0,30}$/, 'table name');
  return `element ${POLICY_FAMILY} ${t} ${set} { ${elementText(e)} }`;
}

function egressElement(table: string, e: EgressEntry): string {
  return setElement(table, EGRESS_SET, e);
}

/** Allows a session out: one set update. */
export function renderAddEgress(table: string, e: EgressEntry): string {
  return `add ${egressElement(table, e)}\n`;
}

/** A sandbox's own (veth, address): the one source its packets may carry. */
export function renderAddSource(table: string, e: EgressEntry): string {
  return `add ${setElement(table, SOURCES_SET, e)}\n`;
}

/** Withdraws it, idempotently (see renderRemoveEgress). */
export function renderRemoveSource(table: string, e: EgressEntry): string {
  const line = setElement(table, SOURCES_SET, e);
  return `add ${line}\ndelete ${line}\n`;
}

/**
 * Withdraws it. The element is added, then deleted, in one transaction: nft 1.0.6 has no
 * `destroy element`, and `add` of an existing element is a no-op, so this removes what is
 * there and succeeds when it was gone already (destroy is idempotent).
 */
export function renderRemoveEgress(table: string, e: EgressEntry): string {
  const line = egressElement(table, e);
  return `add ${line}\ndelete ${line}\n`;
}
