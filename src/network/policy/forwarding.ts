import { readFile, writeFile } from 'node:fs/promises';
import type { Logger } from 'pino';

const IPV4_FORWARD = '/proc/sys/net/ipv4/ip_forward';

/**
 * Egress needs the host to forward IPv4. It is switched on the first time a session asks
 * for egress, never before (a host that runs no egress session keeps forwarding off), and
 * never switched back off: another orchestrator on this host (another prefix) or other
 * software may have come to rely on it meanwhile, and turning it off under them would cut
 * their traffic. It is safe to leave on for our sandboxes because our forward chain drops
 * everything from them that is not allowed egress, and everything new towards them.
 * (Per-interface forwarding is no way around the global switch: IPv4 checks the flag of
 * the interface a packet arrives on, so the replies would need it on the uplink too.)
 * Returns true if this call turned it on.
 */
export async function ensureIpv4Forwarding(log: Logger): Promise<boolean> {
  const current = (await readFile(IPV4_FORWARD, 'utf8')).trim();
  if (current === '1') return false;
  await writeFile(IPV4_FORWARD, '1\n');
  log.warn(
    { sysctl: 'net.ipv4.ip_forward', from: current, to: 1 },
    'enabled IPv4 forwarding for a session with internet egress; it stays on (the sandbox policy drops all other forwarded sandbox traffic)',
  );
  return true;
}
