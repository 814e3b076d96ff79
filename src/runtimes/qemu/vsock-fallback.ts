import { existsSync } from 'node:fs';
import type { TransportChoice } from '../../transport/settings.js';

/** The host device QEMU's vhost-vsock-pci needs. */
export const VHOST_VSOCK_DEVICE = '/dev/vhost-vsock';

/**
 * Why a QEMU sandbox's control channel stays on TCP although SBX_TRANSPORT asked for more
 * (undefined when TCP was asked for). vhost-vsock-pci needs /dev/vhost-vsock on the host,
 * and the orchestrator a way to dial AF_VSOCK, which Node.js does not have: until one is
 * added (docs/transport.md), the answer is always TCP, and the log says why.
 */
export function vsockFallbackReason(transport: TransportChoice, devicePresent = existsSync(VHOST_VSOCK_DEVICE)): string | undefined {
  if (transport === 'tcp') return undefined;
  if (!devicePresent) return `${VHOST_VSOCK_DEVICE} is missing on this host (the vhost_vsock module is not loaded), so vhost-vsock-pci cannot be used`;
  return `${VHOST_VSOCK_DEVICE} exists, but this orchestrator cannot dial AF_VSOCK (Node.js has no vsock sockets)`;
}
