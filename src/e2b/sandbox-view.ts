import type { SessionView } from '../sessions/session-view.js';
import type { E2bSandboxRow } from './sandbox-store.js';

/**
 * The envd version this surface says it speaks. The SDK gates features on it (e2b 2.51.0):
 * >= 0.4.0 so that a command without `user` is not sent as a named user, >= 0.5.2 for
 * closeStdin, >= 0.5.7 for octet-stream uploads; below 0.6.2, so that it does not send file
 * metadata, and 0.6.3, so that it asks for no entry in watch events (neither is served).
 */
export const ENVD_VERSION = '0.5.7';
/** E2B's clientID: one orchestrator is one "client". */
const CLIENT_ID = 'sbx';

/** E2B's sandbox state of one of our sessions (creating counts as running, as E2B's API answers only once it runs). */
export function e2bState(session: Pick<SessionView, 'state'>): 'running' | 'paused' | undefined {
  if (session.state === 'ready' || session.state === 'creating') return 'running';
  if (session.state === 'paused') return 'paused';
  return undefined;
}

/** E2B's metadata: strings only (ours may hold any JSON; the rest is said as JSON). */
export function e2bMetadata(metadata: Record<string, unknown>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [key, value] of Object.entries(metadata)) out[key] = typeof value === 'string' ? value : JSON.stringify(value);
  return out;
}

/** A session as E2B's GET /sandboxes/:id and the listings answer it. */
export function sandboxDetail(session: SessionView, row: E2bSandboxRow | undefined, domain: string | undefined): Record<string, unknown> {
  return {
    sandboxID: session.id,
    templateID: row?.templateId ?? session.template,
    alias: row?.templateId ?? session.template,
    clientID: CLIENT_ID,
    startedAt: session.createdAt,
    endAt: session.expiresAt,
    state: e2bState(session) ?? 'running',
    cpuCount: 1,
    memoryMB: 1024,
    diskSizeMB: 0,
    envdVersion: ENVD_VERSION,
    metadata: e2bMetadata(session.metadata),
    allowInternetAccess: session.network.egress,
    domain: domain ?? null,
    volumeMounts: [],
  };
}

/** What a create or a connect answers: the detail's core, with the envd access token. */
export function sandboxAccess(session: SessionView, row: E2bSandboxRow | undefined, token: string, domain: string | undefined): Record<string, unknown> {
  return {
    sandboxID: session.id,
    templateID: row?.templateId ?? session.template,
    alias: row?.templateId ?? session.template,
    clientID: CLIENT_ID,
    envdVersion: ENVD_VERSION,
    envdAccessToken: token,
    trafficAccessToken: null,
    domain: domain ?? null,
  };
}

/**
 * The SDK's metadata filter: `k=v&k2=v2` with each key and value URI-encoded (the SDK encodes
 * them, then the query string once more). A session matches when every pair is in its metadata.
 */
export function parseMetadataFilter(raw: string | undefined): Array<[string, string]> {
  if (raw === undefined || raw === '') return [];
  const pairs: Array<[string, string]> = [];
  for (const [key, value] of new URLSearchParams(raw)) pairs.push([safeDecode(key), safeDecode(value)]);
  return pairs;
}

function safeDecode(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}
