/** Errors the SDK throws, one class per kind of failure, so callers can branch on them. */
export class SandboxError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly code: string,
  ) {
    super(message);
    this.name = new.target.name;
  }
}
export class InvalidRequestError extends SandboxError {}
export class NotFoundError extends SandboxError {}
export class SessionNotReadyError extends SandboxError {}
/** The guest user may not read or write that file. */
export class PermissionDeniedError extends SandboxError {}
/** A file over the server's size limit. */
export class TooLargeError extends SandboxError {}
export class UnavailableError extends SandboxError {}

export function errorFor(status: number, code: string, message: string): SandboxError {
  if (status === 400) return new InvalidRequestError(message, status, code);
  if (status === 404) return new NotFoundError(message, status, code);
  if (status === 403) return new PermissionDeniedError(message, status, code);
  if (status === 409) return new SessionNotReadyError(message, status, code);
  if (status === 413) return new TooLargeError(message, status, code);
  if (status === 503) return new UnavailableError(message, status, code);
  return new SandboxError(message, status, code);
}
