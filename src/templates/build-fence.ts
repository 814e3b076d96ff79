import { applyNft } from '../network/policy/nft.js';
import { BLOCKED_IPV4_RANGES } from '../network/policy/ranges.js';

/**
 * The network fence of a template build's package downloads (build-container.ts): an
 * nftables table on the host's output hook for packets of sockets owned by a build uid.
 *
 * In order: whatever goes to a sandbox subnet (the orchestrator's, SBX_SUBNET, handed in by
 * the entry point) is dropped, first, so that not even a DNS packet reaches another tenant's
 * guest; then DNS goes anywhere (the host's resolver may be local or on a private network);
 * then whatever goes to a local address (`fib daddr type local`: loopback and every address
 * of the host) is dropped, and whatever goes to a range that is not the internet (ranges.ts,
 * as for a sandbox with egress: private networks, link-local with the cloud's metadata
 * service, CGNAT; IPv6 unique local, link-local, multicast). The sandbox subnet needs its own
 * rule: an operator may set it outside those ranges (a public block the host routes to its
 * guests), and a build step could then reach every guest on it.
 *
 * It matches build uids only, so it stays installed; each build replaces it whole, in one
 * transaction (never a moment without it), with the subnets its own configuration names.
 */
export const BUILD_FENCE_TABLE = 'sbx-template-build';

/** IPv6 destinations a build step may not reach: unique local, link-local, multicast. */
const BLOCKED_IPV6_RANGES = ['fc00::/7', 'fe80::/10', 'ff00::/8'];

/** The host uids the fence applies to (every build range). */
export interface BuildUids {
  first: number;
  last: number;
}

/** The fence's nft script: replaces the table in one transaction (`table` first makes the delete safe when there was none). */
export function renderBuildFence(uids: BuildUids, sandboxSubnets: readonly string[]): string {
  if (!Number.isSafeInteger(uids.first) || !Number.isSafeInteger(uids.last) || uids.first < 1 || uids.last < uids.first)
    throw new Error(`build fence: not a uid range: ${uids.first}-${uids.last}`);
  const who = `meta skuid ${uids.first}-${uids.last}`;
  const subnets = [...new Set(sandboxSubnets.map(canonicalSubnet))];
  // A named interval set with auto-merge: the subnets may overlap one another.
  const sandboxes = subnets.length ? ` elements = { ${subnets.join(', ')} }` : '';
  return `table inet ${BUILD_FENCE_TABLE} {}
delete table inet ${BUILD_FENCE_TABLE}
table inet ${BUILD_FENCE_TABLE} {
  set sandboxes4 { type ipv4_addr; flags interval; auto-merge;${sandboxes} }
  chain output {
    type filter hook output priority filter - 10; policy accept;
    ${who} ip daddr @sandboxes4 counter drop comment "a template build step to a sandbox subnet"
    ${who} meta l4proto { tcp, udp } th dport 53 accept
    ${who} fib daddr type local counter drop comment "a template build step to the host itself"
    ${who} ip daddr { ${BLOCKED_IPV4_RANGES.join(', ')} } counter drop comment "a template build step to a network that is not the internet"
    ${who} ip6 daddr { ${BLOCKED_IPV6_RANGES.join(', ')} } counter drop comment "a template build step to a network that is not the internet"
  }
}
`;
}

/** Installs (or replaces) the fence for the build uids; `sandboxSubnets`: the sandbox subnets of this host's orchestrator (SBX_SUBNET). */
export async function fenceHostFromBuilds(uids: BuildUids, sandboxSubnets: readonly string[]): Promise<void> {
  await applyNft(renderBuildFence(uids, sandboxSubnets));
}

/**
 * "a.b.c.d/len" with its host bits cleared (nft's interval sets take prefixes only); anything
 * else is refused: the value becomes nft text.
 */
export function canonicalSubnet(cidr: string): string {
  const match = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\/(\d{1,2})$/.exec(cidr);
  const octets = match ? match.slice(1, 5).map(Number) : [];
  const len = Number(match?.[5]);
  if (!match || octets.some((o) => o > 255) || len < 1 || len > 32) throw new Error(`build fence: not an IPv4 subnet: "${cidr}"`);
  const address = octets.reduce((acc, o) => acc * 256 + o, 0);
  const base = address - (address % 2 ** (32 - len));
  return `${[24, 16, 8, 0].map((shift) => Math.floor(base / 2 ** shift) % 256).join('.')}/${len}`;
}
