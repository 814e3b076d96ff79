import { envInt, envNonNegative, envOptional, positive, type Env } from '../util/env.js';

/** What an operator sets for guest ports (api/routes/ports.ts). */
export interface PortSettings {
  /**
   * SBX_PORTS_DOMAIN: a wildcard domain whose names `<port>-<session id>.<domain>` reach a
   * guest port at the root path (for apps that need it). Unset: only path-based URLs.
   * The operator points `*.<domain>` at the orchestrator (DNS and, if any, the TLS proxy).
   */
  domain?: string;
  /** SBX_PORT_MAX_CHANNELS_PER_SESSION (default 32): requests and WebSockets open at once through one session's ports. */
  maxChannelsPerSession: number;
  /** SBX_PORT_IDLE_TIMEOUT_SECONDS (default 300): a proxied request or WebSocket that moves no byte either way this long is closed. */
  idleTimeoutMs: number;
  /**
   * SBX_PORT_KEEPALIVE_CHANNELS (default 2): idle channels kept open per session and guest port
   * after a request, for the next one (ports/channel-pool.ts). 0: a channel per request.
   */
  keepAliveChannelsPerPort: number;
}

export const DEFAULT_PORT_SETTINGS: PortSettings = { maxChannelsPerSession: 32, idleTimeoutMs: 300_000, keepAliveChannelsPerPort: 2 };

/** Beyond this many idle channels per port, keep-alive would hold more than it saves. */
const MAX_KEEPALIVE_CHANNELS_PER_PORT = 8;

/** A DNS name of letters, digits, hyphens and dots (no scheme, port or wildcard). */
const DOMAIN_PATTERN = /^(?=.{1,200}$)[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$/;

export function portSettingsFromEnv(env: Env): PortSettings {
  const raw = envOptional(env, 'SBX_PORTS_DOMAIN');
  const domain = raw?.trim().toLowerCase().replace(/^\*\./, '');
  if (domain !== undefined && domain !== '' && !DOMAIN_PATTERN.test(domain)) {
    throw new Error(`SBX_PORTS_DOMAIN must be a DNS name such as sbx.example.com (the URLs are <port>-<session>.<domain>), got "${raw}"`);
  }
  return {
    ...(domain ? { domain } : {}),
    maxChannelsPerSession: positive(
      'SBX_PORT_MAX_CHANNELS_PER_SESSION',
      envInt('SBX_PORT_MAX_CHANNELS_PER_SESSION', DEFAULT_PORT_SETTINGS.maxChannelsPerSession, env),
    ),
    idleTimeoutMs: 1000 * positive('SBX_PORT_IDLE_TIMEOUT_SECONDS', envInt('SBX_PORT_IDLE_TIMEOUT_SECONDS', DEFAULT_PORT_SETTINGS.idleTimeoutMs / 1000, env)),
    keepAliveChannelsPerPort: atMost(
      'SBX_PORT_KEEPALIVE_CHANNELS',
      envNonNegative('SBX_PORT_KEEPALIVE_CHANNELS', DEFAULT_PORT_SETTINGS.keepAliveChannelsPerPort, env),
      MAX_KEEPALIVE_CHANNELS_PER_PORT,
    ),
  };
}

function atMost(name: string, value: number, max: number): number {
  if (value > max) throw new Error(`${name} must be at most ${max}, got ${value}`);
  return value;
}
