import { atLeast, envInt, type Env } from '../util/env.js';

/** How large volumes may be, and how much of them a tenant may have (docs/volumes.md). */
export interface VolumeSettings {
  /** The smallest volume, MiB (an ext4 with a journal needs a few). */
  minMiB: number;
  /** The largest volume, MiB (SBX_VOLUME_MAX_MIB, default 16384). */
  maxMiB: number;
  /** All of one tenant's volumes together, MiB (SBX_VOLUME_QUOTA_MIB, default 65536). */
  quotaMiB: number;
  /** How many volumes one tenant may have (SBX_VOLUME_QUOTA_COUNT, default 32). */
  quotaCount: number;
}

export const DEFAULT_VOLUME_SETTINGS: VolumeSettings = { minMiB: 16, maxMiB: 16_384, quotaMiB: 65_536, quotaCount: 32 };

/** The most volumes one session may mount. */
export const MAX_VOLUMES_PER_SESSION = 8;

/** SBX_VOLUME_MAX_MIB, SBX_VOLUME_QUOTA_MIB, SBX_VOLUME_QUOTA_COUNT: read by nodes and gateways alike (a gateway checks the quota cluster-wide). */
export function volumeSettingsFromEnv(env: Env): VolumeSettings {
  const { minMiB } = DEFAULT_VOLUME_SETTINGS;
  return {
    minMiB,
    maxMiB: atLeast('SBX_VOLUME_MAX_MIB', envInt('SBX_VOLUME_MAX_MIB', DEFAULT_VOLUME_SETTINGS.maxMiB, env), minMiB),
    quotaMiB: atLeast('SBX_VOLUME_QUOTA_MIB', envInt('SBX_VOLUME_QUOTA_MIB', DEFAULT_VOLUME_SETTINGS.quotaMiB, env), 0),
    quotaCount: atLeast('SBX_VOLUME_QUOTA_COUNT', envInt('SBX_VOLUME_QUOTA_COUNT', DEFAULT_VOLUME_SETTINGS.quotaCount, env), 0),
  };
}
