import type { FastifyInstance } from 'fastify';
import type { SessionAccess } from '../../tools/session-access.js';
import { DesktopBrowser, GUEST_CDP_PORT } from '../../ports/desktop-browser.js';
import { PORT_TOKEN_QUERY, portPathPrefix } from '../../ports/port-address.js';
import { DEFAULT_PORT_TOKEN_TTL_SECONDS, MAX_PORT_TOKEN_TTL_SECONDS, MIN_PORT_TOKEN_TTL_SECONDS, type PortTokens } from '../../ports/port-tokens.js';
import { SMALL_BODY_LIMIT_BYTES } from '../limits.js';
import { sessionIdParams } from '../schemas.js';

export interface BrowserRouteOptions {
  sessions: SessionAccess & { displayOf(id: string): number };
  tokens: PortTokens;
}

const errors = { 400: { $ref: 'Error#' }, 401: { $ref: 'Error#' }, 404: { $ref: 'Error#' }, 409: { $ref: 'Error#' }, 410: { $ref: 'Error#' } };

/**
 * POST /v1/sessions/:id/browser: the desktop's Chromium, started on the session's display
 * with DevTools on the guest's loopback, and a `cdpUrl` for Playwright's connectOverCDP: its
 * DevTools WebSocket through this server's port routes, with a port token for that port of
 * that session (the script needs no API key). DELETE closes it.
 */
export async function browserRoutes(app: FastifyInstance, opts: BrowserRouteOptions): Promise<void> {
  const { sessions, tokens } = opts;
  const browserOf = (id: string) =>
    sessions.attachment(id, 'desktop-browser', async ({ connection, cleanup }) => {
      const browser = new DesktopBrowser(connection, sessions.displayOf(id));
      await cleanup.push('desktop browser', async () => {
        await browser.stop();
      });
      return browser;
    });

  app.post<{ Params: { id: string }; Body: { ttlSeconds?: number } | undefined }>(
    '/v1/sessions/:id/browser',
    {
      bodyLimit: SMALL_BODY_LIMIT_BYTES,
      schema: {
        summary: "Start the desktop's Chromium (or find it running) and answer a CDP URL for Playwright's connectOverCDP",
        tags: ['browser'],
        params: sessionIdParams,
        body: {
          type: 'object',
          additionalProperties: false,
          properties: {
            ttlSeconds: { type: 'integer', minimum: MIN_PORT_TOKEN_TTL_SECONDS, maximum: MAX_PORT_TOKEN_TTL_SECONDS, default: DEFAULT_PORT_TOKEN_TTL_SECONDS },
          },
        },
        response: {
          200: {
            type: 'object',
            properties: {
              cdpUrl: { type: 'string', description: "The browser's DevTools WebSocket through this server, with a port token in ?sbx_token=" },
              started: { type: 'boolean', description: 'Started by this call (false: it was running already, the same browser)' },
              tokenId: { type: 'string', description: "The token's id, to revoke it (DELETE /v1/sessions/:id/port-tokens/:tokenId)" },
              expiresAt: { type: 'string', format: 'date-time' },
            },
          },
          ...errors,
        },
      },
    },
    async (request) => {
      const { id } = request.params;
      const ttlSeconds = request.body?.ttlSeconds ?? DEFAULT_PORT_TOKEN_TTL_SECONDS;
      const browser = await browserOf(id);
      const { wsPath, started } = await browser.start();
      const { grant, token } = tokens.create(request.tenant, id, GUEST_CDP_PORT, ttlSeconds);
      const scheme = request.protocol === 'https' ? 'wss' : 'ws';
      const cdpUrl = `${scheme}://${request.host}${portPathPrefix(id, GUEST_CDP_PORT)}${wsPath}?${PORT_TOKEN_QUERY}=${token}`;
      return { cdpUrl, started, tokenId: grant.id, expiresAt: grant.expiresAt };
    },
  );

  app.delete<{ Params: { id: string } }>(
    '/v1/sessions/:id/browser',
    {
      schema: {
        summary: "Close the desktop's Chromium (idempotent: 204 whether or not it ran)",
        tags: ['browser'],
        params: sessionIdParams,
        response: { 204: { type: 'null', description: 'Closed' }, ...errors },
      },
    },
    async (request, reply) => {
      const browser = await browserOf(request.params.id);
      await browser.stop();
      return reply.status(204).send();
    },
  );
}
