import type { FastifyError } from 'fastify';
import { httpStatusOf } from '../api/errors.js';
import { publicSummary } from '../api/public-message.js';
import { OrchestratorError, type ErrorCode } from '../errors.js';

/** A failure as the E2B surface says it: the HTTP status, Connect's code, a message and our code. */
export interface E2bFailure {
  status: number;
  connectCode: ConnectCode;
  message: string;
  /** Our error code (error-codes.ts), for the log and for the message's prefix. */
  code: ErrorCode;
}

/** Connect's error codes (connectrpc.com/docs/protocol#error-codes) that we answer with. */
export type ConnectCode =
  | 'invalid_argument'
  | 'unauthenticated'
  | 'permission_denied'
  | 'not_found'
  | 'already_exists'
  | 'failed_precondition'
  | 'resource_exhausted'
  | 'unimplemented'
  | 'unavailable'
  | 'deadline_exceeded'
  | 'internal';

/** The HTTP status Connect's unary protocol gives each code (and clients read back). */
export const CONNECT_HTTP_STATUS: Readonly<Record<ConnectCode, number>> = {
  invalid_argument: 400,
  unauthenticated: 401,
  permission_denied: 403,
  not_found: 404,
  already_exists: 409,
  failed_precondition: 412,
  resource_exhausted: 429,
  unimplemented: 501,
  unavailable: 503,
  deadline_exceeded: 504,
  internal: 500,
};

const CONNECT_OF_CODE: Partial<Record<ErrorCode, ConnectCode>> = {
  already_exists: 'already_exists',
  directory_not_empty: 'failed_precondition',
  not_a_directory: 'failed_precondition',
  is_a_directory: 'invalid_argument',
  process_exited: 'not_found',
  stdin_closed: 'failed_precondition',
  session_paused: 'failed_precondition',
  session_not_ready: 'unavailable',
  permission_denied: 'permission_denied',
  e2b_unsupported: 'unimplemented',
};

function connectCodeOf(code: ErrorCode, status: number): ConnectCode {
  const named = CONNECT_OF_CODE[code];
  if (named) return named;
  if (status === 400 || status === 413 || status === 415) return status === 413 ? 'resource_exhausted' : 'invalid_argument';
  if (status === 401) return 'unauthenticated';
  if (status === 403) return 'permission_denied';
  if (status === 404 || status === 410) return 'not_found';
  if (status === 409) return 'failed_precondition';
  if (status === 429) return 'resource_exhausted';
  if (status === 503 || status === 502) return 'unavailable';
  return 'internal';
}

/**
 * Any error of an E2B route in E2B's terms: our own errors keep their status (their code's
 * category, error-codes.ts) and say their code; fastify's refusals (a schema's 400, a body
 * over its cap) theirs. A 5xx says the gist only (public-message.ts), as our own API does.
 */
export function e2bFailure(error: unknown): E2bFailure {
  if (error instanceof OrchestratorError) {
    const status = httpStatusOf(error.code);
    const message = status >= 500 ? publicSummary(error.message) : error.message;
    return { status, connectCode: connectCodeOf(error.code, status), message: `${error.code}: ${message}`, code: error.code };
  }
  const fastifyError = error as Partial<FastifyError>;
  if (fastifyError.validation)
    return { status: 400, connectCode: 'invalid_argument', message: `invalid_request: ${fastifyError.message}`, code: 'invalid_request' };
  const status = fastifyError.statusCode;
  if (typeof status === 'number' && status >= 400 && status < 500) {
    const code: ErrorCode = status === 413 ? 'body_too_large' : status === 415 ? 'unsupported_media_type' : 'invalid_request';
    return { status, connectCode: connectCodeOf(code, status), message: `${code}: ${fastifyError.message ?? ''}`, code };
  }
  return { status: 500, connectCode: 'internal', message: 'internal: internal error', code: 'internal' };
}

/** A feature of E2B's that this surface does not offer (docs/e2b.md says which). */
export class E2bUnsupportedError extends OrchestratorError {
  constructor(message: string) {
    super('e2b_unsupported', message);
  }
}

/** A wrong X-Access-Token for the sandbox the request names. */
export class EnvdTokenError extends OrchestratorError {
  constructor() {
    super('invalid_envd_token', "the X-Access-Token is not this sandbox's envd access token");
  }
}
