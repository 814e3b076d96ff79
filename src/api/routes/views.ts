import type { PausedSessions } from '../auto-resume.js';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { OrchestratorError } from '../../errors.js';
import { livePage, PAGE_HEADERS, refusedPage, ASSETS_PREFIX } from '../../views/live-page.js';
import type { LiveViews } from '../../views/live-views.js';
import { loadLiveViewAssets } from '../../views/novnc-assets.js';
import type { ViewGrant, ViewMode } from '../../views/view-tokens.js';
import { httpStatusOf, sendError } from '../errors.js';
import { SMALL_BODY_LIMIT_BYTES } from '../limits.js';
import { sessionIdParams } from '../schemas.js';

const errors = { 400: { $ref: 'Error#' }, 404: { $ref: 'Error#' }, 409: { $ref: 'Error#' }, 410: { $ref: 'Error#' } };

const viewSchema = {
  type: 'object',
  properties: {
    viewId: { type: 'string' },
    sessionId: { type: 'string' },
    mode: { type: 'string', enum: ['view', 'control'] },
    createdAt: { type: 'string', format: 'date-time' },
    expiresAt: { type: 'string', format: 'date-time' },
    viewersConnected: { type: 'integer' },
    holdsControl: { type: 'boolean' },
  },
} as const;

const viewParams = {
  type: 'object',
  required: ['id', 'viewId'],
  properties: { id: { type: 'string', minLength: 1, maxLength: 64 }, viewId: { type: 'string', minLength: 1, maxLength: 64 } },
} as const;

const tokenParams = { type: 'object', required: ['token'], properties: { token: { type: 'string', maxLength: 128 } } } as const;

const controlAnswer = {
  type: 'object',
  properties: { control: { type: 'object', nullable: true, properties: { heldBy: { type: 'string' }, since: { type: 'string', format: 'date-time' } } } },
} as const;

/** The view's page URL: the token is in the path, which the request log never prints (it logs the route pattern). */
function viewUrl(request: FastifyRequest, token: string): string {
  return `${request.protocol}://${request.host}/v1/views/${token}`;
}

/**
 * Live views. Under /v1/sessions/:id (API key, tenant scoped like every session route):
 * create, list, revoke, take over and hand back. Under /v1/views/:token (the token is the
 * only credential; open routes in auth/request-identity.ts): the page, its state, its
 * takeover button and the WebSocket to the desktop. noVNC's files under /v1/view-assets.
 */
