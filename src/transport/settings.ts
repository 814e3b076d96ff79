import { envChoice, type Env } from '../util/env.js';

export const TRANSPORT_CHOICES = ['tcp', 'unix', 'auto'] as const;
/**
 * SBX_TRANSPORT: what carries a sandbox's SSH control channel. `tcp`: the guest's address
 * over its veth (every runtime can). `unix`: a Unix socket on the host, handed to the guest
 * (containers). `auto`: the best the runtime has (a container's Unix socket; TCP for VMs).
 */
export type TransportChoice = (typeof TRANSPORT_CHOICES)[number];

/** Read at the entry point (config.ts through each runtime's settings); default tcp. */
export function transportChoiceFromEnv(env: Env): TransportChoice {
  return envChoice('SBX_TRANSPORT', TRANSPORT_CHOICES, 'tcp', env);
}
