import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { ERROR_CODES, OrchestratorError, type ErrorCategory, type ErrorCode } from '../errors.js';
import { publicSummary } from './public-message.js';

/**
 * The HTTP status of each category of error (error-codes.ts): the one place where a failure
 * becomes a status. docs/api.md's table is held to it by test/unit/docs.test.ts.
 */
export const HTTP_STATUS: Readonly<Record<ErrorCategory, number>> = {
  invalid: 400,
  unauthenticated: 401,
  forbidden: 403,
  not_found: 404,
  method_not_allowed: 405,
  not_acceptable: 406,
  conflict: 409,
  gone: 410,
  too_large: 413,
  unsupported_media_type: 415,
  out_of_range: 416,
  action_failed: 422,
  limit: 429,
  internal: 500,
  guest: 502,
  upstream: 502,
  unavailable: 503,
};

/** The status a code is answered with. */
export function httpStatusOf(code: ErrorCode): number {
  return HTTP_STATUS[ERROR_CODES[code].category];
}

/**
 * The headers that go with an error: Retry-After where a retry may succeed later, and the
 * RFC 6750 challenge of a missing or bad API key (a request without credentials gets the
 * bare scheme, a bad key also `error="invalid_token"`, so clients can tell the two apart).
 */
export function errorHeaders(error: OrchestratorError): Record<string, string> {
  const headers: Record<string, string> = {};
  if (error.retryAfterSeconds !== undefined) headers['retry-after'] = String(error.retryAfterSeconds);
  if (error.code === 'missing_api_key') headers['www-authenticate'] = 'Bearer realm="sbx"';
  else if (error.code === 'invalid_api_key' || error.code === 'expired_api_key' || error.code === 'revoked_api_key') {
    headers['www-authenticate'] = 'Bearer realm="sbx", error="invalid_token"';
  }
  return headers;
}

/** An answer in the one error shape, for a route that answers rather than throws (a 4xx only). */
export function sendError(reply: FastifyReply, code: ErrorCode, message: string): FastifyReply {
  return reply.status(httpStatusOf(code)).send({ error: { code, message } });
}

/**
 * Every error leaves as `{ error: { code, message } }` with its status: validation errors
 * name the field, our own errors their code (whose category gives the status). A 5xx (ours,
 * or anything unexpected) is logged in full with the request id, and answered with the
 * gist only (public-message.ts: no host paths, command lines or console output) plus that
 * request id, so that an operator can find the detail and a client learns nothing of the host.
 */
export function errorHandler(error: FastifyError | Error, request: FastifyRequest, reply: FastifyReply): void {
  if (error instanceof OrchestratorError) {
    const status = httpStatusOf(error.code);
    void reply.headers(errorHeaders(error));
    if (status >= 500) {
      // Ours: a sandbox that failed, a guest that misbehaved, a full host. Not a bug here,
      // so a warning (the parts that failed log their own errors).
      request.log.warn({ err: error, statusCode: status }, 'request failed');
      serverError(request, reply, status, error.code, publicSummary(error.message), error.message);
      return;
    }
    void reply.status(status).send({ error: { code: error.code, message: error.message } });
    return;
  }
  const fastifyError = error as FastifyError;
  if (fastifyError.validation) {
    // ajv's "must NOT have additional properties" does not say which: the field is named.
    const extra = fastifyError.validation[0]?.params?.additionalProperty;
    const message = typeof extra === 'string' ? `${fastifyError.message}: "${extra.slice(0, 64)}"` : fastifyError.message;
    void sendError(reply, 'invalid_request', message);
    return;
  }
  // Fastify's own refusals of the request keep the status fastify gave them.
  const status = fastifyError.statusCode;
  if (status !== undefined && status >= 400 && status < 500) {
    void reply.status(status).send({ error: { code: codeOf(fastifyError), message: fastifyError.message } });
    return;
  }
  request.log.error({ err: error, statusCode: 500 }, 'unexpected error');
  serverError(request, reply, httpStatusOf('internal'), 'internal', 'internal error', error.message);
}

/** The answer to a 5xx, logged by the caller: the gist, and the request id to find the rest by. */
function serverError(request: FastifyRequest, reply: FastifyReply, status: number, code: ErrorCode, summary: string, full: string): void {
  const withheld = summary !== full;
  const message = withheld ? `${summary} (request id ${request.id}: the orchestrator's log has the details)` : summary;
  void reply.status(status).send({ error: { code, message, requestId: request.id } });
}

function codeOf(error: FastifyError): ErrorCode {
  if (error.code === 'FST_ERR_CTP_INVALID_JSON_BODY' || error.code === 'FST_ERR_CTP_EMPTY_JSON_BODY') return 'invalid_json';
  if (error.code === 'FST_ERR_CTP_BODY_TOO_LARGE') return 'body_too_large';
  if (error.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') return 'unsupported_media_type';
  return 'invalid_request';
}
