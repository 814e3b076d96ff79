import { readFile } from 'node:fs/promises';
import os from 'node:os';
import { BLOCKED_IPV4_RANGES } from './ranges.js';

/**
 * The host's own IPv4 networks, which a sandbox with egress must not reach whatever their
 * range: every address of the host's interfaces, every subnet those addresses are on, and
 * every connected route (on-link, no gateway) of the main table (a point-to-point peer's too).
 * BLOCKED_IPV4_RANGES covers the private ranges; a host whose LAN is public address space
 * (a university, a cloud with public subnets, a lab on 198.18/15's neighbours) needs these.
 * Routes through a gateway are the way out, not the host's own LAN, and are left alone; the
 * default route is never one of these.
 *
 * Read in-process each time the policy is checked (policy-guard.ts, every few seconds and
 * before every create), so an address or route added on the host is fenced before the next
 * create and within one check interval for sandboxes already running: the addresses from
 * os.networkInterfaces(), the routes from /proc/net/route (the main table). Two `ip -j` runs
 * did it before, 12 ms of the orchestrator's CPU and 23 ms on a create's path each time.
 * os.networkInterfaces() skips an interface that is down or has no carrier: its subnet's
 * route stays in the main table (read here), and a host address itself is reached through
 * the input chain, where every new connection from a sandbox is dropped anyway.
 */

/** What os.networkInterfaces() gives of an address (NetworkInterfaceInfo, trimmed). */
export interface InterfaceAddress {
  family: string;
  address: string;
  cidr: string | null;
}

/** /proc/net/route's flags (linux/route.h): through a gateway; an unreachable or prohibit route. */
const RTF_GATEWAY = 0x2;
const RTF_REJECT = 0x200;

/** Reads the host's networks (not yet filtered: see blockedHostNetworks). */
export async function readHostNetworks(): Promise<string[]> {
  const interfaces = Object.values(os.networkInterfaces()).flatMap((addresses) => addresses ?? []);
  return hostNetworksFrom(interfaces, await readFile('/proc/net/route', 'utf8'));
}

/**
 * The networks in the host's interface addresses and its main routing table (the text of
 * /proc/net/route), as canonical CIDRs: every IPv4 address and its subnet, every route on-link
 * (no gateway; not the default, not unreachable or prohibit). A blackhole route reads as
 * on-link there: fencing it off is harmless, it goes nowhere.
 */
export function hostNetworksFrom(addresses: readonly InterfaceAddress[], procNetRoute: string): string[] {
  const found: string[] = [];
  for (const info of addresses) {
    if (info.family !== 'IPv4') continue;
    found.push(`${info.address}/32`);
    if (info.cidr) found.push(info.cidr);
  }
  for (const line of procNetRoute.split('\n').slice(1)) {
    // Iface Destination Gateway Flags RefCnt Use Metric Mask ...: addresses in hex, host byte order.
    const [, destination, , flags, , , , mask] = line.trim().split(/\s+/);
    if (mask === undefined || flags === undefined || destination === undefined) continue;
    if ((Number.parseInt(flags, 16) & (RTF_GATEWAY | RTF_REJECT)) !== 0) continue;
    const address = littleEndianHexIPv4(destination);
    if (address === undefined || !/^[0-9A-Fa-f]{8}$/.test(mask)) continue;
    const len = [...Number.parseInt(mask, 16).toString(2)].filter((bit) => bit === '1').length;
    if (len > 0) found.push(`${address}/${len}`);
  }
  return found.map(canonical).filter((cidr): cidr is string => cidr !== undefined);
}

/** "0102A8C0" (192.168.2.1 as the kernel prints it on a little-endian host: x86-64, arm64) -> "192.168.2.1". */
function littleEndianHexIPv4(hex: string): string | undefined {
  if (!/^[0-9A-Fa-f]{8}$/.test(hex)) return undefined;
  const value = Number.parseInt(hex, 16);
  return [0, 8, 16, 24].map((shift) => (value >>> shift) & 0xff).join('.');
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
