import { apiSettingsFromEnv, type ApiSettings } from './api/settings.js';
import { logLevelFromEnv } from './logger.js';
import { networkSettingsFromEnv, type NetworkSettings } from './network/settings.js';
import { recordingSettingsFromEnv, type RecordingSettings } from './recording/settings.js';
import { runtimeSettingsFromEnv, type RuntimeSettings } from './runtimes/settings.js';
import { sessionSettingsFromEnv, type SessionSettings } from './sessions/settings.js';
import { trajectorySettingsFromEnv, type TrajectorySettings } from './sessions/trajectory/settings.js';
import type { Env } from './util/env.js';
import { liveViewCapsFromEnv, type LiveViewCaps } from './views/settings.js';
import { runSettingsFromEnv, type RunSettings } from './runs/settings.js';
import { portSettingsFromEnv, type PortSettings } from './ports/settings.js';
import { e2bSettingsFromEnv, type E2bSettings } from './e2b/settings.js';

/**
 * The aggregator: everything the orchestrator can be told, each part's settings side by side.
 * Each part owns its settings type and its `fromEnv` (api/settings.ts, sessions/settings.ts,
 * network/settings.ts, runtimes/settings.ts and each runtime's settings.ts); this file only
 * puts them together. Configuration flows one way: the parts never import this file, and only
 * the entry points (src/cli/main.ts, src/bench/main.ts) read the process's environment and
 * hand it here. CLI flags win over SBX_* environment variables. test/config-boundaries.test.ts
 * keeps it so.
 */
export interface OrchestratorConfig extends ApiSettings, SessionSettings, NetworkSettings, RuntimeSettings {
  /** SBX_LOG_LEVEL (default info): the level of the orchestrator's log. */
  logLevel: string;
  /** How much of every session's trajectory is kept, and for how long (SBX_TRAJECTORY_*). */
  trajectory: TrajectorySettings;
  /** Screen recordings: rate, caps, retention (SBX_RECORDING_*). */
  recording: RecordingSettings;
  /** Live-view caps: browsers per session and per tenant (SBX_MAX_VIEWERS_*). */
  liveViews: LiveViewCaps;
  /** The built-in Claude loop's per-tenant models, concurrency and budgets (SBX_RUN_*, SBX_TENANT_RUN_*). */
  runs: RunSettings;
  /** Guest ports on URLs: the host-based form's wildcard domain and the per-session bounds (SBX_PORTS_DOMAIN, SBX_PORT_*). */
  ports: PortSettings;
  /** The E2B-compatible surface: which of our templates E2B's names mean (SBX_E2B_*; docs/e2b.md). */
  e2b: E2bSettings;
}

/** The configuration an environment describes; a bad value throws, naming the variable. */
export function defaultConfig(env: Env): OrchestratorConfig {
  return {
    ...runtimeSettingsFromEnv(env),
    ...apiSettingsFromEnv(env),
    ...sessionSettingsFromEnv(env),
    ...networkSettingsFromEnv(env),
    ...trajectorySettingsFromEnv(env),
    logLevel: logLevelFromEnv(env),
    recording: recordingSettingsFromEnv(env),
    liveViews: liveViewCapsFromEnv(env),
    runs: runSettingsFromEnv(env),
    ports: portSettingsFromEnv(env),
    e2b: e2bSettingsFromEnv(env),
  };
}

/**
 * The effective configuration as one log object: every setting, by the same names as in
 * OrchestratorConfig (maps as objects, unset optional settings as null). There are no secrets among the settings today (API keys
 * live in the store, not the environment); a setting that holds one is listed in SECRET_SETTINGS
 * and shown as "[redacted]".
 */
export function describeConfig(config: OrchestratorConfig): Record<string, unknown> {
  const described: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(config)) {
    described[name] = SECRET_SETTINGS.has(name) && value !== undefined ? '[redacted]' : plain(value);
  }
  return described;
}

const SECRET_SETTINGS: ReadonlySet<string> = new Set<string>([]);

/** JSON as the log writes it; an unset optional setting shows as null rather than vanishing. */
function plain(value: unknown): unknown {
  if (value === undefined) return null;
  if (value instanceof Map) return Object.fromEntries([...value].map(([key, inner]) => [String(key), plain(inner)]));
  if (Array.isArray(value)) return value.map(plain);
  if (value !== null && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([key, inner]) => [key, plain(inner)]));
  return value;
}
