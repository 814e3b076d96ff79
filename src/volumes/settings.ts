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