export async function viewRoutes(app: FastifyInstance, opts: { views: LiveViews; paused?: PausedSessions }): Promise<void> {
  const { views } = opts;
  const assets = loadLiveViewAssets();

  app.post<{ Params: { id: string }; Body: { mode: ViewMode; ttlSeconds?: number } }>(
    '/v1/sessions/:id/views',
    {
      bodyLimit: SMALL_BODY_LIMIT_BYTES,
      schema: {
        summary: 'Open a live view of the session: a short-lived URL for a browser (view only, or control)',
        description: 'The token in the URL is shown only here. It dies with the session, on DELETE, or after ttlSeconds.',
        tags: ['views'],
        params: sessionIdParams,
        body: {
          type: 'object',
          required: ['mode'],
          additionalProperties: false,
          properties: {
            mode: { type: 'string', enum: ['view', 'control'], description: 'view: watch only (input dropped by the server); control: type and click' },
            ttlSeconds: { type: 'integer', minimum: 10, description: 'How long the URL opens the view (default 3600, at most 86400)' },
          },
        },
        response: { 201: { type: 'object', properties: { ...viewSchema.properties, url: { type: 'string' } } }, ...errors },
      },
    },
    async (request, reply) => {
      const { grant, token } = await views.create(request.params.id, request.tenant, request.body.mode, request.body.ttlSeconds);
      return reply
        .status(201)
        .header('cache-control', 'no-store')
        .send({ ...publicGrant(grant), url: viewUrl(request, token) });
    },
  );

  app.get<{ Params: { id: string } }>(
    '/v1/sessions/:id/views',
    {
      schema: {
        summary: 'The live views of the session that still open (not expired, not revoked)',
        tags: ['views'],
        params: sessionIdParams,
        response: { 200: { type: 'object', properties: { views: { type: 'array', items: viewSchema } } }, ...errors },
      },
    },
    async (request) => ({ views: views.list(request.params.id) }),
  );

  app.delete<{ Params: { id: string; viewId: string } }>(
    '/v1/sessions/:id/views/:viewId',
    {
      schema: {
        summary: 'Revoke a live view: its URL stops working and its open connections are cut',
        tags: ['views'],
        params: viewParams,
        response: { 204: { type: 'null' }, ...errors },
      },
    },
    async (request, reply) => {
      views.revoke(request.params.id, request.params.viewId);
      return reply.status(204).send();
    },
  );

  app.post<{ Params: { id: string; viewId: string } }>(
    '/v1/sessions/:id/views/:viewId/takeover',
    {
      schema: {
        summary: 'A control view takes the desktop from the agent: agent actions answer 409 human_in_control until hand-back',
        tags: ['views'],
        params: viewParams,
        response: { 200: controlAnswer, ...errors },
      },
    },
    async (request) => ({ control: views.takeover(views.grantOf(request.params.id, request.params.viewId)) }),
  );

  app.post<{ Params: { id: string; viewId: string } }>(
    '/v1/sessions/:id/views/:viewId/handback',
    { schema: { summary: 'Hand the desktop back to the agent', tags: ['views'], params: viewParams, response: { 200: controlAnswer, ...errors } } },
    async (request) => {
      views.handback(views.grantOf(request.params.id, request.params.viewId));
      return { control: null };
    },
  );

  // --- What a browser holding a token reaches (open routes: the token is the credential).

  app.get<{ Params: { token: string } }>('/v1/views/:token', { schema: { hide: true, params: tokenParams } }, async (request, reply) => {
    void reply.headers(PAGE_HEADERS).type('text/html; charset=utf-8');
    let grant: ViewGrant;
    try {
      grant = views.resolve(request.params.token);
    } catch (err) {
      if (!(err instanceof OrchestratorError)) throw err;
      return reply.status(httpStatusOf(err.code)).send(refusedPage('This live view cannot be opened', err.message));
    }
    return reply.send(livePage(grant));
  });

  app.get<{ Params: { token: string } }>('/v1/views/:token/state', { schema: { hide: true, params: tokenParams } }, async (request, reply) => {
    const grant = views.resolve(request.params.token);
    void reply.header('cache-control', 'no-store');
    return {
      viewId: grant.viewId,
      sessionId: grant.sessionId,
      mode: grant.mode,
      expiresAt: grant.expiresAt,
      control: views.takeovers.holder(grant.sessionId) ?? null,
    };
  });

  app.post<{ Params: { token: string } }>('/v1/views/:token/takeover', { schema: { hide: true, params: tokenParams } }, async (request) => ({
    control: views.takeover(views.resolve(request.params.token)),
  }));

  app.post<{ Params: { token: string } }>('/v1/views/:token/handback', { schema: { hide: true, params: tokenParams } }, async (request) => {
    views.handback(views.resolve(request.params.token));
    return { control: null };
  });

  // The viewer slot each admitted upgrade holds, from preValidation to the handler.
  const slots = new WeakMap<object, () => void>();
  app.get<{ Params: { token: string } }>(
    '/v1/views/:token/rfb',
    {
      websocket: true,
      schema: { hide: true, params: tokenParams },
      // Before the upgrade: a token that opens nothing gets its HTTP error, never a socket,
      // and so does a browser over the viewer caps (429). The slot is taken here, in one
      // synchronous step with the check, and released when this browser's socket closes,
      // whatever happens in between (a failed upgrade, a tunnel that never opens, a cut).
      preValidation: async (request) => {
        const grant = views.resolve(request.params.token);
        // A person opening the view of a paused desktop gets it running again, as any request
        // would (autoResume), or a 409 session_paused before the upgrade: never a socket
        // waiting on a frozen guest.
        await opts.paused?.ensureRunning(grant.sessionId);
        const release = views.admit(grant);
        slots.set(request.raw, release);
        const socket = request.raw.socket;
        if (socket.destroyed) release();
        else socket.once('close', release);
      },
    },
    (socket, request) => {
      const release = slots.get(request.raw);
      slots.delete(request.raw);
      if (!release) {
        // Only preValidation admits a viewer: without its slot, nothing is relayed.
        socket.close(1011, 'this live view was not admitted');
        return;
      }
      let grant: ViewGrant;
      try {
        grant = views.resolve(request.params.token); // again: it may have been revoked meanwhile
      } catch {
        release();
        socket.close(4001, 'this live view is no longer valid');
        return;
      }
      void views.connect(grant, socket, release);
    },
  );

  app.get<{ Params: { '*': string } }>(`${ASSETS_PREFIX}/*`, { schema: { hide: true } }, async (request, reply) => {
    const asset = assets.get(request.params['*']);
    if (!asset) return sendError(reply, 'not_found', 'no such file');
    return reply.type(asset.contentType).header('cache-control', 'public, max-age=3600').header('x-content-type-options', 'nosniff').send(asset.body);
  });
}

function publicGrant(grant: ViewGrant): Omit<ViewGrant, 'tenant' | 'revokedAt'> {
  return { viewId: grant.viewId, sessionId: grant.sessionId, mode: grant.mode, createdAt: grant.createdAt, expiresAt: grant.expiresAt };
}
