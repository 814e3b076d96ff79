import { run } from '../../util/exec.js';
import { BLOCKED_IPV4_RANGES } from './ranges.js';

/**
 * The host's own IPv4 networks, which a sandbox with egress must not reach whatever their
 * range: every address of the host's interfaces (and a point-to-point peer), every subnet
 * those addresses are on, and every connected route (on-link, no gateway) of the main table.
 * BLOCKED_IPV4_RANGES covers the private ranges; a host whose LAN is public address space
 * (a university, a cloud with public subnets, a lab on 198.18/15's neighbours) needs these.
 * Routes through a gateway are the way out, not the host's own LAN, and are left alone; the
 * default route is never one of these.
 *
 * Read with `ip -j` (iproute2's JSON) each time the policy is checked (policy-guard.ts), so an
 * address or route added on the host is fenced before the next create and within one check
 * interval for sandboxes already running.
 */

interface IpAddrJson {
  ifname?: string;
  addr_info?: Array<{ family?: string; local?: string; address?: string; prefixlen?: number }>;
}
interface IpRouteJson {
  dst?: string;
  gateway?: string;
  type?: string;
  nexthops?: unknown[];
}

/** Reads the host's networks (not yet filtered: see blockedHostNetworks). */
export async function readHostNetworks(): Promise<string[]> {
  const [addresses, routes] = await Promise.all([
    run(['ip', '-j', '-4', 'addr', 'show'], { timeoutMs: 10_000 }),
    run(['ip', '-j', '-4', 'route', 'show', 'table', 'main'], { timeoutMs: 10_000 }),
  ]);
  return hostNetworksFrom(JSON.parse(addresses.stdout || '[]') as IpAddrJson[], JSON.parse(routes.stdout || '[]') as IpRouteJson[]);
}

/** The networks in `ip -j -4 addr` and `ip -j -4 route` output, as canonical CIDRs. */
export function hostNetworksFrom(addresses: readonly IpAddrJson[], routes: readonly IpRouteJson[]): string[] {
  const found: string[] = [];
  for (const link of addresses) {
    for (const info of link.addr_info ?? []) {
      if (info.family !== 'inet' || !info.local) continue;
      found.push(`${info.local}/32`);
      // A point-to-point address names its peer; the prefix is then the peer's network.
      if (info.address && info.address !== info.local) found.push(`${info.address}/32`);
      if (info.prefixlen !== undefined && info.prefixlen > 0) found.push(`${info.address ?? info.local}/${info.prefixlen}`);
    }
  }
  for (const route of routes) {
    // unicast only (type is absent for it): blackhole, unreachable and the like go nowhere.
    if (!route.dst || route.dst === 'default' || route.type !== undefined || route.gateway || route.nexthops) continue;
    found.push(route.dst.includes('/') ? route.dst : `${route.dst}/32`);
  }
  return found.map(canonical).filter((cidr): cidr is string => cidr !== undefined);
}

/**
 * What the policy must add for `networks`: the ones no fixed range (BLOCKED_IPV4_RANGES, the
 * sandbox subnet) covers already, without any inside another (nft's interval set refuses
 * overlaps), sorted. On a host whose networks are all private this is empty.
 */
export function blockedHostNetworks(networks: readonly string[], sandboxSubnet: string): string[] {
  const fixed = [...BLOCKED_IPV4_RANGES, sandboxSubnet].map(parse).filter((n): n is Net => n !== undefined);
  const kept: Net[] = [];
  const candidates = networks
    .map(parse)
    .filter((n): n is Net => n !== undefined)
    .sort((a, b) => a.len - b.len || a.base - b.base);
  for (const net of candidates) {
    if (net.len === 0) continue; // "every address": only a default route looks like that
    if (fixed.some((f) => contains(f, net)) || kept.some((k) => contains(k, net))) continue;
    kept.push(net);
  }
  return kept.sort((a, b) => a.base - b.base || a.len - b.len).map(format);
}

interface Net {
  base: number;
  len: number;
}

function parse(cidr: string): Net | undefined {
  const match = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\/(\d{1,2})$/.exec(cidr);
  if (!match) return undefined;
  const octets = match.slice(1, 5).map(Number);
  const len = Number(match[5]);
  if (octets.some((o) => o > 255) || len > 32) return undefined;
  const address = octets.reduce((acc, o) => acc * 256 + o, 0);
  return { base: address - (address % 2 ** (32 - len)), len };
}

function format(net: Net): string {
  const octets = [24, 16, 8, 0].map((shift) => Math.floor(net.base / 2 ** shift) % 256);
  return `${octets.join('.')}/${net.len}`;
}

function canonical(cidr: string): string | undefined {
  const net = parse(cidr);
  return net && format(net);
}

function contains(outer: Net, inner: Net): boolean {
  return outer.len <= inner.len && inner.base - (inner.base % 2 ** (32 - outer.len)) === outer.base;
}

/** How nft's JSON lists an element of an interval set we filled with `cidr` (table-shape.ts elementKey). */
export function hostElementKey(cidr: string): string {
  const [addr, len] = cidr.split('/');
  return len === '32' ? JSON.stringify(addr) : JSON.stringify({ prefix: { addr, len: Number(len) } });
}
