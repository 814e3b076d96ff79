/**
 * What a gateway is told (`sbx gateway`; docs/configuration.md). Read by the entry point
 * with gatewaySettingsFromEnv and handed to createGateway: nothing here reads the process.
 *
 * A create names at most a template; its size is the nodes' session size. The gateway must
 * place it with the size the node will give it, so it reads the same variables the nodes
 * read (SBX_MEMORY_MIB, SBX_CPUS / SBX_QEMU_SMP / SBX_FC_VCPUS, SBX_TEMPLATE, SBX_RUNTIME):
 * give gateways and nodes the same values.
 */
import type { ConnectionLimits } from '../../api/connection-limits.js';
import { DEFAULT_CONNECTION_LIMITS } from '../../api/connection-limits.js';
import { RUNTIMES, type RuntimeName } from '../../runtimes/registered.js';
import { runtimeChoiceFromEnv, type RuntimeChoice } from '../../runtimes/settings.js';
import { sandboxMemoryMiBFromEnv } from '../../runtimes/sandbox-settings.js';
import { templateFromEnv } from '../../sessions/settings.js';
import { portSettingsFromEnv } from '../../ports/settings.js';
import { atLeast, envInt, positive, type Env } from '../../util/env.js';
import { DEFAULT_VOLUME_SETTINGS, volumeSettingsFromEnv, type VolumeSettings } from '../../volumes/settings.js';

export interface GatewaySettings {
  /** The template of a create that names none (SBX_TEMPLATE, as on the nodes). */
  template: string;
  /** The runtime creates are placed for (SBX_RUNTIME; `auto`: the first of firecracker, qemu, container that an up node runs). */
  runtime: RuntimeChoice;
  /** Memory of one session, MiB (SBX_MEMORY_MIB, as on the nodes). */
  memoryMiB: number;
  /** vCPUs of one session by runtime (SBX_CPUS, SBX_QEMU_SMP, SBX_FC_VCPUS, as on the nodes). */
  vcpus: Readonly<Record<RuntimeName, number>>;
  /**
   * A tenant's sessions in the whole cluster (SBX_MAX_SESSIONS_PER_TENANT, 10, as on the
   * nodes, which still enforce it each on its own), checked by the placement statement.
   */
  maxSessionsPerTenant: number;
  /** A node silent this long is marked lost by the sweep (SBX_NODE_LOST_AFTER_MS, 10 s). */
  lostAfterMs: number;
  /** How often the sweep runs (2 s: a node is lost within lostAfterMs + this + a heartbeat). */
  sweepIntervalMs: number;
  /** How long an API key's record is reused before it is read again (a revoked key stops within this; at most 2 s). */
  keyCacheMs: number;
  /** How long a directory entry and the node list are reused (1 s; never a `lost` answer replaced by a cached one). */
  directoryCacheMs: number;
  /** A store call that takes longer is answered 503 cluster_state_unavailable (2 s). */
  storeTimeoutMs: number;
  /** Connecting to a node (3 s), and waiting for its answer's headers (10 min: a boot, a long bash command). */
  nodeConnectTimeoutMs: number;
  nodeAnswerTimeoutMs: number;
  /** The same slow-client limits as `sbx serve` (SBX_HEADERS_TIMEOUT_MS, SBX_REQUEST_TIMEOUT_MS, SBX_SEND_TIMEOUT_MS). */
  connectionLimits: ConnectionLimits;
  /**
   * SBX_PORTS_DOMAIN, as on the nodes (give both the same): a request to `<port>-<id>.<domain>`
   * is routed as that session's port and forwarded with its Host, which the node reads again.
   */
  portsDomain?: string;
  /**
   * Volume sizes and each tenant's quota in the whole cluster (SBX_VOLUME_MAX_MIB,
   * SBX_VOLUME_QUOTA_MIB, SBX_VOLUME_QUOTA_COUNT, as on the nodes, which enforce them each on its own disk).
   */
  volumes: VolumeSettings;
}

export const DEFAULT_GATEWAY_SETTINGS: GatewaySettings = {
  template: 'desktop',
  runtime: 'auto',
  memoryMiB: 1024,
  vcpus: RUNTIMES.vcpusByRuntime(RUNTIMES.settingsFromEnv({})),
  maxSessionsPerTenant: 10,
  lostAfterMs: 10_000,
  sweepIntervalMs: 2_000,
  keyCacheMs: 1_000,
  directoryCacheMs: 1_000,
  storeTimeoutMs: 2_000,
  nodeConnectTimeoutMs: 3_000,
  nodeAnswerTimeoutMs: 600_000,
  connectionLimits: DEFAULT_CONNECTION_LIMITS,
  volumes: DEFAULT_VOLUME_SETTINGS,
};

export function gatewaySettingsFromEnv(env: Env): GatewaySettings {
  const portsDomain = portSettingsFromEnv(env).domain;
  return {
    ...DEFAULT_GATEWAY_SETTINGS,
    ...(portsDomain !== undefined ? { portsDomain } : {}),
    template: templateFromEnv(env),
    runtime: runtimeChoiceFromEnv(env),
    memoryMiB: sandboxMemoryMiBFromEnv(env),
    vcpus: RUNTIMES.vcpusByRuntime(RUNTIMES.settingsFromEnv(env)),
    maxSessionsPerTenant: positive('SBX_MAX_SESSIONS_PER_TENANT', envInt('SBX_MAX_SESSIONS_PER_TENANT', 10, env)),
    volumes: volumeSettingsFromEnv(env),
    lostAfterMs: atLeast('SBX_NODE_LOST_AFTER_MS', envInt('SBX_NODE_LOST_AFTER_MS', 10_000, env), 1_000),
    connectionLimits: {
      headersTimeoutMs: positive('SBX_HEADERS_TIMEOUT_MS', envInt('SBX_HEADERS_TIMEOUT_MS', DEFAULT_CONNECTION_LIMITS.headersTimeoutMs, env)),
      requestTimeoutMs: positive('SBX_REQUEST_TIMEOUT_MS', envInt('SBX_REQUEST_TIMEOUT_MS', DEFAULT_CONNECTION_LIMITS.requestTimeoutMs, env)),
      sendTimeoutMs: positive('SBX_SEND_TIMEOUT_MS', envInt('SBX_SEND_TIMEOUT_MS', DEFAULT_CONNECTION_LIMITS.sendTimeoutMs, env)),
    },
  };
}

/** The runtimes `auto` places for, most preferred first (as the registry prefers them on a host). */
export const AUTO_RUNTIME_ORDER: readonly RuntimeName[] = RUNTIMES.autoOrder;
