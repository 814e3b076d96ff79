import { access } from 'node:fs/promises';
import { run } from '../util/exec.js';
import type { CleanupStack } from '../util/cleanup-stack.js';
import type { AddressLease } from './address-pool.js';
import type { ResourceNames } from './names.js';

/**
 * How the guest joins its netns:
 * - 'veth': the veth's netns end is the guest's own eth0 (a container shares the netns).
 * - 'tap': the netns holds a bridge joining the veth's end and a TAP device, with no
 *   address of its own; a VM process in the netns opens the TAP, and the VM's eth0 holds
 *   the guest address (configured by the guest itself from its config drive).
 * Either way the host reaches the guest at the same address through the same host veth.
 */
export type NetworkAttachment = 'veth' | 'tap';

/** Interface names inside the netns. They need no prefix: they vanish with the netns. */
export const NETNS_UPLINK = 'eth0';
export const NETNS_BRIDGE = 'br0';
export const NETNS_TAP = 'tap0';

/**
 * A sandbox's network: its own namespace linked to the host by a veth pair (AttachedNetwork),
 * or nothing but `lo` (IsolatedNetwork: no egress, and a control channel that needs no
 * network, such as a container's Unix socket; see docs/transport.md).
 */
export type SandboxNetwork = AttachedNetwork | IsolatedNetwork;

export interface AttachedNetwork {
  netns: string;
  /** Path a runtime joins: /var/run/netns/<name> */
  netnsPath: string;
  hostInterface: string;
  lease: AddressLease;
  attachment: NetworkAttachment;
  /** With the 'tap' attachment: the TAP device inside the netns for the VM to open. */
  tapInterface?: string;
}

/**
 * No interface but `lo`: no veth, no address, nothing of the host's network reachable. The
 * runtime gives the sandbox a new network namespace of its own (a container's is then owned
 * by its user namespace, which `runc exec` needs: control-socket.ts).
 */
export interface IsolatedNetwork {
  attachment: 'none';
}

/** The network of a runtime that cannot run without a NIC (the VMs reach their guest over it). */
export function attachedNetwork(network: SandboxNetwork): AttachedNetwork {
  if (network.attachment === 'none') throw new Error('this runtime needs a network interface, and the sandbox was given none');
  return network;
}

const IP = 'ip';

/**
 * Who may open the TAP without CAP_NET_ADMIN. A VMM that has dropped root (the jailed
 * Firecracker) can attach to a persistent TAP only if it owns it: the kernel refuses
 * TUNSETIFF to anyone else.
 */
export interface TapOwner {
  uid: number;
  gid: number;
}

/**
 * Creates the sandbox's netns and a veth pair whose netns end is `eth0`, and a default route
 * via the host end. With the 'veth' attachment that eth0 holds the guest's address; with
 * 'tap' it is bridged with a TAP device for a VM (see NetworkAttachment). The releases are
 * pushed as each piece is made, so a failure half-way leaves nothing behind.
 */
export async function createSandboxNetwork(
  names: ResourceNames,
  sessionId: string,
  lease: AddressLease,
  cleanup: CleanupStack,
  attachment: NetworkAttachment = 'veth',
  tapOwner?: TapOwner,
): Promise<AttachedNetwork> {
  const netns = names.netns(sessionId);
  const host = names.hostVeth(sessionId);
  await run([IP, 'netns', 'add', netns]);
  await cleanup.push(`netns ${netns}`, () => deleteNetns(netns));
  await run([IP, 'link', 'add', host, 'type', 'veth', 'peer', 'name', NETNS_UPLINK, 'netns', netns]);
  await cleanup.push(`veth ${host}`, () => deleteLink(host));
  // `ip -batch` runs many steps in one process, reading them from stdin (no shell): one
  // batch for the host's end, one inside the namespace.
  await run([IP, '-batch', '-'], {
    input: [`addr add ${lease.gateway}/${lease.prefixLength} dev ${host}`, `link set ${host} up`].join('\n') + '\n',
  });
  const network: AttachedNetwork = { netns, netnsPath: `/var/run/netns/${netns}`, hostInterface: host, lease, attachment };
  if (attachment === 'tap') {
    // The TAP and the bridge live inside the netns and go with it; their release is pushed
    // anyway, so that a destroy frees them in order and says so if it cannot.
    await cleanup.push(`tap ${NETNS_TAP} and bridge ${NETNS_BRIDGE} in ${netns}`, () => deleteTapBridge(netns));
    await run([IP, '-n', netns, '-batch', '-'], { input: tapBridgeCommands(tapOwner).join('\n') + '\n' });
    return { ...network, tapInterface: NETNS_TAP };
  }
  await run([IP, '-n', netns, '-batch', '-'], { input: guestUplinkCommands(lease).join('\n') + '\n' });
  return network;
}

/** `ip -batch` lines (run inside the netns) that make eth0 the guest's: its address, up, the default route. */
function guestUplinkCommands(lease: GuestLink['lease']): string[] {
  return [
    'link set lo up',
    `addr add ${lease.guest}/${lease.prefixLength} dev ${NETNS_UPLINK}`,
    `link set ${NETNS_UPLINK} up`,
    `route add default via ${lease.gateway}`,
    ...quickAckRoutes([
      ['127.0.0.1', 'lo'],
      [lease.guest, NETNS_UPLINK],
    ]),
  ];
}

/** What eth0's configuration needs: the netns that holds it, the guest's address and its gateway. */
export interface GuestLink {
  netns: string;
  lease: Pick<AddressLease, 'guest' | 'gateway' | 'prefixLength'>;
}

