import { atLeast, envInt, type Env } from '../util/env.js';

/** How much snapshot state one tenant may keep on the host (docs/snapshots.md). */
export interface SnapshotSettings {
  /** All of one tenant's snapshots together, MiB (SBX_SNAPSHOT_QUOTA_MIB, default 20480). */
  quotaMiB: number;
  /** How many snapshots one tenant may have (SBX_SNAPSHOT_QUOTA_COUNT, default 16). */
  quotaCount: number;
}

export const DEFAULT_SNAPSHOT_SETTINGS: SnapshotSettings = { quotaMiB: 20_480, quotaCount: 16 };

export function snapshotSettingsFromEnv(env: Env): SnapshotSettings {
  return {
    quotaMiB: atLeast('SBX_SNAPSHOT_QUOTA_MIB', envInt('SBX_SNAPSHOT_QUOTA_MIB', DEFAULT_SNAPSHOT_SETTINGS.quotaMiB, env), 0),
    quotaCount: atLeast('SBX_SNAPSHOT_QUOTA_COUNT', envInt('SBX_SNAPSHOT_QUOTA_COUNT', DEFAULT_SNAPSHOT_SETTINGS.quotaCount, env), 0),
  };
}
