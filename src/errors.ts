/**
 * Errors that reach a client. Each carries the HTTP status and a stable code, so the API
 * can answer with them directly and the SDK can turn them back into the same classes.
 */
export class OrchestratorError extends Error {
  constructor(
    message: string,
    readonly statusCode: number,
    readonly code: string,
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

/** The sandbox could not be made or reached; nothing was left behind. */
export class UnavailableError extends OrchestratorError {
  constructor(message: string) {
    super(message, 503, 'unavailable');
  }
}
