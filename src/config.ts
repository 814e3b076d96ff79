import path from 'node:path';
import { AUTH_SETTINGS, type AuthSetting } from './api/auth/auth-mode.js';
import { DEFAULT_TENANT_REQUEST_LIMITS, parseTenantLimitOverrides, type TenantRequestLimits } from './api/tenant-request-limits.js';
import { DEFAULT_RESOURCE_PREFIX } from './network/names.js';
import { DEFAULT_CONSOLE_LOG_LIMITS, type ConsoleLogLimits } from './runtimes/console-log.js';
import { defaultMaxSessions } from './sessions/capacity.js';
import type { VmUserSettings } from './runtimes/vm-user-pool.js';

export const RUNTIME_NAMES = ['auto', 'container', 'qemu', 'firecracker'] as const;
export type RuntimeChoice = (typeof RUNTIME_NAMES)[number];

/** Everything the orchestrator can be told. CLI flags win over SBX_* environment variables. */
export interface OrchestratorConfig {
  host: string;
  port: number;
  /** Root of all per-session state: <stateDir>/<sessionId>/ holds keys, config and disks. */
  stateDir: string;
  /** Where built guest images are cached, by recipe hash. */
  imagesDir: string;
  runtime: RuntimeChoice;
  /** X display number inside every guest (DISPLAY=:99). */
  display: number;
  /** Guest addresses are leased as /30 blocks from this IPv4 range. */
  subnet: string;
  /** Idle timeout of a session unless the client asks for another. */
  defaultTimeoutSeconds: number;
  /** The longest a session may live (SBX_MAX_LIFETIME_SECONDS), and its lifetime by default. */
  maxLifetimeSeconds: number;
  /** How long a sandbox may take from start to "SSH up and display answering". */
  bootTimeoutMs: number;
  memoryLimitMiB: number;
  pidsLimit: number;
  /** The screenshot after an action waits for the screen to settle, at most this long. */
  settleMaxMs: number;
  /** ... judging it settled when two captures this far apart are identical. */
  settleIntervalMs: number;
  /** Slow clients: headers within this long (SBX_HEADERS_TIMEOUT_MS, default 10 s)... */
  headersTimeoutMs: number;
  /** ... the whole request, body included (SBX_REQUEST_TIMEOUT_MS, 120 s)... */
  requestTimeoutMs: number;
  /** ... and a response not read for this long is dropped (SBX_SEND_TIMEOUT_MS, 30 s). */
  sendTimeoutMs: number;
  /** Per tenant: requests in flight at once (SBX_TENANT_MAX_CONCURRENT_REQUESTS, default 64)... */
  tenantMaxConcurrentRequests: number;
  /** ... requests a second on average (SBX_TENANT_REQUESTS_PER_SECOND, 50)... */
  tenantRequestsPerSecond: number;
  /** ... and in one burst (SBX_TENANT_REQUEST_BURST, 200). Over either: 429 with Retry-After. */
  tenantRequestBurst: number;
  /** Tenants with other request limits (SBX_TENANT_REQUEST_LIMITS="ci=256/500/1000,..."). */
  tenantRequestLimitOverrides: ReadonlyMap<string, TenantRequestLimits>;
  /** How often the guest network policy is checked and put back if changed (SBX_NETWORK_POLICY_CHECK_MS, 3 s). */
  networkPolicyCheckMs: number;
  /** Prefix of every host resource's name (netns, veth, container, cgroup): "sbx-". */
  resourcePrefix: string;
  /** API keys: `auto` (required once a key exists, always off loopback), `on`, `off` (loopback only). */
  auth: AuthSetting;
  /** Sessions on this host (default: as many as fit in its memory at memoryLimitMiB, at most 64). */
  maxSessions: number;
  /** Sessions per tenant. */
  maxSessionsPerTenant: number;
  /** Memory a create must leave to the host: refused when MemAvailable minus this is below memoryLimitMiB. */
  memoryReserveMiB: number;
  /** Booted sandboxes kept ready to be claimed by a create (0: no warm pool). */
  warmPoolSize: number;
  /** The screen size of the warm pool's sandboxes: only creates of this size use the pool. */
  warmPoolScreen: { width: number; height: number };
  /**
   * Console logs: each session's at most SBX_CONSOLE_LOG_MAX_BYTES on disk (default 4 MiB);
   * failed sessions' kept logs at most SBX_KEPT_LOGS of them (100) and SBX_KEPT_LOGS_MAX_BYTES
   * in all (64 MiB).
   */
  consoleLog: ConsoleLogLimits;
}

