import path from 'node:path';
import { DEFAULT_TEMPLATE, isBuiltInTemplate, BUILT_IN_TEMPLATE_NAMES } from '../guest/image/templates.js';
import { DEFAULT_CONSOLE_LOG_LIMITS, type ConsoleLogLimits } from '../runtimes/console-log.js';
import { sandboxMemoryMiBFromEnv } from '../runtimes/sandbox-settings.js';
import { ON_IDLE, type OnIdle } from './session-record.js';
import { atLeast, envChoice, envOnOff, envInt, envString, parseScreenSize, positive, type Env, type ScreenSize } from '../util/env.js';
import { defaultMaxSessions } from './capacity.js';
import { parseTenantSessionLimits, TENANT_SESSION_LIMITS_SETTING, type TenantSessionLimits } from './tenant-limits.js';
import { volumeSettingsFromEnv, type VolumeSettings } from '../volumes/settings.js';
import { snapshotSettingsFromEnv, type SnapshotSettings } from '../snapshots/settings.js';

/** What the session layer is told: where state lives, each sandbox's shape and limits, the clocks, capacity, the warm pool. */
export interface SessionSettings {
  /** Root of all per-session state: <stateDir>/<sessionId>/ holds keys, config and disks (SBX_STATE_DIR). */
  stateDir: string;
  /** Where built guest images are cached, by recipe hash (SBX_IMAGES_DIR, default <stateDir>/images). */
  imagesDir: string;
  /** The built-in template new sessions boot (SBX_TEMPLATE, default `desktop`; `minimal` is the fast one). */
  template: string;
  /** X display number inside every guest (SBX_DISPLAY, default 99: DISPLAY=:99). */
  display: number;
  /** Idle timeout of a session unless the client asks for another (SBX_TIMEOUT_SECONDS, 300). */
  defaultTimeoutSeconds: number;
  /** The longest a session may live (SBX_MAX_LIFETIME_SECONDS, 3600), and its lifetime by default. */
  maxLifetimeSeconds: number;
  /** How long a sandbox may take from start to "SSH up and display answering" (SBX_BOOT_TIMEOUT_MS, 30 s). */
  bootTimeoutMs: number;
  /** How long a session's dropped SSH connection is retried before the session fails (SBX_SSH_RECONNECT_GIVE_UP_MS, 30 s). */
  sshReconnectGiveUpMs: number;
  /** Memory of each sandbox (SBX_MEMORY_MIB, 1024). */
  memoryLimitMiB: number;
  /** Processes in each sandbox (SBX_PIDS_LIMIT, 512). */
  pidsLimit: number;
  /** The screenshot after an action waits for the screen to settle, at most this long (SBX_SETTLE_MAX_MS, 2 s)... */
  settleMaxMs: number;
  /** ... judging it settled once no damage was reported for this long (SBX_SETTLE_INTERVAL_MS, 100 ms). */
  settleIntervalMs: number;
  /** Sessions on this host (SBX_MAX_SESSIONS; default: as many as fit in its memory at memoryLimitMiB, at most 64). */
  maxSessions: number;
  /** Sessions per tenant (SBX_MAX_SESSIONS_PER_TENANT, 10). */
  maxSessionsPerTenant: number;
  /** Memory a create must leave to the host (SBX_MEMORY_RESERVE_MIB, 512): refused when MemAvailable minus this is below memoryLimitMiB. */
  memoryReserveMiB: number;
  /**
   * Disk a create must leave free on the state directory's filesystem (SBX_DISK_RESERVE_MIB,
   * 2048), after every session's promise: its writable disk and its recordings' and
   * trajectory's caps (disk-capacity.ts). Refused: 503 host_disk_low.
   */
  diskReserveMiB: number;
  /** Booted sandboxes of the default template kept ready to be claimed by a create (SBX_WARM_POOL_SIZE, 0: no warm pool). */
  warmPoolSize: number;
  /**
   * Booted sandboxes kept ready per template (SBX_WARM_POOL, `template:count` pairs such as
   * `minimal:2,desktop:1`). A count it gives for the default template wins over warmPoolSize.
   */
  warmPool: Map<string, number>;
  /** The screen size of the warm pool's sandboxes (SBX_WARM_POOL_SCREEN, 1024x768): only creates of this size use the pool. */
  warmPoolScreen: ScreenSize;
  /**
   * How far each warm pool may grow with demand (SBX_WARM_POOL_MAX, 0..64; 0: it keeps its own
   * size): a create that finds its pool empty raises the pool's target by one, up to this; a
   * pool not taken from for a minute goes back down by one a minute, to its configured size.
   */
  warmPoolMax: number;
  /**
   * Console logs: each session's at most SBX_CONSOLE_LOG_MAX_BYTES on disk (default 4 MiB);
   * failed sessions' kept logs at most SBX_KEPT_LOGS of them (100) and SBX_KEPT_LOGS_MAX_BYTES
   * in all (64 MiB).
   */
  consoleLog: ConsoleLogLimits;
  /** Pause defaults: SBX_ON_IDLE, SBX_AUTO_RESUME, SBX_PAUSED_RETENTION_SECONDS (docs/pause.md). */
  pause: PauseSettings;
  /**
   * Tenants whose sessions get another maximum lifetime, paused retention, idle timeout or
   * onIdle than the ones above (SBX_TENANT_SESSION_LIMITS="ci=maxLifetimeSeconds:604800/onIdle:pause,...").
   */
  tenantSessionLimits: Map<string, TenantSessionLimits>;
  /** Volume bounds and quotas: SBX_VOLUME_MAX_MIB, SBX_VOLUME_QUOTA_MIB, SBX_VOLUME_QUOTA_COUNT (docs/volumes.md). */
  volumes: VolumeSettings;
  /** Snapshot quotas: SBX_SNAPSHOT_QUOTA_MIB, SBX_SNAPSHOT_QUOTA_COUNT (docs/snapshots.md). */
  snapshots: SnapshotSettings;
}

