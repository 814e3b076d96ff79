/** Errors the SDK throws, one class per kind of failure, so callers can branch on them. */
export class SandboxError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly code: string,
    /** Seconds the server asked to wait before trying again (Retry-After), when it said. */
    readonly retryAfterSeconds?: number,
  ) {
    super(message);
    this.name = new.target.name;
  }
}
export class InvalidRequestError extends SandboxError {}
export class NotFoundError extends SandboxError {}
export class SessionNotReadyError extends SandboxError {}
/** A person took the session over through a live view (409 human_in_control): retry after hand-back. */
export class HumanInControlError extends SessionNotReadyError {}
/** The session is paused and was created with autoResume off (409 session_paused): resume it first. */
export class SessionPausedError extends SessionNotReadyError {}
/** The session's sandbox vanished (410 session_gone): it is failed; delete it and make another. */
export class SessionGoneError extends SessionNotReadyError {}
/** The guest user may not read or write that file. */
export class PermissionDeniedError extends SandboxError {}
/** A file over the server's size limit. */
export class TooLargeError extends SandboxError {}
/** The host is full or the sandbox could not start (503); see retryAfterSeconds. */
export class UnavailableError extends SandboxError {}
/** No API key, or a wrong, expired or revoked one (401). */
export class AuthenticationError extends SandboxError {}
/** The tenant is at its session limit (429); see retryAfterSeconds. */
export class RateLimitError extends SandboxError {}

export function errorFor(status: number, code: string, message: string, retryAfterSeconds?: number): SandboxError {
  if (status === 400) return new InvalidRequestError(message, status, code);
  if (status === 401) return new AuthenticationError(message, status, code);
  if (status === 429) return new RateLimitError(message, status, code, retryAfterSeconds);
  if (status === 404) return new NotFoundError(message, status, code);
  if (status === 403) return new PermissionDeniedError(message, status, code);
  if (status === 409 && code === 'human_in_control') return new HumanInControlError(message, status, code);
  if (status === 409 && code === 'session_paused') return new SessionPausedError(message, status, code);
  if (status === 409) return new SessionNotReadyError(message, status, code);
  if (status === 410) return new SessionGoneError(message, status, code);
  if (status === 413) return new TooLargeError(message, status, code);
  if (status === 503) return new UnavailableError(message, status, code, retryAfterSeconds);
  return new SandboxError(message, status, code);
}