export function envInt(name: string, fallback: number, env: NodeJS.ProcessEnv = process.env): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value)) throw new Error(`${name} must be an integer, got "${raw}"`);
  return value;
}

function positive(name: string, value: number): number {
  if (value < 1) throw new Error(`${name} must be at least 1, got ${value}`);
  return value;
}

export function defaultConfig(): OrchestratorConfig {
  const stateDir = process.env.SBX_STATE_DIR || '/var/lib/sandboxes';
  const runtime = (process.env.SBX_RUNTIME || 'auto') as RuntimeChoice;
  if (!RUNTIME_NAMES.includes(runtime)) {
    throw new Error(`SBX_RUNTIME must be one of ${RUNTIME_NAMES.join(', ')}, got "${runtime}"`);
  }
  const auth = (process.env.SBX_AUTH || 'auto') as AuthSetting;
  if (!AUTH_SETTINGS.includes(auth)) throw new Error(`SBX_AUTH must be one of ${AUTH_SETTINGS.join(', ')}, got "${auth}"`);
  const memoryLimitMiB = envInt('SBX_MEMORY_MIB', 1024);
  return {
    host: process.env.SBX_HOST || '127.0.0.1',
    port: envInt('SBX_PORT', 8080),
    stateDir,
    imagesDir: process.env.SBX_IMAGES_DIR || path.join(stateDir, 'images'),
    runtime,
    display: envInt('SBX_DISPLAY', 99),
    subnet: process.env.SBX_SUBNET || '10.241.0.0/16',
    defaultTimeoutSeconds: positive('SBX_TIMEOUT_SECONDS', envInt('SBX_TIMEOUT_SECONDS', 300)),
    maxLifetimeSeconds: positive('SBX_MAX_LIFETIME_SECONDS', envInt('SBX_MAX_LIFETIME_SECONDS', 3600)),
    bootTimeoutMs: envInt('SBX_BOOT_TIMEOUT_MS', 30_000),
    memoryLimitMiB,
    pidsLimit: envInt('SBX_PIDS_LIMIT', 512),
    settleMaxMs: envInt('SBX_SETTLE_MAX_MS', 2_000),
    settleIntervalMs: envInt('SBX_SETTLE_INTERVAL_MS', 100),
    headersTimeoutMs: positive('SBX_HEADERS_TIMEOUT_MS', envInt('SBX_HEADERS_TIMEOUT_MS', 10_000)),
    requestTimeoutMs: positive('SBX_REQUEST_TIMEOUT_MS', envInt('SBX_REQUEST_TIMEOUT_MS', 120_000)),
    sendTimeoutMs: positive('SBX_SEND_TIMEOUT_MS', envInt('SBX_SEND_TIMEOUT_MS', 30_000)),
    tenantMaxConcurrentRequests: positive('SBX_TENANT_MAX_CONCURRENT_REQUESTS', envInt('SBX_TENANT_MAX_CONCURRENT_REQUESTS', DEFAULT_TENANT_REQUEST_LIMITS.maxConcurrent)),
    tenantRequestsPerSecond: positive('SBX_TENANT_REQUESTS_PER_SECOND', envInt('SBX_TENANT_REQUESTS_PER_SECOND', DEFAULT_TENANT_REQUEST_LIMITS.perSecond)),
    tenantRequestBurst: positive('SBX_TENANT_REQUEST_BURST', envInt('SBX_TENANT_REQUEST_BURST', DEFAULT_TENANT_REQUEST_LIMITS.burst)),
    tenantRequestLimitOverrides: parseTenantLimitOverrides(process.env.SBX_TENANT_REQUEST_LIMITS || ''),
    networkPolicyCheckMs: positive('SBX_NETWORK_POLICY_CHECK_MS', envInt('SBX_NETWORK_POLICY_CHECK_MS', 3_000)),
    resourcePrefix: process.env.SBX_RESOURCE_PREFIX || DEFAULT_RESOURCE_PREFIX,
    auth,
    maxSessions: positive('SBX_MAX_SESSIONS', envInt('SBX_MAX_SESSIONS', defaultMaxSessions(memoryLimitMiB))),
    maxSessionsPerTenant: positive('SBX_MAX_SESSIONS_PER_TENANT', envInt('SBX_MAX_SESSIONS_PER_TENANT', 10)),
    memoryReserveMiB: envInt('SBX_MEMORY_RESERVE_MIB', 512),
    warmPoolSize: warmPoolSize(envInt('SBX_WARM_POOL_SIZE', 0)),
    warmPoolScreen: parseScreenSize(process.env.SBX_WARM_POOL_SCREEN || '1024x768', 'SBX_WARM_POOL_SCREEN'),
    consoleLog: {
      maxBytes: atLeast('SBX_CONSOLE_LOG_MAX_BYTES', envInt('SBX_CONSOLE_LOG_MAX_BYTES', DEFAULT_CONSOLE_LOG_LIMITS.maxBytes), 4096),
      keptMaxCount: atLeast('SBX_KEPT_LOGS', envInt('SBX_KEPT_LOGS', DEFAULT_CONSOLE_LOG_LIMITS.keptMaxCount), 0),
      keptMaxBytes: atLeast('SBX_KEPT_LOGS_MAX_BYTES', envInt('SBX_KEPT_LOGS_MAX_BYTES', DEFAULT_CONSOLE_LOG_LIMITS.keptMaxBytes), 0),
    },
  };
}

