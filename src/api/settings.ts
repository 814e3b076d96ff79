import { maxFileBytesFrom } from '../files/limits.js';
import { bashTimeoutFromEnv } from '../tools/bash/bash-tool.js';
import { bashOutputLimitsFromEnv, type BashOutputLimits } from '../tools/bash/output-budget.js';
import { envChoice, envInt, envString, positive, type Env } from '../util/env.js';
import { AUTH_SETTINGS, type AuthSetting } from './auth/auth-mode.js';
import { DEFAULT_TENANT_MAX_STREAMS } from './stream-slots.js';
import { DEFAULT_TENANT_REQUEST_LIMITS, parseTenantLimitOverrides, type TenantRequestLimits } from './tenant-request-limits.js';

/** What the HTTP API is told: where it listens, who may call it, how much each tenant may ask, what its tools may do. */
export interface ApiSettings {
  /** Address to listen on (SBX_HOST, `serve --host`, 127.0.0.1). */
  host: string;
  /** Port to listen on (SBX_PORT, `serve --port`, 8080). */
  port: number;
  /** API keys (SBX_AUTH, `serve --auth`): `auto` (required once a key exists, always off loopback), `on`, `off` (loopback only). */
  auth: AuthSetting;
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
  /** Server-Sent Event streams of one tenant open at once (SBX_TENANT_MAX_STREAMS, 8); they hold no request slot. */
  tenantMaxStreams: number;
  /** Largest file moved in either direction by the file routes (SBX_MAX_FILE_BYTES, 100 MiB). */
  maxFileBytes: number;
  /** Per-command timeout of the bash tool (SBX_BASH_TIMEOUT_SECONDS, 120). */
  bashTimeoutSeconds: number;
  /** How much of a shell's output the orchestrator reads, and how fast (SBX_BASH_OUTPUT_*, SBX_BASH_UNREAD_OUTPUT_BYTES). */
  bashOutput: BashOutputLimits;
}

export function apiSettingsFromEnv(env: Env): ApiSettings {
  return {
    host: envString(env, 'SBX_HOST', '127.0.0.1'),
    port: envInt('SBX_PORT', 8080, env),
    auth: envChoice('SBX_AUTH', AUTH_SETTINGS, 'auto', env),
    headersTimeoutMs: positive('SBX_HEADERS_TIMEOUT_MS', envInt('SBX_HEADERS_TIMEOUT_MS', 10_000, env)),
    requestTimeoutMs: positive('SBX_REQUEST_TIMEOUT_MS', envInt('SBX_REQUEST_TIMEOUT_MS', 120_000, env)),
    sendTimeoutMs: positive('SBX_SEND_TIMEOUT_MS', envInt('SBX_SEND_TIMEOUT_MS', 30_000, env)),
    tenantMaxConcurrentRequests: positive(
      'SBX_TENANT_MAX_CONCURRENT_REQUESTS',
      envInt('SBX_TENANT_MAX_CONCURRENT_REQUESTS', DEFAULT_TENANT_REQUEST_LIMITS.maxConcurrent, env),
    ),
    tenantRequestsPerSecond: positive('SBX_TENANT_REQUESTS_PER_SECOND', envInt('SBX_TENANT_REQUESTS_PER_SECOND', DEFAULT_TENANT_REQUEST_LIMITS.perSecond, env)),
    tenantRequestBurst: positive('SBX_TENANT_REQUEST_BURST', envInt('SBX_TENANT_REQUEST_BURST', DEFAULT_TENANT_REQUEST_LIMITS.burst, env)),
    tenantRequestLimitOverrides: parseTenantLimitOverrides(envString(env, 'SBX_TENANT_REQUEST_LIMITS', '')),
    tenantMaxStreams: positive('SBX_TENANT_MAX_STREAMS', envInt('SBX_TENANT_MAX_STREAMS', DEFAULT_TENANT_MAX_STREAMS, env)),
    maxFileBytes: maxFileBytesFrom(env),
    bashTimeoutSeconds: bashTimeoutFromEnv(env),
    bashOutput: bashOutputLimitsFromEnv(env),
  };
}
