import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { OrchestratorError } from '../errors.js';

/**
 * Every error leaves as `{ error: { code, message } }` with its status: validation errors
 * name the field, our own errors carry their status and code, anything unexpected is a 500
 * that is logged in full and described briefly.
 */
export function errorHandler(error: FastifyError | Error, request: FastifyRequest, reply: FastifyReply): void {
  if (error instanceof OrchestratorError) {
    void reply.headers(error.headers);
    void reply.status(error.statusCode).send({ error: { code: error.code, message: error.message } });
    return;
  }
  const fastifyError = error as FastifyError;
  if (fastifyError.validation) {
    void reply.status(400).send({ error: { code: 'invalid_request', message: fastifyError.message } });
    return;
  }
  const status = fastifyError.statusCode;
  if (status !== undefined && status >= 400 && status < 500) {
    void reply.status(status).send({ error: { code: codeOf(fastifyError), message: fastifyError.message } });
    return;
  }
  request.log.error({ err: error }, 'unexpected error');
  void reply.status(500).send({ error: { code: 'internal', message: `internal error: ${error.message}` } });
}

function codeOf(error: FastifyError): string {
  if (error.code === 'FST_ERR_CTP_INVALID_JSON_BODY' || error.code === 'FST_ERR_CTP_EMPTY_JSON_BODY') return 'invalid_json';
  if (error.code === 'FST_ERR_CTP_BODY_TOO_LARGE') return 'body_too_large';
  if (error.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') return 'unsupported_media_type';
  return 'invalid_request';
}
