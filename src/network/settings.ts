import { envInt, envString, positive, type Env } from '../util/env.js';
import { DEFAULT_RESOURCE_PREFIX } from './names.js';

/** Host networking and the names of host resources. */
export interface NetworkSettings {
  /** Guest addresses are leased as /30 blocks from this IPv4 range (SBX_SUBNET, 10.241.0.0/16). */
  subnet: string;
  /** How often the guest network policy is checked and put back if changed (SBX_NETWORK_POLICY_CHECK_MS, 3 s). */
  networkPolicyCheckMs: number;
  /** Prefix of every host resource's name: netns, veth, container, cgroup (SBX_RESOURCE_PREFIX, "sbx-"). */
  resourcePrefix: string;
}

export function networkSettingsFromEnv(env: Env): NetworkSettings {
  return {
    subnet: envString(env, 'SBX_SUBNET', '10.241.0.0/16'),
    networkPolicyCheckMs: positive('SBX_NETWORK_POLICY_CHECK_MS', envInt('SBX_NETWORK_POLICY_CHECK_MS', 3_000, env)),
    resourcePrefix: envString(env, 'SBX_RESOURCE_PREFIX', DEFAULT_RESOURCE_PREFIX),
  };
}