/**
 * Hands the sandbox's eth0, and its netns name, to the network namespace of process `pid`: a
 * container's init, whose user namespace owns that namespace (CRIU checkpoints a container
 * only if its user namespace owns every namespace it is in: docs/pause.md). eth0 is moved out
 * of the namespace the host made, that namespace goes (nothing else was in it), the name is
 * bound to the new one, and eth0 is configured there again (a move drops its addresses).
 */
export async function moveIntoNetnsOf(network: GuestLink, pid: number): Promise<void> {
  const { netns } = network;
  await run([IP, '-n', netns, 'link', 'set', NETNS_UPLINK, 'netns', String(pid)]);
  await run([IP, '-batch', '-'], { input: `netns delete ${netns}\nnetns attach ${netns} ${pid}\n` });
  await run([IP, '-n', netns, '-batch', '-'], { input: guestUplinkCommands(network.lease).join('\n') + '\n' });
}

/**
 * `ip -batch` lines that make the guest's connections to its own addresses acknowledge at
 * once. sshd's connection to a guest server for a guest port is one of them, kept alive
 * (src/ports/channel-pool.ts): a server that writes an answer's head and body apart without
 * TCP_NODELAY (Python's http.server) otherwise waits for a delayed ACK, 40 ms a request. The
 * kernel made these local routes with the addresses; only `quickack` is added. (A VM's guest
 * does the same for itself: sandbox-init's configure_network.)
 */
export function quickAckRoutes(addresses: Array<[address: string, device: string]>): string[] {
  return addresses.map(([address, device]) => `route change local ${address} dev ${device} table local proto kernel scope host src ${address} quickack 1`);
}

/**
 * `ip -batch` lines (run inside the netns) for the 'tap' attachment: a bridge joining the
 * veth end and a persistent TAP. No address here: the netns only forwards frames, the VM's
 * own eth0 is the guest. forward_delay 0, so the ports forward at once (STP is off anyway).
 */
export function tapBridgeCommands(owner?: TapOwner): string[] {
  const ownedBy = owner ? ` user ${owner.uid} group ${owner.gid}` : '';
  return [
    'link set lo up',
    `link add ${NETNS_BRIDGE} type bridge forward_delay 0`,
    `tuntap add dev ${NETNS_TAP} mode tap${ownedBy}`,
    `link set ${NETNS_UPLINK} master ${NETNS_BRIDGE}`,
    `link set ${NETNS_TAP} master ${NETNS_BRIDGE}`,
    `link set ${NETNS_UPLINK} up`,
    `link set ${NETNS_TAP} up`,
    `link set ${NETNS_BRIDGE} up`,
  ];
}

/** Removes the TAP and the bridge of a netns; missing ones (or a missing netns) are fine. */
export async function deleteTapBridge(netns: string): Promise<void> {
  for (const link of [NETNS_TAP, NETNS_BRIDGE]) {
    const res = await run([IP, '-n', netns, 'link', 'delete', link], { allowFailure: true });
    if (res.exitCode !== 0 && !/Cannot find device|does not exist|No such file|Invalid argument|Cannot open network namespace/i.test(res.stderr)) {
      throw new Error(`ip -n ${netns} link delete ${link}: ${res.stderr.trim()}`);
    }
  }
}

/** Whether the named netns is there (a host reboot takes them all). */
export function netnsExists(netns: string): Promise<boolean> {
  return access(`/var/run/netns/${netns}`).then(
    () => true,
    () => false,
  );
}

export async function deleteNetns(netns: string): Promise<void> {
  const res = await run([IP, 'netns', 'delete', netns], { allowFailure: true });
  if (res.exitCode !== 0 && !/No such file|not found|does not exist/i.test(res.stderr)) {
    throw new Error(`ip netns delete ${netns}: ${res.stderr.trim()}`);
  }
}

export async function deleteLink(name: string): Promise<void> {
  const res = await run([IP, 'link', 'delete', name], { allowFailure: true });
  if (res.exitCode !== 0 && !/Cannot find device|does not exist/i.test(res.stderr)) {
    throw new Error(`ip link delete ${name}: ${res.stderr.trim()}`);
  }
}

/** Session ids of every netns of ours on the host. */
export async function listSandboxNetns(names: ResourceNames): Promise<string[]> {
  const { stdout } = await run([IP, 'netns', 'list']);
  return stdout
    .split('\n')
    .map((line) => line.split(' ')[0] ?? '')
    .map((name) => names.sessionIdOf(name))
    .filter((id): id is string => id !== undefined);
}

/** Session ids of every host-side veth of ours. */
export async function listSandboxLinks(names: ResourceNames): Promise<string[]> {
  const { stdout } = await run([IP, '-o', 'link', 'show']);
  const ids: string[] = [];
  for (const line of stdout.split('\n')) {
    // "12: sbx-abc@if2: <BROADCAST,...>": the name ends at '@' or ':'
    const name = /^\d+:\s+([^:@\s]+)/.exec(line)?.[1];
    const id = name && names.sessionIdOf(name);
    if (id) ids.push(id);
  }
  return ids;
}

/** The guest address of a live sandbox, read back from its host veth (.1 there, .2 the guest). */
export async function guestAddressOf(names: ResourceNames, sessionId: string): Promise<string> {
  const { stdout } = await run([IP, '-o', '-4', 'addr', 'show', 'dev', names.hostVeth(sessionId)]);
  const match = /inet (\d+\.\d+\.\d+)\.(\d+)\//.exec(stdout);
  if (!match) throw new Error(`no address on ${names.hostVeth(sessionId)}`);
  return `${match[1]}.${Number(match[2]) + 1}`;
}
