import { createHash } from 'node:crypto';
import { GUEST_SSH_PORT } from '../../../guest/contract.js';
import type { AddressLease } from '../../../network/address-pool.js';
import type { SessionKeys } from '../../../transport/ssh-keys.js';
import { run } from '../../../util/exec.js';
import { SerialQueue } from '../../../util/serial-queue.js';
import { GUEST_KEY_PATHS, newMachineId, rotateKeysAfterRestore, type RotationPhase } from '../ssh-keys/key-rotation.js';
import { SshRotationTransport, type SshRotationOptions } from '../ssh-keys/ssh-rotation-transport.js';
import type { HybridVsockEndpoint } from '../../../transport/index.js';

export interface SnapshotBaseAddress {
  guest: string;
  gateway: string;
  prefixLength: 30;
}

/**
 * The address a snapshot base boots with, and so every clone of it wakes up with: a link-local
 * /30 that no lease ever takes. The host reaches a fresh clone there, through the clone's
 * own netns, for as long as the rotation needs; then the clone is on its session's address.
 *
 * Derived from the resource prefix (one of 4096 blocks in 169.254.192.0/18, clear of
 * 169.254.169.254), so that two orchestrators on one host (a test suite beside a dev server)
 * do not claim the same route at the same time.
 */
export function snapshotBaseAddress(prefix: string): SnapshotBaseAddress {
  const block = createHash('sha256').update(prefix).digest().readUInt16BE(0) % 4096;
  const base = (192 << 8) + block * 4; // offset within 169.254.0.0/16
  const octets = (n: number) => `169.254.${Math.floor(n / 256)}.${n % 256}`;
  return { gateway: octets(base + 1), guest: octets(base + 2), prefixLength: 30 };
}

// Every clone answers at the same address, so the host can route to one clone at a time:
// rotations are serialised per host. Each is a few SSH logins (~0.1-0.3 s with KVM).
const rotations = new SerialQueue();

interface RotationKeys {
  snapshotBase: { clientPrivateKey: string; hostPublicKey: string };
  session: SessionKeys;
  /** The session's hostname: the clone gets it and a new machine id (absent: it keeps its snapshot base's, every clone's). */
  hostname?: string;
  /** The clone's own root_authorized_keys line (its rekey key, so that a snapshot of it can be forked); absent: none. */
  rootAuthorizedKeys?: string;
  onPhase?: (phase: RotationPhase) => void;
}

/** A clone with a NIC: reached at its snapshot base's address, then moved to its lease. */
export interface TcpCloneRotation extends RotationKeys {
  /** Where the clone wakes up: its snapshot base's address. */
  at: SnapshotBaseAddress;
  /** The host's end of the clone's veth pair. */
  hostInterface: string;
  lease: AddressLease;
}

/** A clone without a NIC (a snapshot base without one): reached over its own vsock socket throughout. */
export interface VsockCloneRotation extends RotationKeys {
  endpoint: HybridVsockEndpoint;
}

export type CloneRotation = TcpCloneRotation | VsockCloneRotation;

/**
 * Gives a clone fresh from a snapshot its session's keys and address and takes the
 * snapshot base's access away (key-rotation.ts), reaching it at its snapshot base's address by putting the
 * snapshot base's gateway address on the clone's host interface for the duration. Throws a
 * KeyRotationError if anything is not as it must be; the caller then destroys the clone.
 */
export function rotateClone(rotation: CloneRotation): Promise<void> {
  // Each clone's vsock socket is its own: nothing shared, nothing to route, nothing to wait for.
  if ('endpoint' in rotation) return rotateOver({ baseEndpoint: rotation.endpoint, sessionEndpoint: rotation.endpoint }, rotation);
  return rotations.run(async () => {
    const gatewayCidr = `${rotation.at.gateway}/${rotation.at.prefixLength}`;
    await run(['ip', 'addr', 'add', gatewayCidr, 'dev', rotation.hostInterface]);
    try {
      await rotateOver(
        {
          baseEndpoint: { host: rotation.at.guest, port: GUEST_SSH_PORT },
          sessionEndpoint: { host: rotation.lease.guest, port: GUEST_SSH_PORT },
          network: { address: `${rotation.lease.guest}/${rotation.lease.prefixLength}`, gateway: rotation.lease.gateway },
        },
        rotation,
      );
    } finally {
      await run(['ip', 'addr', 'del', gatewayCidr, 'dev', rotation.hostInterface], { allowFailure: true });
    }
  });
}

async function rotateOver(reach: Pick<SshRotationOptions, 'baseEndpoint' | 'sessionEndpoint' | 'network'>, rotation: RotationKeys): Promise<void> {
  const transport = new SshRotationTransport({
    ...reach,
    baseClientPrivateKey: rotation.snapshotBase.clientPrivateKey,
    baseHostPublicKey: rotation.snapshotBase.hostPublicKey,
  });
  const sessionConnection = await rotateKeysAfterRestore(transport, {
    snapshotBase: rotation.snapshotBase,
    session: rotation.session,
    paths: GUEST_KEY_PATHS,
    rootAuthorizedKeys: rotation.rootAuthorizedKeys,
    identity: rotation.hostname === undefined ? undefined : { hostname: rotation.hostname, machineId: newMachineId() },
    onPhase: rotation.onPhase,
  });
  // The session layer opens its own connection, as for a cold boot.
  await sessionConnection.close();
}
