import { envInt, positive, type Env } from '../../util/env.js';

/** How much of every session's trajectory (steps and their screenshots) is kept, and for how long. */
export interface TrajectorySettings {
  /** How long a trajectory is kept after its session started (SBX_TRAJECTORY_RETENTION_SECONDS, 7 days). */
  retentionSeconds: number;
  /** Bytes one session's trajectory may hold on disk, steps and screenshots (SBX_TRAJECTORY_MAX_SESSION_BYTES, 64 MiB). */
  maxSessionBytes: number;
  /** Bytes all trajectories together may hold; the oldest go first (SBX_TRAJECTORY_MAX_TOTAL_BYTES, 1 GiB). */
  maxTotalBytes: number;
  /** Steps one session's trajectory keeps at most; later ones are counted, not stored (SBX_TRAJECTORY_MAX_STEPS, 5000). */
  maxSteps: number;
}

export const DEFAULT_TRAJECTORY_SETTINGS: TrajectorySettings = {
  retentionSeconds: 7 * 24 * 3600,
  maxSessionBytes: 64 * 1024 * 1024,
  maxTotalBytes: 1024 * 1024 * 1024,
  maxSteps: 5000,
};

export function trajectorySettingsFromEnv(env: Env): { trajectory: TrajectorySettings } {
  const d = DEFAULT_TRAJECTORY_SETTINGS;
  return {
    trajectory: {
      retentionSeconds: positive('SBX_TRAJECTORY_RETENTION_SECONDS', envInt('SBX_TRAJECTORY_RETENTION_SECONDS', d.retentionSeconds, env)),
      maxSessionBytes: positive('SBX_TRAJECTORY_MAX_SESSION_BYTES', envInt('SBX_TRAJECTORY_MAX_SESSION_BYTES', d.maxSessionBytes, env)),
      maxTotalBytes: positive('SBX_TRAJECTORY_MAX_TOTAL_BYTES', envInt('SBX_TRAJECTORY_MAX_TOTAL_BYTES', d.maxTotalBytes, env)),
      maxSteps: positive('SBX_TRAJECTORY_MAX_STEPS', envInt('SBX_TRAJECTORY_MAX_STEPS', d.maxSteps, env)),
    },
  };
}
