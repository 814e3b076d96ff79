import { atLeast, envInt, envOptional, positive, type Env } from '../util/env.js';

/**
 * The recordings' folder under the state dir when SBX_RECORDING_DIR is unset. Not ten
 * characters of [a-z0-9]: start-up reconciliation takes such folders for sessions' and removes
 * those it does not know (sessions/reconcile.ts).
 */
export const DEFAULT_RECORDING_SUBDIR = 'session-recordings';

/** Where recordings go and how much of them is kept (docs/configuration.md, "Recording"). */
export interface RecordingSettings {
  /** Videos and their subtitles (SBX_RECORDING_DIR; unset: <stateDir>/session-recordings): on the host only. */
  dir?: string;
  /** Frames per second of every recording (SBX_RECORDING_FPS, 5; 1-10). */
  fps: number;
  /** One recording's largest file: reached, the recording stops, not the session (SBX_RECORDING_MAX_BYTES, 256 MiB). */
  maxBytes: number;
  /** One recording's longest duration: reached, the recording stops (SBX_RECORDING_MAX_SECONDS, 3600). */
  maxSeconds: number;
  /** Finished recordings are deleted this long after they ended (SBX_RECORDING_KEEP_SECONDS, 7 days). */
  keepSeconds: number;
  /** All recordings together at most this size: the oldest finished are deleted first (SBX_RECORDING_TOTAL_MAX_BYTES, 4 GiB). */
  totalMaxBytes: number;
}

export function recordingSettingsFromEnv(env: Env): RecordingSettings {
  const fps = positive('SBX_RECORDING_FPS', envInt('SBX_RECORDING_FPS', 5, env));
  if (fps > 10) throw new Error(`SBX_RECORDING_FPS must be between 1 and 10, got ${fps}`);
  return {
    dir: envOptional(env, 'SBX_RECORDING_DIR'),
    fps,
    maxBytes: atLeast('SBX_RECORDING_MAX_BYTES', envInt('SBX_RECORDING_MAX_BYTES', 256 * 1024 * 1024, env), 64 * 1024),
    maxSeconds: positive('SBX_RECORDING_MAX_SECONDS', envInt('SBX_RECORDING_MAX_SECONDS', 3600, env)),
    keepSeconds: positive('SBX_RECORDING_KEEP_SECONDS', envInt('SBX_RECORDING_KEEP_SECONDS', 7 * 24 * 3600, env)),
    totalMaxBytes: atLeast('SBX_RECORDING_TOTAL_MAX_BYTES', envInt('SBX_RECORDING_TOTAL_MAX_BYTES', 4 * 1024 * 1024 * 1024, env), 0),
  };
}
