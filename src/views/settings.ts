import { envInt, positive, type Env } from '../util/env.js';
import { DEFAULT_VIEWER_LIMITS } from './rfb-proxy.js';
import type { LiveViewSettings } from './live-views.js';

/** The live-view caps an operator sets (the rest of LiveViewSettings are fixed defaults). */
export type LiveViewCaps = Pick<LiveViewSettings, 'maxViewersPerSession' | 'maxViewersPerTenant'>;

/**
 * Live-view defaults. A link lives an hour unless asked otherwise (a day at most); eight
 * browsers may watch one session at once and sixteen all of a tenant's sessions (each one
 * that stops reading may hold ~6 MiB of the orchestrator's memory for `stallMs`: its
 * buffer up to the high water mark plus the SSH channel's window); a takeover outlives its
 * last viewer by 15 s, so a reload keeps it and a closed tab gives the desktop back to the agent.
 */
export const DEFAULT_LIVE_VIEW_SETTINGS: LiveViewSettings = {
  defaultTtlSeconds: 3600,
  maxTtlSeconds: 86_400,
  maxViewersPerSession: 8,
  maxViewersPerTenant: 16,
  takeoverGraceMs: 15_000,
  viewer: DEFAULT_VIEWER_LIMITS,
};

export function liveViewCapsFromEnv(env: Env): LiveViewCaps {
  return {
    maxViewersPerSession: positive('SBX_MAX_VIEWERS_PER_SESSION', envInt('SBX_MAX_VIEWERS_PER_SESSION', DEFAULT_LIVE_VIEW_SETTINGS.maxViewersPerSession, env)),
    maxViewersPerTenant: positive('SBX_MAX_VIEWERS_PER_TENANT', envInt('SBX_MAX_VIEWERS_PER_TENANT', DEFAULT_LIVE_VIEW_SETTINGS.maxViewersPerTenant, env)),
  };
}