function atLeast(name: string, value: number, min: number): number {
  if (value < min) throw new Error(`${name} must be at least ${min}, got ${value}`);
  return value;
}

/** Checks a warm pool size (SBX_WARM_POOL_SIZE, `serve --warm-pool`). */
export function warmPoolSize(value: number): number {
  if (!Number.isInteger(value) || value < 0 || value > 64) throw new Error(`the warm pool size must be between 0 and 64, got ${value}`);
  return value;
}

/** "1024x768" -> { width, height }, within the sizes a create may ask for (api/schemas.ts). */
export function parseScreenSize(text: string, what: string): { width: number; height: number } {
  const match = /^(\d{2,5})x(\d{2,5})$/.exec(text);
  const size = match && { width: Number(match[1]), height: Number(match[2]) };
  if (!size || size.width < 320 || size.height < 320 || size.width > 3840 || size.height > 3840) {
    throw new Error(`${what} must look like 1024x768 (each side 320 to 3840), got "${text}"`);
  }
  return size;
}

/** How the qemu runtime runs its VMs. Read from the environment (qemuSettingsFromEnv). */
export interface QemuSettings {
  /** SBX_QEMU_BIN: the QEMU system emulator (default qemu-system-x86_64 on PATH). */
  binary: string;
  /** SBX_QEMU_IMG: qemu-img, which makes the per-session copy-on-write disks. */
  imgBinary: string;
  /** SBX_QEMU_ACCEL: 'kvm', 'tcg' (software), or 'auto' (KVM if it works here, else TCG). */
  accel: 'auto' | 'kvm' | 'tcg';
  /** SBX_QEMU_SMP: virtual CPUs per VM (default 2: under TCG each is a host thread). */
  smp: number;
  /** SBX_KERNEL: a kernel to boot instead of the guest image's (see kernel-cmdline.ts). */
  kernel?: string;
  /** SBX_INITRD: an initrd to use instead of the image's (with SBX_KERNEL, usually). */
  initrd?: string;
  /** SBX_VM_UID_BASE / SBX_VM_UID_COUNT: the uids (and gids) VMMs run under, one each (vm-user-pool.ts). */
  vmUsers?: VmUserSettings;
  /**
   * SBX_QEMU_BOOT_TIMEOUT_MS: how long a VM may take to be ready. Default: 90 s under TCG,
   * 30 s with KVM. SBX_BOOT_TIMEOUT_MS applies instead when it is longer.
   */
  bootTimeoutMs?: number;
}

export function qemuSettingsFromEnv(env: NodeJS.ProcessEnv = process.env): QemuSettings {
  const accel = env.SBX_QEMU_ACCEL || 'auto';
  if (accel !== 'auto' && accel !== 'kvm' && accel !== 'tcg') {
    throw new Error(`SBX_QEMU_ACCEL must be auto, kvm or tcg, got "${accel}"`);
  }
  const smp = envInt('SBX_QEMU_SMP', 2, env);
  if (smp < 1 || smp > 64) throw new Error(`SBX_QEMU_SMP must be between 1 and 64, got ${smp}`);
  const timeout = env.SBX_QEMU_BOOT_TIMEOUT_MS ? envInt('SBX_QEMU_BOOT_TIMEOUT_MS', 0, env) : undefined;
  return {
    binary: env.SBX_QEMU_BIN || 'qemu-system-x86_64',
    imgBinary: env.SBX_QEMU_IMG || 'qemu-img',
    accel,
    smp,
    kernel: env.SBX_KERNEL || undefined,
    initrd: env.SBX_INITRD || undefined,
    bootTimeoutMs: timeout,
    vmUsers: vmUserSettingsFromEnv(env),
  };
}

