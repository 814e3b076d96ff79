import type { FastifyInstance } from 'fastify';
import type { SessionTimeouts } from '../../sessions/ports.js';
import type { SessionTimeoutUpdate } from '../../sessions/clocks.js';
import { SMALL_BODY_LIMIT_BYTES } from '../limits.js';
import { keepaliveBody, sessionIdParams, updateSessionBody } from '../schemas.js';

interface IdParams {
  id: string;
}

const errors = { 400: { $ref: 'Error#' }, 404: { $ref: 'Error#' }, 409: { $ref: 'Error#' }, 410: { $ref: 'Error#' }, 413: { $ref: 'Error#' } };

/**
 * A session's timeouts, as a client extends them:
 * - POST /v1/sessions/:id/keepalive: "still here", resets the idle clock (and optionally
 *   sets a new idle timeout), for an agent that thinks longer than its timeout;
 * - PATCH /v1/sessions/:id: changes the idle timeout and/or the maximum lifetime, which can
 *   grow up to the orchestrator's maximum and never past it.
 * Both answer the session, with its new expiresAt and lifetimeEndsAt.
 */
export async function sessionTimeoutRoutes(app: FastifyInstance, opts: { manager: SessionTimeouts }): Promise<void> {
  const { manager } = opts;

  app.post<{ Params: IdParams; Body: { timeoutSeconds?: number } }>(
    '/v1/sessions/:id/keepalive',
    {
      bodyLimit: SMALL_BODY_LIMIT_BYTES,
      // No body at all (`curl -X POST .../keepalive`) is an empty one, not a type error.
      preValidation: async (request) => {
        request.body ??= {};
      },
      schema: {
        summary: 'Keep a session alive: reset its idle timer (optionally with a new idle timeout)',
        description: 'The idle deadline (expiresAt) becomes now + timeoutSeconds, capped at lifetimeEndsAt. The body is optional.',
        tags: ['sessions'],
        params: sessionIdParams,
        body: keepaliveBody,
        response: { 200: { $ref: 'Session#' }, ...errors },
      },
    },
    async (request) => manager.keepalive(request.params.id, request.body.timeoutSeconds),
  );

  app.patch<{ Params: IdParams; Body: SessionTimeoutUpdate }>(
    '/v1/sessions/:id',
    {
      bodyLimit: SMALL_BODY_LIMIT_BYTES,
      schema: {
        summary: "Change a session's idle timeout and/or maximum lifetime",
        tags: ['sessions'],
        params: sessionIdParams,
        body: updateSessionBody,
        response: { 200: { $ref: 'Session#' }, ...errors },
      },
    },
    async (request) => manager.updateTimeouts(request.params.id, request.body),
  );
}
