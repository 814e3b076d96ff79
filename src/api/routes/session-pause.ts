import type { FastifyInstance } from 'fastify';
import type { SessionPausing } from '../../sessions/ports.js';
import type { PauseRequestMode } from '../../sessions/pause.js';
import { SMALL_BODY_LIMIT_BYTES } from '../limits.js';
import { pauseBody, sessionIdParams } from '../schemas.js';

interface IdParams {
  id: string;
}

const errors = {
  400: { $ref: 'Error#' },
  404: { $ref: 'Error#' },
  409: { $ref: 'Error#' },
  410: { $ref: 'Error#' },
  413: { $ref: 'Error#' },
  503: { $ref: 'Error#' },
};

/**
 * Pause and resume (docs/pause.md):
 * - POST /v1/sessions/:id/pause {mode?}: memory (frozen in place), disk, or auto; answers the
 *   session, state `paused` and `paused: {mode, since, bytes}`;
 * - POST /v1/sessions/:id/resume: the same desktop again, its connection re-made; answers the
 *   session, state `ready`.
 * Pausing a paused session is 409 session_already_paused, resuming a running one 409
 * session_not_paused, a mode this host cannot do 409 pause_mode_unavailable (saying why).
 */
export async function sessionPauseRoutes(app: FastifyInstance, opts: { manager: SessionPausing }): Promise<void> {
  const { manager } = opts;

  app.post<{ Params: IdParams; Body: { mode?: PauseRequestMode } }>(
    '/v1/sessions/:id/pause',
    {
      bodyLimit: SMALL_BODY_LIMIT_BYTES,
      // No body at all is an empty one (mode auto).
      preValidation: async (request) => {
        request.body ??= {};
      },
      schema: {
        summary: 'Pause a session: its processes stop where they are (no CPU), to be resumed later',
        description:
          'mode memory: frozen in place (cgroup freezer, the VMM paused), RAM kept, survives an orchestrator restart; disk: state written to disk ' +
          '(where the runtime does it); auto (default): disk where available, else memory. The idle timeout stops; the lifetime counts running time only; ' +
          "a paused session is destroyed after its pausedRetentionSeconds (its tenant's, or less if its create asked), at the view's pausedUntil.",
        tags: ['sessions'],
        params: sessionIdParams,
        body: pauseBody,
        response: { 200: { $ref: 'Session#' }, ...errors },
      },
    },
    async (request) => manager.pause(request.params.id, request.body.mode ?? 'auto'),
  );

  app.post<{ Params: IdParams }>(
    '/v1/sessions/:id/resume',
    {
      schema: {
        summary: 'Resume a paused session: the same processes, windows and screen, a new SSH connection; the next action just works',
        tags: ['sessions'],
        params: sessionIdParams,
        response: { 200: { $ref: 'Session#' }, ...errors },
      },
    },
    async (request) => manager.resume(request.params.id),
  );
}