/** How the container runtime confines each sandbox. Read from the environment (containerSettingsFromEnv). */
export interface ContainerSettings {
  /**
   * SBX_CONTAINER_UID_BASE (default 200000): the first host uid/gid of the id ranges. Each
   * sandbox gets ID_RANGE_SIZE ids of its own from here (guest uid u is host uid
   * base + slot * ID_RANGE_SIZE + u): well above the ids of real users and of other tools'
   * subordinate ranges (/etc/subuid usually starts at 100000 with 65536 ids per user).
   */
  uidBase: number;
  /** SBX_CPUS (default 1): CPUs' worth of time each sandbox may use (a CFS quota; 0.5 = half a CPU). */
  cpus: number;
  /** SBX_IO_BPS (default 100 MiB/s, 0 = no limit): bytes per second each way on the sandbox's disk. */
  ioBytesPerSecond: number;
  /** SBX_IO_IOPS (default 2000, 0 = no limit): operations per second each way on the sandbox's disk. */
  ioOpsPerSecond: number;
  /** SBX_INOTIFY_INSTANCES (default 128): inotify instances each sandbox's users may hold. */
  inotifyInstances: number;
  /** SBX_INOTIFY_WATCHES (default 16384): inotify watches each sandbox's users may hold. */
  inotifyWatches: number;
}

/** Ids per sandbox: a full 16-bit range, so every uid and gid a Debian image uses is mapped. */
export const ID_RANGE_SIZE = 65536;
/** Id ranges one orchestrator leases at most (more than its sandboxes can ever be: 64 + a pool of 64). */
export const MAX_ID_RANGES = 1024;

export function containerSettingsFromEnv(env: NodeJS.ProcessEnv = process.env): ContainerSettings {
  const uidBase = envInt('SBX_CONTAINER_UID_BASE', 200_000, env);
  // Room for every range below 2^32 - 1 (the kernel's "no id").
  if (uidBase < 65536 || uidBase > 2 ** 32 - 1 - MAX_ID_RANGES * ID_RANGE_SIZE) {
    throw new Error(`SBX_CONTAINER_UID_BASE must be between 65536 and ${2 ** 32 - 1 - MAX_ID_RANGES * ID_RANGE_SIZE}, got ${uidBase}`);
  }
  const cpusText = env.SBX_CPUS || '1';
  const cpus = Number(cpusText);
  if (!Number.isFinite(cpus) || cpus < 0.01 || cpus > 1024) throw new Error(`SBX_CPUS must be a number of CPUs between 0.01 and 1024, got "${cpusText}"`);
  const nonNegative = (name: string, fallback: number) => {
    const value = envInt(name, fallback, env);
    if (value < 0) throw new Error(`${name} must be 0 or more, got ${value}`);
    return value;
  };
  return {
    uidBase,
    cpus,
    ioBytesPerSecond: nonNegative('SBX_IO_BPS', 100 * 1024 * 1024),
    ioOpsPerSecond: nonNegative('SBX_IO_IOPS', 2000),
    inotifyInstances: positive('SBX_INOTIFY_INSTANCES', envInt('SBX_INOTIFY_INSTANCES', 128, env)),
    inotifyWatches: positive('SBX_INOTIFY_WATCHES', envInt('SBX_INOTIFY_WATCHES', 16384, env)),
  };
}

/** SBX_VM_UID_BASE and SBX_VM_UID_COUNT (both VM runtimes); unset ones take the pool's defaults. */
export function vmUserSettingsFromEnv(env: NodeJS.ProcessEnv = process.env): VmUserSettings {
  const settings: VmUserSettings = {};
  if (env.SBX_VM_UID_BASE) settings.base = envInt('SBX_VM_UID_BASE', 0, env);
  if (env.SBX_VM_UID_COUNT) settings.count = positive('SBX_VM_UID_COUNT', envInt('SBX_VM_UID_COUNT', 0, env));
  return settings;
}
