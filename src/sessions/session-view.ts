import type { RecordingStatus } from '../recording/session-recorder.js';
import { geminiToolDefinition, openaiToolDefinition, type GeminiToolDefinition, type OpenAIToolDefinition } from '../vendors/tool-definitions.js';
import type { ControlTransport, EndReason, SessionRecord } from './session-record.js';
import { lifetimeEnd, pausedUntil } from './timeouts.js';

export interface ComputerToolDefinition {
  type: SessionRecord['toolVersion'];
  name: 'computer';
  display_width_px: number;
  display_height_px: number;
  enable_zoom?: boolean;
}

/** What an agent passes in `tools` to the Messages API for this session, as is. */
export function computerToolDefinition(record: SessionRecord): ComputerToolDefinition {
  const definition: ComputerToolDefinition = {
    type: record.toolVersion,
    name: 'computer',
    display_width_px: record.modelWidth,
    display_height_px: record.modelHeight,
  };
  if (record.toolVersion === 'computer_20251124') definition.enable_zoom = true;
  return definition;
}

/** A session as the API shows it. */
export interface SessionView {
  id: string;
  /** The tenant that owns it (the API key's; `local` without keys). */
  tenant: string;
  state: SessionRecord['state'];
  runtime: SessionRecord['runtime'];
  /** The template its sandbox booted. */
  template: string;
  display: { width: number; height: number };
  /** A ready tool definition for the Messages API, in the model's (scaled) space. */
  computerTool: ComputerToolDefinition;
  /** Each vendor's tool definition for this session (anthropic is computerTool). */
  tools: { anthropic: ComputerToolDefinition; openai: OpenAIToolDefinition; gemini: GeminiToolDefinition };
  /** The default format of its screenshots (a request may ask for another). */
  screenshot: { format: SessionRecord['screenshotFormat']; quality?: number };
  timeoutSeconds: number;
  maxLifetimeSeconds: number;
  metadata: Record<string, unknown>;
  /**
   * The guest network policy chosen at create time, what carries the control channel, and
   * the sandbox's interfaces (lo alone: no NIC, reached over a Unix socket, no egress).
   */
  network: { egress: boolean; transport: ControlTransport; interfaces: string[] };
  createdAt: string;
  /** When it ends unless used again (never after lifetimeEndsAt). */
  expiresAt: string;
  /** When it ends whatever happens: createdAt + maxLifetimeSeconds. */
  lifetimeEndsAt: string;
  error?: string;
  endReason?: EndReason;
  /** Its recording, if it was recorded (in progress, finished, or failed with why). */
  recording?: RecordingStatus;
  /** Present while a person holds the desktop through a live view: agent actions answer 409 human_in_control. */
  control?: { heldBy: string; since: string };
  /** While paused: how, since when, and the bytes of state it holds on disk; null while it runs. */
  paused: SessionRecord['paused'];
  /** How long it may stay paused before it is destroyed (its tenant's, or less if its create asked). */
  pausedRetentionSeconds: number;
  /** While paused: when it is destroyed unless resumed (paused.since + pausedRetentionSeconds). */
  pausedUntil?: string;
  /** What its idle timeout does. */
  onIdle: SessionRecord['onIdle'];
  /** A request to it while paused resumes it first, or answers 409 session_paused. */
  autoResume: boolean;
  /** The volumes mounted in it (absent: none). */
  volumes?: SessionRecord['volumes'];
  /** The SHA-256 fingerprint of the host key the orchestrator pins for its guest (`ssh-keygen -lf` form). */
  hostKeyFingerprint?: string;
  /** A fork: the snapshot it was started from (docs/snapshots.md). */
  snapshot?: string;
}

/** How the sandbox is reached and what interfaces it has (the choice made at create: lifecycle.ts). */
export function networkView(record: Pick<SessionRecord, 'egress' | 'transport'>): SessionView['network'] {
  const transport = record.transport ?? 'tcp';
  return { egress: record.egress, transport, interfaces: transport !== 'tcp' && !record.egress ? ['lo'] : ['lo', 'eth0'] };
}

/** The session's default screenshot format, as a request would spell it. */
export function screenshotDefault(record: Pick<SessionRecord, 'screenshotFormat' | 'screenshotQuality'>): {
  format: SessionRecord['screenshotFormat'];
  quality?: number;
} {
  return record.screenshotQuality === null ? { format: record.screenshotFormat } : { format: record.screenshotFormat, quality: record.screenshotQuality };
}

export function toView(record: SessionRecord, recording?: RecordingStatus, control?: { heldBy: string; since: string }): SessionView {
  const view: SessionView = {
    id: record.id,
    tenant: record.tenant,
    state: record.state,
    runtime: record.runtime,
    template: record.template,
    display: { width: record.width, height: record.height },
    computerTool: computerToolDefinition(record),
    tools: {
      anthropic: computerToolDefinition(record),
      openai: openaiToolDefinition({ width: record.modelWidth, height: record.modelHeight }),
      gemini: geminiToolDefinition(),
    },
    screenshot: screenshotDefault(record),
    timeoutSeconds: record.timeoutSeconds,
    maxLifetimeSeconds: record.maxLifetimeSeconds,
    metadata: record.metadata,
    network: networkView(record),
    createdAt: record.createdAt,
    expiresAt: record.expiresAt,
    // Paused: the lifetime stands still (running time only), so it ends later by the pause so far.
    lifetimeEndsAt: new Date(lifetimeEnd(record) + (record.paused ? Math.max(0, Date.now() - Date.parse(record.paused.since)) : 0)).toISOString(),
    paused: record.paused ? { ...record.paused } : null,
    pausedRetentionSeconds: record.pausedRetentionSeconds,
    onIdle: record.onIdle,
    autoResume: record.autoResume,
  };
  const until = pausedUntil(record);
  if (until !== undefined) view.pausedUntil = new Date(until).toISOString();
  if (record.error) view.error = record.error;
  if (record.endReason) view.endReason = record.endReason;
  if (recording) view.recording = recording;
  if (control) view.control = { ...control };
  if (record.volumes.length > 0) view.volumes = record.volumes.map((v) => ({ ...v }));
  if (record.hostKeyFingerprint) view.hostKeyFingerprint = record.hostKeyFingerprint;
  if (record.snapshot) view.snapshot = record.snapshot;
  return view;
}
