import { acceptsPooledId } from '../auth/cluster-identity.js';
import type { FastifyInstance } from 'fastify';
import type { SessionDirectory, ComputerActions } from '../../sessions/ports.js';
import type { CreateSessionOptions } from '../../sessions/session-request.js';
import type { TrajectoryRecorder } from '../../sessions/trajectory/recorder.js';
import { recordedCall } from '../../sessions/trajectory/recorded-call.js';
import { SMALL_BODY_LIMIT_BYTES } from '../limits.js';
import { actionBody, createSessionBody, screenshotFormatQuery, sessionIdParams } from '../schemas.js';

interface IdParams {
  id: string;
}

const errors = {
  400: { $ref: 'Error#' },
  401: { $ref: 'Error#' },
  413: { $ref: 'Error#' },
  404: { $ref: 'Error#' },
  409: { $ref: 'Error#' },
  410: { $ref: 'Error#' },
  502: { $ref: 'Error#' },
  503: { $ref: 'Error#' },
};

/** /v1/sessions: create, list, inspect, destroy, screenshot, act. */
export async function sessionRoutes(
  app: FastifyInstance,
  opts: { manager: SessionDirectory & ComputerActions; trajectory?: TrajectoryRecorder },
): Promise<void> {
  const { manager } = opts;

  app.post<{ Body: CreateSessionOptions }>(
    '/v1/sessions',
    {
      bodyLimit: SMALL_BODY_LIMIT_BYTES,
      schema: {
        summary: 'Create a sandbox and wait until it is ready',
        tags: ['sessions'],
        body: createSessionBody,
        response: { 201: { $ref: 'Session#' }, 429: { $ref: 'Error#' }, ...errors },
      },
    },
    async (request, reply) => {
      const owner =
        request.placedSessionId === null
          ? { tenant: request.tenant }
          : { tenant: request.tenant, sessionId: request.placedSessionId, pooledIdAccepted: acceptsPooledId(request) };
      const session = await manager.create(request.body ?? {}, owner);
      opts.trajectory?.begin(session, request.body?.trajectory?.keepTypedText === true);
      return reply.status(201).send(session);
    },
  );

  app.get(
    '/v1/sessions',
    {
      schema: {
        summary: 'List live sessions',
        tags: ['sessions'],
        response: {
          200: { type: 'object', properties: { sessions: { type: 'array', items: { $ref: 'Session#' } } } },
        },
      },
    },
    async (request) => ({ sessions: manager.list(request.tenant) }),
  );

  app.get<{ Params: IdParams }>(
    '/v1/sessions/:id',
    {
      schema: { summary: 'Describe a session', tags: ['sessions'], params: sessionIdParams, response: { 200: { $ref: 'Session#' }, ...errors } },
    },
    async (request) => manager.get(request.params.id),
  );

  app.get<{ Params: IdParams }>(
    '/v1/sessions/:id/health',
    {
      schema: {
        summary: 'Probe a session now: SSH connection and display',
        tags: ['sessions'],
        params: sessionIdParams,
        response: {
          200: {
            type: 'object',
            properties: {
              state: { type: 'string' },
              healthy: { type: 'boolean' },
              ssh: { type: 'string', enum: ['ok', 'down'] },
              display: { type: 'string', enum: ['ok', 'down'] },
              detail: { type: 'string' },
            },
          },
          ...errors,
        },
      },
    },
    async (request) => manager.health(request.params.id),
  );

  app.delete<{ Params: IdParams }>(
    '/v1/sessions/:id',
    {
      schema: {
        summary: 'Destroy a session and everything it holds (idempotent)',
        tags: ['sessions'],
        params: sessionIdParams,
        response: { 200: { $ref: 'Session#' }, ...errors },
      },
    },
    async (request) => manager.destroy(request.params.id),
  );

  app.get<{ Params: IdParams; Querystring: { scaled?: 'true' | 'false'; format?: string; quality?: string } }>(
    '/v1/sessions/:id/screenshot',
    {
      schema: {
        summary: 'The whole screen as an image (at its real size, or with ?scaled=true as the model sees it)',
        description: "PNG unless ?format= or the session's default (screenshot at create) says jpeg or webp; the Content-Type says which.",
        tags: ['computer'],
        params: sessionIdParams,
        querystring: {
          type: 'object',
          properties: { scaled: { type: 'string', enum: ['true', 'false'] }, ...screenshotFormatQuery },
        },
        produces: ['image/png', 'image/jpeg', 'image/webp'],
        response: { 200: { description: 'The image (image/png, image/jpeg or image/webp)', type: 'string', format: 'binary' }, ...errors },
      },
    },
    async (request, reply) => {
      const { scaled, format, quality } = request.query;
      const image = await manager.screenshot(request.params.id, { scaled: scaled === 'true', format: { format, quality } });
      return reply.type(image.mediaType).header('cache-control', 'no-store').send(image.data);
    },
  );

  app.post<{ Params: IdParams; Body: unknown; Querystring: { screenshot?: 'true' | 'false'; format?: string; quality?: string } }>(
    '/v1/sessions/:id/actions',
    {
      schema: {
        summary: 'Perform one computer-use action (the tool_use input as the model sent it), as plain JSON',
        description:
          'Coordinates are in the model space of the session (see computerTool). Bad input is a 400 naming the field. ' +
          'With ?screenshot=true, actions other than screenshot, cursor_position and zoom also return the settled screen. ' +
          "?format and ?quality choose the format of any image returned (the session's default otherwise).",
        tags: ['computer'],
        params: sessionIdParams,
        querystring: { type: 'object', properties: { screenshot: { type: 'string', enum: ['true', 'false'] }, ...screenshotFormatQuery } },
        body: actionBody,
        response: { 200: { $ref: 'ActionResult#' }, ...errors },
      },
    },
    async (request) => {
      const { screenshot, format, quality } = request.query;
      const { id } = request.params;
      const outcome = await recordedCall(
        opts.trajectory,
        { sessionId: id, tool: 'actions', input: request.body },
        () => manager.act(id, request.body, { screenshotAfter: screenshot === 'true', format: { format, quality } }),
        (o) => ({ durationMs: o.durationMs, settleMs: o.settleMs, output: o.output, cursor: o.cursor, image: o.image }),
      );
      return {
        action: outcome.action,
        output: outcome.output,
        cursor: outcome.cursor,
        image: outcome.image ? { mediaType: outcome.image.mediaType, data: outcome.image.data.toString('base64') } : undefined,
        settleMs: outcome.settleMs,
        durationMs: Math.round(outcome.durationMs * 1000) / 1000,
      };
    },
  );
}
