import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { OrchestratorError } from '../errors.js';
import { publicSummary } from './public-message.js';

/**
 * Every error leaves as `{ error: { code, message } }` with its status: validation errors
 * name the field, our own errors carry their status and code. A 5xx (ours, or anything
 * unexpected) is logged in full at error level with the request id, and answered with the
 * gist only (public-message.ts: no host paths, command lines or console output) plus that
 * request id, so that an operator can find the detail and a client learns nothing of the host.
 */
export function errorHandler(error: FastifyError | Error, request: FastifyRequest, reply: FastifyReply): void {
  if (error instanceof OrchestratorError) {
    void reply.headers(error.headers);
    if (error.statusCode >= 500) {
      // Ours: a sandbox that failed, a guest that misbehaved, a full host. Not a bug here,
      // so a warning (the parts that failed log their own errors).
      request.log.warn({ err: error, statusCode: error.statusCode }, 'request failed');
      serverError(request, reply, error.statusCode, error.code, publicSummary(error.message), error.message);
      return;
    }
    void reply.status(error.statusCode).send({ error: { code: error.code, message: error.message } });
    return;
  }
  const fastifyError = error as FastifyError;
  if (fastifyError.validation) {
    // Ajv's "must NOT have additional properties" does not say which: the field is named.
    const extra = fastifyError.validation.find((v) => v.keyword === 'additionalProperties')?.params.additionalProperty;
    const message = typeof extra === 'string' ? `${fastifyError.message}: "${extra.slice(0, 64)}"` : fastifyError.message;
    void reply.status(400).send({ error: { code: 'invalid_request', message } });
    return;
  }
  const status = fastifyError.statusCode;
  if (status !== undefined && status >= 400 && status < 500) {
    void reply.status(status).send({ error: { code: codeOf(fastifyError), message: fastifyError.message } });
    return;
  }
  request.log.error({ err: error, statusCode: 500 }, 'unexpected error');
  serverError(request, reply, 500, 'internal', 'internal error', error.message);
}

/** The answer to a 5xx, logged by the caller: the gist, and the request id to find the rest by. */
function serverError(request: FastifyRequest, reply: FastifyReply, status: number, code: string, summary: string, full: string): void {
  const withheld = summary !== full;
  const message = withheld ? `${summary} (request id ${request.id}: the orchestrator's log has the details)` : summary;
  void reply.status(status).send({ error: { code, message, requestId: request.id } });
}

function codeOf(error: FastifyError): string {
  if (error.code === 'FST_ERR_CTP_INVALID_JSON_BODY' || error.code === 'FST_ERR_CTP_EMPTY_JSON_BODY') return 'invalid_json';
  if (error.code === 'FST_ERR_CTP_BODY_TOO_LARGE') return 'body_too_large';
  if (error.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') return 'unsupported_media_type';
  return 'invalid_request';
}