/** What pausing does by default (sessions/pause.ts). */
export interface PauseSettings {
  /** What an idle timeout does to a session whose create says nothing (SBX_ON_IDLE: destroy, the default, or pause). */
  onIdle: OnIdle;
  /** A request to a paused session resumes it first unless its create said otherwise (SBX_AUTO_RESUME, on). */
  autoResume: boolean;
  /** How long a session may stay paused before it is destroyed and its state freed (SBX_PAUSED_RETENTION_SECONDS, 7 days). */
  pausedRetentionSeconds: number;
}

export const DEFAULT_STATE_DIR = '/var/lib/sandboxes';

export function sessionSettingsFromEnv(env: Env): SessionSettings {
  const stateDir = envString(env, 'SBX_STATE_DIR', DEFAULT_STATE_DIR);
  const memoryLimitMiB = sandboxMemoryMiBFromEnv(env);
  return {
    stateDir,
    imagesDir: imagesDirFromEnv(env, stateDir),
    template: templateFromEnv(env),
    display: envInt('SBX_DISPLAY', 99, env),
    defaultTimeoutSeconds: positive('SBX_TIMEOUT_SECONDS', envInt('SBX_TIMEOUT_SECONDS', 300, env)),
    maxLifetimeSeconds: positive('SBX_MAX_LIFETIME_SECONDS', envInt('SBX_MAX_LIFETIME_SECONDS', 3600, env)),
    bootTimeoutMs: envInt('SBX_BOOT_TIMEOUT_MS', 30_000, env),
    sshReconnectGiveUpMs: atLeast('SBX_SSH_RECONNECT_GIVE_UP_MS', envInt('SBX_SSH_RECONNECT_GIVE_UP_MS', 30_000, env), 1_000),
    memoryLimitMiB,
    pidsLimit: envInt('SBX_PIDS_LIMIT', 512, env),
    settleMaxMs: envInt('SBX_SETTLE_MAX_MS', 2_000, env),
    settleIntervalMs: envInt('SBX_SETTLE_INTERVAL_MS', 100, env),
    maxSessions: positive('SBX_MAX_SESSIONS', envInt('SBX_MAX_SESSIONS', defaultMaxSessions(memoryLimitMiB), env)),
    maxSessionsPerTenant: positive('SBX_MAX_SESSIONS_PER_TENANT', envInt('SBX_MAX_SESSIONS_PER_TENANT', 10, env)),
    memoryReserveMiB: envInt('SBX_MEMORY_RESERVE_MIB', 512, env),
    diskReserveMiB: atLeast('SBX_DISK_RESERVE_MIB', envInt('SBX_DISK_RESERVE_MIB', 2048, env), 0),
    warmPoolSize: warmPoolSize(envInt('SBX_WARM_POOL_SIZE', 0, env)),
    warmPool: parseWarmPool(envString(env, 'SBX_WARM_POOL', '')),
    warmPoolScreen: parseScreenSize(envString(env, 'SBX_WARM_POOL_SCREEN', '1024x768'), 'SBX_WARM_POOL_SCREEN'),
    warmPoolMax: warmPoolSize(envInt('SBX_WARM_POOL_MAX', 0, env)),
    pause: {
      onIdle: envChoice('SBX_ON_IDLE', ON_IDLE, 'destroy', env),
      autoResume: envOnOff('SBX_AUTO_RESUME', true, env),
      pausedRetentionSeconds: positive('SBX_PAUSED_RETENTION_SECONDS', envInt('SBX_PAUSED_RETENTION_SECONDS', 7 * 24 * 3600, env)),
    },
    tenantSessionLimits: parseTenantSessionLimits(envString(env, TENANT_SESSION_LIMITS_SETTING, '')),
    volumes: volumeSettingsFromEnv(env),
    snapshots: snapshotSettingsFromEnv(env),
    consoleLog: {
      maxBytes: atLeast('SBX_CONSOLE_LOG_MAX_BYTES', envInt('SBX_CONSOLE_LOG_MAX_BYTES', DEFAULT_CONSOLE_LOG_LIMITS.maxBytes, env), 4096),
      keptMaxCount: atLeast('SBX_KEPT_LOGS', envInt('SBX_KEPT_LOGS', DEFAULT_CONSOLE_LOG_LIMITS.keptMaxCount, env), 0),
      keptMaxBytes: atLeast('SBX_KEPT_LOGS_MAX_BYTES', envInt('SBX_KEPT_LOGS_MAX_BYTES', DEFAULT_CONSOLE_LOG_LIMITS.keptMaxBytes, env), 0),
    },
  };
}

