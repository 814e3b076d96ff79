/**
 * IPv4 destinations a sandbox may never reach, even with egress on: everything that is not
 * the public internet. A guest that could reach these could probe the host's LAN, a cloud
 * metadata service (169.254.169.254), a carrier-grade NAT peer, or another sandbox, and
 * none of that is "internet egress". The sandbox subnet itself is added by the ruleset
 * (SBX_SUBNET may be configured outside 10/8).
 *
 * Not listed on purpose: the TEST-NET documentation ranges (192.0.2.0/24, 198.51.100.0/24,
 * 203.0.113.0/24). Nothing real is routed there, and the tests use them as "the internet"
 * inside namespaces they make, so that no test packet can ever leave the host. Whatever the
 * range, the host's own networks are blocked as well (host-networks.ts): a host whose LAN is
 * one of these (or any public range) is fenced all the same.
 *
 * IPv6 needs no list: guests have no routable IPv6 address, so the forward chain drops every
 * IPv6 packet from a sandbox, and the input chain drops new ones (link-local included).
 */
export const BLOCKED_IPV4_RANGES: readonly string[] = [
  '0.0.0.0/8', // "this network"
  '10.0.0.0/8', // private (RFC 1918), and the default sandbox subnet
  '100.64.0.0/10', // carrier-grade NAT shared space (RFC 6598)
  '127.0.0.0/8', // loopback
  '169.254.0.0/16', // link-local: cloud metadata services live here
  '172.16.0.0/12', // private (RFC 1918)
  '192.0.0.0/24', // IETF protocol assignments
  '192.168.0.0/16', // private (RFC 1918)
  '198.18.0.0/15', // benchmarking (RFC 2544): used for lab networks
  '224.0.0.0/3', // multicast (224/4), reserved (240/4) and limited broadcast
];
