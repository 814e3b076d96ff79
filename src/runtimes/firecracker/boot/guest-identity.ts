/**
 * Per-guest identifiers derived from the session's address lease, so that they are unique
 * on the host for as long as the lease is, and can be recomputed from the stored lease
 * after an orchestrator restart instead of being stored apart.
 */

/**
 * The guest NIC's MAC address: `06:00:` and the four octets of its IPv4 address, in hex
 * (10.241.0.2 -> 06:00:0a:f1:00:02). 0x06 sets the "locally administered" bit and clears
 * the multicast bit, so it can never clash with a vendor-assigned address; and a MAC that
 * spells the address makes a packet capture readable at a glance.
 */
export function macFromIPv4(address: string): string {
  const octets = address.split('.');
  if (octets.length !== 4 || !octets.every((o) => /^(0|[1-9]\d{0,2})$/.test(o) && Number(o) <= 255)) {
    throw new Error(`not an IPv4 address: "${address}"`);
  }
  return ['06', '00', ...octets.map((o) => Number(o).toString(16).padStart(2, '0'))].join(':');
}

/** CIDs 0-2 are reserved (hypervisor, local, host); -1 (0xffffffff) means "any". */
const FIRST_GUEST_CID = 3;
const LAST_GUEST_CID = 0xffff_fffe;

/**
 * The vsock context id of the guest with this lease index. Firecracker's vsock is carried
 * over a Unix socket per VM, so CIDs need not be unique host-wide as with vhost-vsock; they
 * are anyway, so that logs and a future vhost-based transport can tell guests apart.
 */
export function guestCidForLease(leaseIndex: number): number {
  const cid = FIRST_GUEST_CID + leaseIndex;
  if (!Number.isInteger(leaseIndex) || leaseIndex < 0 || cid > LAST_GUEST_CID) {
    throw new Error(`lease index ${leaseIndex} gives no valid vsock CID`);
  }
  return cid;
}