/** SBX_IMAGES_DIR, else <stateDir>/images: also for `serve --state-dir`, which moves the default. */
export function imagesDirFromEnv(env: Env, stateDir: string): string {
  return envString(env, 'SBX_IMAGES_DIR', path.join(stateDir, 'images'));
}

/** SBX_WARM_POOL: `template:count` pairs, comma-separated (empty: none). A bad pair throws, naming it. */
export function parseWarmPool(value: string): Map<string, number> {
  const sizes = new Map<string, number>();
  for (const pair of value
    .split(',')
    .map((p) => p.trim())
    .filter((p) => p !== '')) {
    const match = /^([a-z][a-z0-9-]{0,39}):(\d{1,2})$/.exec(pair);
    if (!match) throw new Error(`SBX_WARM_POOL: "${pair}" is not template:count (e.g. minimal:2,desktop:1)`);
    const [, template, count] = match as unknown as [string, string, string];
    if (sizes.has(template)) throw new Error(`SBX_WARM_POOL: ${template} is named twice`);
    sizes.set(template, warmPoolSize(Number(count)));
  }
  return sizes;
}

/** The warm pool sizes by template: SBX_WARM_POOL, with SBX_WARM_POOL_SIZE for the default template unless it is named there. */
export function warmPoolSizes(settings: Pick<SessionSettings, 'warmPool' | 'warmPoolSize'>, defaultTemplate: string): Map<string, number> {
  const sizes = new Map(settings.warmPool);
  if (!sizes.has(defaultTemplate) && settings.warmPoolSize > 0) sizes.set(defaultTemplate, settings.warmPoolSize);
  return sizes;
}

/** SBX_TEMPLATE: a built-in template's name (templates.ts); another throws, listing them. */
export function templateFromEnv(env: Env): string {
  const name = envString(env, 'SBX_TEMPLATE', DEFAULT_TEMPLATE);
  if (!isBuiltInTemplate(name)) {
    throw new Error(`SBX_TEMPLATE must be one of ${BUILT_IN_TEMPLATE_NAMES.join(', ')}, got "${name}"`);
  }
  return name;
}

/** Checks a warm pool size (SBX_WARM_POOL_SIZE, `serve --warm-pool`). */
export function warmPoolSize(value: number): number {
  if (!Number.isInteger(value) || value < 0 || value > 64) throw new Error(`the warm pool size must be between 0 and 64, got ${value}`);
  return value;
}
