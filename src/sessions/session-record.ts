import type { ImageFormat } from '../computer/screenshot-format.js';
import type { PauseMode, RuntimeName } from '../runtimes/runtime.js';
import type { VolumeMount } from '../volumes/volume-names.js';

export type ControlTransport = 'tcp' | 'unix' | 'vsock';

/** The transport of a sandbox with a NIC (`lease`) or without: TCP, or the runtime's socket. */
export function transportFor(hasLease: boolean, runtimeTransport: ControlTransport): ControlTransport {
  return hasLease ? 'tcp' : runtimeTransport;
}

export const COMPUTER_TOOL_VERSIONS = ['computer_20241022', 'computer_20250124', 'computer_20251124'] as const;
export type ComputerToolVersion = (typeof COMPUTER_TOOL_VERSIONS)[number];

export const SESSION_STATES = ['creating', 'ready', 'paused', 'destroying', 'destroyed', 'failed'] as const;
export type SessionState = (typeof SESSION_STATES)[number];

/** The tenant of sessions made without an API key (keyless local development). */
export const LOCAL_TENANT = 'local';
/**
 * Why a session ended: a client's DELETE, its idle timeout, its maximum lifetime, a failure
 * (its error says which), the orchestrator shutting down, or (a cluster's node) the cluster
 * having given it up while its node was lost (docs/cluster.md).
 */
export const END_REASONS = ['deleted', 'idle_timeout', 'max_lifetime', 'failed', 'shutdown', 'node_lost', 'paused_retention'] as const;
export type EndReason = (typeof END_REASONS)[number];

/** What is stored about a session, and what the API shows of it. */
export interface SessionRecord {
  id: string;
  /** Who owns it: the tenant of the API key that created it (LOCAL_TENANT without keys). */
  tenant: string;
  state: SessionState;
  runtime: RuntimeName;
  /** The template its sandbox boots (src/templates/catalogue.ts). */
  template: string;
  /** The real screen. */
  width: number;
  height: number;
  /** The screen as the model sees it (smaller when scaled). */
  modelWidth: number;
  modelHeight: number;
  /** Which computer-use tool version the session's tool definition declares. */
  toolVersion: ComputerToolVersion;
  /** The session's default screenshot format, and its quality (jpeg and webp; null for png). */
  screenshotFormat: ImageFormat;
  screenshotQuality: number | null;
  /** Idle timeout: destroyed this long after the last activity. */
  timeoutSeconds: number;
  /** Hard end, counted from createdAt in running time, at most its tenant's maximum (tenant-limits.ts). */
  maxLifetimeSeconds: number;
  metadata: Record<string, unknown>;
  createdAt: string;
  updatedAt: string;
  expiresAt: string;
  /** May the sandbox reach the internet (NAT)? Chosen at create time, off by default. */
  egress: boolean;
  /** The /30 block leased to it; null once released, and for a sandbox without a NIC. */
  addressIndex: number | null;
  /**
   * What carries its SSH control channel (absent: tcp, as in records older than the choice).
   * 'unix' or 'vsock' (always without egress): the sandbox has no network interface but lo,
   * and no address.
   */
  transport?: ControlTransport;
  /** The SHA-256 fingerprint of the host key pinned for it (OpenSSH's form), once its keys exist. */
  hostKeyFingerprint?: string | null;
  /** A fork: the snapshot it was started from (docs/snapshots.md). */
  snapshot?: string | null;
  /** Why it failed, when it did. */
  error: string | null;
  /**
   * A warm-pool sandbox no client has claimed yet (see pool/warm-pool.ts): stored so that a
   * restart reclaims it, but not a session anyone can see. Claiming it turns this off.
   */
  pooled: boolean;
  /** Why it ended (or is ending); null while it lives. */
  endReason: EndReason | null;
  /** While paused (state `paused`): how deep, since when, and the bytes of state it holds on disk. */
  paused: PausedState | null;
  /** The time it spent paused before the current pause, ms: the lifetime counts running time only. */
  pausedMs: number;
  /** How long it may stay paused before it is destroyed (its tenant's, or less if its create asked: tenant-limits.ts). */
  pausedRetentionSeconds: number;
  /** What its idle timeout does: destroy it (default) or pause it. */
  onIdle: OnIdle;
  /** A request to it while paused resumes it first (true) or answers 409 session_paused. */
  autoResume: boolean;
  /** The volumes mounted in it (docs/volumes.md), held while it lives. */
  volumes: VolumeMount[];
}

export const ON_IDLE = ['destroy', 'pause'] as const;
export type OnIdle = (typeof ON_IDLE)[number];

export interface PausedState {
  mode: PauseMode;
  since: string;
  bytes: number;
}
