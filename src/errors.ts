import { ERROR_CODES, type CodeOf, type ErrorCategory, type ErrorCode } from './error-codes.js';

export { ERROR_CATEGORIES, ERROR_CODES, type CodeOf, type ErrorCategory, type ErrorCode } from './error-codes.js';

export interface ErrorOptions {
  /** Seconds after which trying again may succeed (a quota, a full host): the API's Retry-After. */
  readonly retryAfterSeconds?: number;
}

/**
 * An error that reaches a client: a code of the registry (error-codes.ts), whose category
 * says what kind of failure it is, and a message for the caller. What it becomes on the
 * wire (the HTTP status, the headers) is the API's to say, once, in api/errors.ts.
 */
export class OrchestratorError extends Error {
  readonly category: ErrorCategory;
  readonly retryAfterSeconds: number | undefined;

  constructor(
    readonly code: ErrorCode,
    message: string,
    options: ErrorOptions = {},
  ) {
    super(message);
    this.name = new.target.name;
    this.category = ERROR_CODES[code].category;
    this.retryAfterSeconds = options.retryAfterSeconds;
  }
}

/** The request is wrong; the message names the field and what is expected of it. */
export class InvalidRequestError extends OrchestratorError {
  constructor(message: string) {
    super('invalid_request', message);
  }
}

export class NotFoundError extends OrchestratorError {
  constructor(message: string) {
    super('not_found', message);
  }
}

/** The session exists but is not in a state that allows this (e.g. destroyed, still creating). */
export class SessionStateError extends OrchestratorError {
  constructor(message: string) {
    super('session_not_ready', message);
  }
}

/**
 * The session's sandbox vanished (its process died, its network was deleted): the session is
 * failed, its resources are released, and nothing more can be done with it but delete it.
 */
export class SessionGoneError extends OrchestratorError {
  constructor(message: string) {
    super('session_gone', message);
  }
}

/** A session already driven by a run: one run at a time per session (a tenant's runs are bounded by its sessions). */
export class RunInProgressError extends OrchestratorError {
  constructor(message: string) {
    super('run_in_progress', message);
  }
}

/** The built-in loop has no Anthropic API key: said before any sandbox is made for a run. */
export class ModelKeyMissingError extends OrchestratorError {
  constructor(message: string) {
    super('anthropic_key_missing', message);
  }
}

/**
 * A person holds the session through a live view's "Take over" (views/takeover.ts): the
 * agent's actions wait until it is handed back. The tool routes answer it as a tool error.
 */
export class HumanInControlError extends OrchestratorError {
  constructor(message: string) {
    super('human_in_control', message);
  }
}

/** The sandbox could not be made or reached; nothing was left behind. */
export class UnavailableError extends OrchestratorError {
  constructor(message: string, code: CodeOf<'unavailable'> = 'unavailable', options: ErrorOptions = {}) {
    super(code, message, options);
  }
}

/** No valid API key (the API adds the RFC 6750 challenge that tells a missing key from a bad one). */
export class AuthenticationError extends OrchestratorError {
  constructor(message: string, code: 'missing_api_key' | 'invalid_api_key' | 'expired_api_key' | 'revoked_api_key') {
    super(code, message);
  }
}

/** A request to a cluster's node that did not come from one of its gateways (docs/cluster.md). */
export class ClusterCredentialError extends OrchestratorError {
  constructor(message: string) {
    super('cluster_credential_required', message);
  }
}

/** One of the tenant's quotas is used up (sessions, requests, streams, viewers, runs): retry later. */
export class LimitError extends OrchestratorError {
  constructor(message: string, code: CodeOf<'limit'>, retryAfterSeconds: number) {
    super(code, message, { retryAfterSeconds });
  }
}

/** The tenant already has as many sessions as it may: it can destroy one, or retry later. */
export class TenantLimitError extends LimitError {
  constructor(message: string, retryAfterSeconds: number) {
    super(message, 'tenant_session_limit', retryAfterSeconds);
  }
}

/** The host is full (sessions or memory): nothing was taken; retry later, or elsewhere. */
export class HostCapacityError extends UnavailableError {
  constructor(message: string, code: 'host_session_limit' | 'host_memory_low' | 'host_disk_low', retryAfterSeconds: number) {
    super(message, code, { retryAfterSeconds });
  }
}

/** The guest network policy is not in force (changed or removed on the host): no session is created until it is back. */
export class NetworkPolicyUnavailableError extends UnavailableError {
  constructor(retryAfterSeconds: number, message: string) {
    super(message, 'network_policy_unavailable', { retryAfterSeconds });
  }
}

/** Which stream of a guest broke its protocol (the label of the metric). */
export type GuestChannelName = 'capture' | 'input' | 'desktop' | 'bash' | 'exec';

/**
 * A guest sent something its protocol does not allow: a frame header that does not fit the
 * session's screen, more output than that channel may hold, an end marker that never ends.
 * Anything in a guest can be replaced by whoever controls its desktop, so this is the
 * guest's fault, never ours: that request fails with a 502, the channel is closed, nothing
 * the guest announced was allocated. `reason` is a short stable word for the metric.
 */
export class GuestProtocolError extends OrchestratorError {
  constructor(
    readonly channel: GuestChannelName,
    readonly reason: string,
    message: string,
  ) {
    super('guest_protocol_error', message);
  }
}

/**
 * The session is paused (POST /v1/sessions/:id/pause, or its idle timeout with onIdle
 * "pause") and was created with autoResume off: resume it first (POST .../resume).
 */
export class SessionPausedError extends OrchestratorError {
  constructor(message: string) {
    super('session_paused', message);
  }
}

/** A pause or resume that does not fit the session's state: pausing a paused session, resuming a running one. */
export class PauseStateError extends OrchestratorError {
  constructor(message: string, code: 'session_already_paused' | 'session_not_paused' | 'session_busy') {
    super(code, message);
  }
}

/** The pause mode asked for cannot be done by this runtime on this host; the message says why. */
export class PauseModeUnavailableError extends OrchestratorError {
  constructor(message: string) {
    super('pause_mode_unavailable', message);
  }
}
