import { modelSize, type ScalingRequest } from '../computer/scaling.js';
import { resolveScreenshotFormat, type ScreenshotFormatRequest } from '../computer/screenshot-format.js';
import type { NetworkOptions } from '../network/policy/network-policy.js';
import { newSessionId } from './session.js';
import type { ComputerToolVersion, OnIdle, SessionRecord } from './session-record.js';
import { idleDeadline, resolveLifetime, resolveRetention } from './timeouts.js';
import { checkVolumeMounts } from '../volumes/volume-names.js';

/** How long a paused session is kept unless the settings say otherwise (SBX_PAUSED_RETENTION_SECONDS). */
export const DEFAULT_PAUSED_RETENTION_SECONDS = 7 * 24 * 3600;

export interface CreateSessionOptions {
  /** The template to boot (default: the orchestrator's, DEFAULT_TEMPLATE). */
  template?: string;
  width?: number;
  height?: number;
  /** The model-facing screen size: 'auto' (default, as the reference), 'none', or a size. */
  scaling?: ScalingRequest;
  /** The computer-use tool version the session's tool definition declares. */
  toolVersion?: ComputerToolVersion;
  /** The default format of the session's screenshots (png unless asked), and its quality. */
  screenshot?: ScreenshotFormatRequest;
  timeoutSeconds?: number;
  /** Hard end of the session (running time), at most (and by default) its tenant's maximum (tenant-limits.ts). */
  maxLifetimeSeconds?: number;
  /** How long it may stay paused before it is destroyed, at most (and by default) its tenant's. */
  pausedRetentionSeconds?: number;
  metadata?: Record<string, unknown>;
  /** The guest network policy: `egress` lets the sandbox reach the internet (default off). */
  network?: Partial<NetworkOptions>;
  /** The trajectory (every call stored): typed text is kept as its length unless keepTypedText. */
  trajectory?: { keepTypedText?: boolean };
  /** Record the screen to a video from the start (see recording/). */
  record?: boolean;
  /** What the idle timeout does: destroy the session, or pause it (default: SBX_ON_IDLE, destroy). */
  onIdle?: OnIdle;
  /** A request to the session while paused resumes it first (default true, SBX_AUTO_RESUME) or answers 409 session_paused. */
  autoResume?: boolean;
  /** Volumes to mount (docs/volumes.md): the tenant's, each at a guest path, read-only if asked. */
  volumes?: Array<{ name: string; path: string; readOnly?: boolean }>;
  /** Start from this snapshot of the tenant's (a fork, docs/snapshots.md) instead of booting. */
  snapshot?: string;
}

/** Who a session is made for. */
export interface SessionOwner {
  tenant: string;
  /** The id a cluster's gateway placed in its directory (docs/cluster.md); otherwise a new one. */
  sessionId?: string;
  /** With sessionId: a warm sandbox may be claimed instead, under its own id (the gateway renames its row). */
  pooledIdAccepted?: boolean;
}

/** A create request with its defaults applied and checked: the record's requested part. */
export type SessionRequest = Pick<
  SessionRecord,
  | 'template'
  | 'width'
  | 'height'
  | 'modelWidth'
  | 'modelHeight'
  | 'toolVersion'
  | 'screenshotFormat'
  | 'screenshotQuality'
  | 'timeoutSeconds'
  | 'maxLifetimeSeconds'
  | 'pausedRetentionSeconds'
  | 'metadata'
  | 'egress'
  | 'onIdle'
  | 'autoResume'
  | 'volumes'
>;

export interface RequestDefaults {
  defaultTimeoutSeconds: number;
  /** The template of a session that names none. */
  template: string;
  /** The longest a session may live, and the lifetime of one that asks for none. */
  maxLifetimeSeconds: number;
  /** The longest a session may stay paused, and the retention of one that asks for none (default 7 days). */
  pausedRetentionSeconds?: number;
  /** Whose the two maximums are when not the orchestrator's, as a refusal says it (tenant-limits.ts). */
  whose?: { maxLifetimeSeconds?: string; pausedRetentionSeconds?: string };
  /** What an idle timeout does when the create says nothing (SBX_ON_IDLE; default destroy). */
  onIdle?: OnIdle;
  /** Whether a request resumes a paused session when the create says nothing (SBX_AUTO_RESUME; default true). */
  autoResume?: boolean;
}

/** Defaults applied and checked before anything is taken: a bad request leaves nothing to undo. */
export function resolveRequest(options: CreateSessionOptions, defaults: RequestDefaults, templateScreen?: { width: number; height: number }): SessionRequest {
  // A size asked for wins; else the template's default screen; else 1024x768.
  const asked = options.width !== undefined || options.height !== undefined;
  const width = options.width ?? (asked ? undefined : templateScreen?.width) ?? 1024;
  const height = options.height ?? (asked ? undefined : templateScreen?.height) ?? 768;
  const model = modelSize({ width, height }, options.scaling ?? 'auto');
  const screenshot = resolveScreenshotFormat(options.screenshot ?? {}, undefined, { format: 'screenshot.format', quality: 'screenshot.quality' });
  return {
    template: options.template ?? defaults.template,
    width,
    height,
    modelWidth: model.width,
    modelHeight: model.height,
    toolVersion: options.toolVersion ?? 'computer_20250124',
    screenshotFormat: screenshot.format,
    screenshotQuality: screenshot.quality ?? null,
    timeoutSeconds: options.timeoutSeconds ?? defaults.defaultTimeoutSeconds,
    // Checked here, before anything is taken: over the maximum is a 400, not a silent cut.
    maxLifetimeSeconds: resolveLifetime(options.maxLifetimeSeconds, defaults.maxLifetimeSeconds, defaults.whose?.maxLifetimeSeconds),
    pausedRetentionSeconds: resolveRetention(
      options.pausedRetentionSeconds,
      defaults.pausedRetentionSeconds ?? DEFAULT_PAUSED_RETENTION_SECONDS,
      defaults.whose?.pausedRetentionSeconds,
    ),
    metadata: options.metadata ?? {},
    egress: options.network?.egress ?? false,
    onIdle: options.onIdle ?? defaults.onIdle ?? 'destroy',
    autoResume: options.autoResume ?? defaults.autoResume ?? true,
    volumes: checkVolumeMounts(options.volumes),
  };
}

/** A new session's record, state 'creating', its clocks starting now. */
export function newRecord(
  request: SessionRequest,
  addressIndex: number | null,
  pooled: boolean,
  tenant: string,
  runtime: SessionRecord['runtime'],
  id = newSessionId(),
): SessionRecord {
  const now = new Date();
  return {
    id,
    tenant,
    state: 'creating',
    runtime,
    ...request,
    createdAt: now.toISOString(),
    updatedAt: now.toISOString(),
    expiresAt: startClocks(request, now),
    addressIndex,
    error: null,
    pooled,
    endReason: null,
    paused: null,
    pausedMs: 0,
  };
}

/** The first idle deadline of a session whose clocks start at `now`. */
export function startClocks(request: Pick<SessionRequest, 'maxLifetimeSeconds' | 'timeoutSeconds'>, now: Date): string {
  return idleDeadline({ createdAt: now.toISOString(), maxLifetimeSeconds: request.maxLifetimeSeconds, timeoutSeconds: request.timeoutSeconds }, now.getTime());
}
