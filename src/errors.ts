/**
 * Errors that reach a client. Each carries the HTTP status and a stable code, so the API
 * can answer with them directly and the SDK can turn them back into the same classes.
 */
export class OrchestratorError extends Error {
  constructor(
    message: string,
    readonly statusCode: number,
    readonly code: string,
    /** Response headers that belong to this error (WWW-Authenticate, Retry-After). */
    readonly headers: Readonly<Record<string, string>> = {},
  ) {
    super(message);
    this.name = new.target.name;
  }
}

/** The request is wrong; the message names the field and what is expected of it. */
export class InvalidRequestError extends OrchestratorError {
  constructor(message: string) {
    super(message, 400, 'invalid_request');
  }
}

export class NotFoundError extends OrchestratorError {
  constructor(message: string) {
    super(message, 404, 'not_found');
  }
}

/** The session exists but is not in a state that allows this (e.g. destroyed, still creating). */
export class SessionStateError extends OrchestratorError {
  constructor(message: string) {
    super(message, 409, 'session_not_ready');
  }
}

/**
 * The session's sandbox vanished (its process died, its network was deleted): the session is
 * failed, its resources are released, and nothing more can be done with it but delete it.
 */
export class SessionGoneError extends OrchestratorError {
  constructor(message: string) {
    super(message, 410, 'session_gone');
  }
}

/** A session already driven by a run: one run at a time per session (a tenant's runs are bounded by its sessions). */
export class RunInProgressError extends OrchestratorError {
  constructor(message: string) {
    super(message, 409, 'run_in_progress');
  }
}

/** The built-in loop has no Anthropic API key: said before any sandbox is made for a run. */
export class ModelKeyMissingError extends OrchestratorError {
  constructor(message: string) {
    super(message, 503, 'anthropic_key_missing');
  }
}

/**
 * A person holds the session through a live view's "Take over" (views/takeover.ts): the
 * agent's actions wait until it is handed back. The tool routes answer it as a tool error.
 */
export class HumanInControlError extends OrchestratorError {
  constructor(message: string) {
    super(message, 409, 'human_in_control');
  }
}

/** The sandbox could not be made or reached; nothing was left behind. */
export class UnavailableError extends OrchestratorError {
  constructor(message: string) {
    super(message, 503, 'unavailable');
  }
}

/**
 * No valid API key. The challenge follows RFC 6750: a request without credentials gets the
 * bare scheme, a bad key also `error="invalid_token"`, so clients can tell the two apart.
 */
export class AuthenticationError extends OrchestratorError {
  constructor(message: string, code: 'missing_api_key' | 'invalid_api_key' | 'expired_api_key' | 'revoked_api_key') {
    const challenge = code === 'missing_api_key' ? 'Bearer realm="sbx"' : 'Bearer realm="sbx", error="invalid_token"';
    super(message, 401, code, { 'www-authenticate': challenge });
  }
}

/** A request to a cluster's node that did not come from one of its gateways (docs/cluster.md). */
export class ClusterCredentialError extends OrchestratorError {
  constructor(message: string) {
    super(message, 401, 'cluster_credential_required');
  }
}

/** The tenant already has as many sessions as it may: it can destroy one, or retry later. */
export class TenantLimitError extends OrchestratorError {
  constructor(message: string, retryAfterSeconds: number) {
    super(message, 429, 'tenant_session_limit', { 'retry-after': String(retryAfterSeconds) });
  }
}

/** The host is full (sessions or memory): nothing was taken; retry later, or elsewhere. */
export class HostCapacityError extends OrchestratorError {
  constructor(message: string, code: 'host_session_limit' | 'host_memory_low' | 'host_disk_low', retryAfterSeconds: number) {
    super(message, 503, code, { 'retry-after': String(retryAfterSeconds) });
  }
}

/** The guest network policy is not in force (changed or removed on the host): no session is created until it is back. */
export class NetworkPolicyUnavailableError extends OrchestratorError {
  constructor(retryAfterSeconds: number, message: string) {
    super(message, 503, 'network_policy_unavailable', { 'retry-after': String(retryAfterSeconds) });
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
    super(message, 502, 'guest_protocol_error');
  }
}

/**
 * The session is paused (POST /v1/sessions/:id/pause, or its idle timeout with onIdle
 * "pause") and was created with autoResume off: resume it first (POST .../resume).
 */
export class SessionPausedError extends OrchestratorError {
  constructor(message: string) {
    super(message, 409, 'session_paused');
  }
}

/** A pause or resume that does not fit the session's state: pausing a paused session, resuming a running one. */
export class PauseStateError extends OrchestratorError {
  constructor(message: string, code: 'session_already_paused' | 'session_not_paused' | 'session_busy') {
    super(message, 409, code);
  }
}

/** The pause mode asked for cannot be done by this runtime on this host; the message says why. */
export class PauseModeUnavailableError extends OrchestratorError {
  constructor(message: string) {
    super(message, 409, 'pause_mode_unavailable');
  }
}
