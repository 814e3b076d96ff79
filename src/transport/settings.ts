import { envChoice, type Env } from '../util/env.js';

export const TRANSPORT_CHOICES = ['tcp', 'unix', 'vsock', 'auto'] as const;
/**
 * SBX_TRANSPORT: what carries a sandbox's SSH control channel. `tcp`: the guest's address
 * over its veth (every runtime can). `unix` and `vsock`: a socket on the host instead of the
 * network, whichever the runtime has (a container's Unix socket, Firecracker's hybrid vsock;
 * QEMU falls back to TCP and says why). `auto`: the same where the runtime has one.
 */
export type TransportChoice = (typeof TRANSPORT_CHOICES)[number];

/** Read at the entry point (config.ts through each runtime's settings); default tcp. */
export function transportChoiceFromEnv(env: Env): TransportChoice {
  return envChoice('SBX_TRANSPORT', TRANSPORT_CHOICES, 'tcp', env);
}
