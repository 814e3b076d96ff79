import { link, lstat, rm } from 'node:fs/promises';
import path from 'node:path';
import { GUEST_SSH_PORT } from '../../guest/contract.js';
import type { ResourceNames } from '../../network/names.js';
import { deleteNetns, type AttachedNetwork, type SandboxNetwork } from '../../network/netns.js';
import type { HybridVsockEndpoint } from '../../transport/index.js';
import type { CleanupStack } from '../../util/cleanup-stack.js';
import { run } from '../../util/exec.js';

/**
 * Firecracker sessions over hybrid vsock (docs/transport.md): the host dials the VM's vsock
 * socket and asks for port 22, where sandbox-init's listener runs sshd per connection.
 */

/** The name of the session dir's link to the VM's vsock socket (and, unjailed, the socket itself). */
export const SESSION_VSOCK_SOCKET = 'vsock.sock';

export function vsockEndpoint(socketPath: string): HybridVsockEndpoint {
  return { transport: 'hybrid-vsock', path: socketPath, port: GUEST_SSH_PORT };
}

/**
 * A VM's NIC (a TAP in the session's netns), or undefined for a VM without one, which is
 * reached over vsock only. A snapshot clone has the devices of its snapshot base: a NIC for a
 * `tcp` one, none for a `vsock` one (the runtime restores only the clones that match).
 */
export function vmNic(network: SandboxNetwork, vsock: boolean, snapshotBase?: 'tcp' | 'vsock'): (AttachedNetwork & { tapInterface: string }) | undefined {
  const nic = network.attachment === 'none' ? undefined : network;
  if (nic && !nic.tapInterface) throw new Error(`the firecracker runtime needs a TAP device in ${nic.netns} (networkAttachment 'tap')`);
  if (!nic && !vsock) throw new Error('a Firecracker VM without a NIC is reached over vsock only: SBX_TRANSPORT=vsock');
  if (snapshotBase && (snapshotBase === 'vsock') !== !nic) throw new Error('a snapshot clone has the NIC its snapshot base had, or none');
  return nic && { ...nic, tapInterface: nic.tapInterface as string };
}

/**
 * A network namespace with nothing but lo, for the VMM of a VM without a NIC: Firecracker
 * opens no TAP, and a VMM that got past its seccomp filter finds no network of the host.
 * It has the session's netns name, so start-up reconciliation removes one a crash left.
 */
export async function isolatedNetns(names: ResourceNames, sessionId: string, cleanup: CleanupStack): Promise<string> {
  const netns = names.netns(sessionId);
  await run(['ip', 'netns', 'add', netns]);
  await cleanup.push(`netns ${netns}`, () => deleteNetns(netns));
  return netns;
}

/**
 * The path the host dials for a jailed VM: a hard link, in the root-only session dir, to the
 * socket Firecracker bound in its chroot. The chroot's /run is the jail's: a VMM that went
 * wrong could put a symbolic link to another socket of the host there, which a connect
 * would follow; link(2) does not follow it, and the link is checked to be a socket. On
 * another filesystem than the session dir (no hard link), the chroot's path is used as it is.
 */
export async function linkVsockSocket(jailSocket: string, sessionDir: string, cleanup: CleanupStack): Promise<string> {
  const linked = path.join(sessionDir, SESSION_VSOCK_SOCKET);
  await rm(linked, { force: true });
  try {
    await link(jailSocket, linked);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EXDEV') return jailSocket;
    throw new Error(`the VM's vsock socket ${jailSocket}: ${(err as Error).message}`);
  }
  await cleanup.push(`vsock link ${linked}`, () => rm(linked, { force: true }));
  if (!(await lstat(linked)).isSocket()) throw new Error(`the VM's vsock path ${jailSocket} is not a socket`);
  return linked;
}

/** The vsock endpoint of a VM an earlier run started, if the link to its socket (or the jail's socket) is there. */
export async function foundVsockEndpoint(sessionDir: string, jailSocket: string): Promise<HybridVsockEndpoint | undefined> {
  for (const candidate of [path.join(sessionDir, SESSION_VSOCK_SOCKET), jailSocket]) {
    const isSocket = await lstat(candidate).then(
      (s) => s.isSocket(),
      () => false,
    );
    if (isSocket) return vsockEndpoint(candidate);
  }
  return undefined;
}
