import { GUEST_SSH_PORT } from '../../../guest/contract.js';
import type { AddressLease } from '../../../network/address-pool.js';
import type { SessionKeys } from '../../../transport/keys.js';
import { run } from '../../../util/exec.js';
import { SerialQueue } from '../../../util/serial-queue.js';
import { GUEST_KEY_PATHS, rotateKeysAfterRestore, type RotationPhase } from '../keys/key-rotation.js';
import { SshRotationTransport } from '../keys/ssh-rotation-transport.js';

/**
 * The address every template boots with, and so every clone wakes up with: a link-local /30
 * that no lease ever takes. The host reaches a fresh clone there, through the clone's own
 * netns, for as long as the rotation needs; then the clone is on its session's address.
 */
export const TEMPLATE_ADDRESS = { guest: '169.254.240.2', gateway: '169.254.240.1', prefixLength: 30 } as const;

// Every clone answers at the same address, so the host can route to one clone at a time:
// rotations are serialised per host. Each is a few SSH logins (~0.1-0.3 s with KVM).
const rotations = new SerialQueue();

export interface CloneRotation {
  /** The host's end of the clone's veth pair. */
  hostInterface: string;
  template: { clientPrivateKey: string; hostPublicKey: string };
  session: SessionKeys;
  lease: AddressLease;
  onPhase?: (phase: RotationPhase) => void;
}

/**
 * Gives a clone fresh from a snapshot its session's keys and address and takes the
 * template's access away (key-rotation.ts), reaching it at TEMPLATE_ADDRESS by putting the
 * template's gateway address on the clone's host interface for the duration. Throws a
 * KeyRotationError if anything is not as it must be; the caller then destroys the clone.
 */
export function rotateClone(rotation: CloneRotation): Promise<void> {
  return rotations.run(async () => {
    const gatewayCidr = `${TEMPLATE_ADDRESS.gateway}/${TEMPLATE_ADDRESS.prefixLength}`;
    await run(['ip', 'addr', 'add', gatewayCidr, 'dev', rotation.hostInterface]);
    try {
      const transport = new SshRotationTransport({
        templateEndpoint: { host: TEMPLATE_ADDRESS.guest, port: GUEST_SSH_PORT },
        sessionEndpoint: { host: rotation.lease.guest, port: GUEST_SSH_PORT },
        templateClientPrivateKey: rotation.template.clientPrivateKey,
        templateHostPublicKey: rotation.template.hostPublicKey,
        network: { address: `${rotation.lease.guest}/${rotation.lease.prefixLength}`, gateway: rotation.lease.gateway },
      });
      const sessionConnection = await rotateKeysAfterRestore(transport, {
        template: rotation.template,
        session: rotation.session,
        paths: GUEST_KEY_PATHS,
        onPhase: rotation.onPhase,
      });
      // The session layer opens its own connection, as for a cold boot.
      await sessionConnection.close();
    } finally {
      await run(['ip', 'addr', 'del', gatewayCidr, 'dev', rotation.hostInterface], { allowFailure: true });
    }
  });
}
