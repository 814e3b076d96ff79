import { DEFAULT_VIEWER_LIMITS } from './rfb-proxy.js';
import type { LiveViewSettings } from './live-views.js';

/**
 * Live-view defaults. A link lives an hour unless asked otherwise (a day at most); eight
 * browsers may watch one session at once; a takeover outlives its last viewer by 15 s, so a
 * reload keeps it and a closed tab gives the desktop back to the agent.
 */
export const DEFAULT_LIVE_VIEW_SETTINGS: LiveViewSettings = {
  defaultTtlSeconds: 3600,
  maxTtlSeconds: 86_400,
  maxViewersPerSession: 8,
  takeoverGraceMs: 15_000,
  viewer: DEFAULT_VIEWER_LIMITS,
};
