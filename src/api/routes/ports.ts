import type { Duplex } from 'node:stream';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { NotFoundError, OrchestratorError } from '../../errors.js';
import type { SessionAccess } from '../../tools/session-access.js';
import { GuestPortPools } from '../../ports/channel-pool.js';
import { PortChannelSlots } from '../../ports/channel-slots.js';
import { GuestPortError, proxyHttp, proxyUpgrade, refuseUpgrade, type ProxyTarget } from '../../ports/guest-proxy.js';
import { cameByHost } from '../../ports/host-routing.js';
import { desktopStreamLocation, isDesktopStreamRequest } from '../../views/desktop-stream.js';
import type { LiveViews } from '../../views/live-views.js';
import {
  MAX_GUEST_PORT,
  MIN_GUEST_PORT,
  PORT_TOKEN_COOKIE,
  PORT_TOKEN_QUERY,
  portHostOrigin,
  portPathPrefix,
  splitTokenCookie,
  withoutTokenParam,
} from '../../ports/port-address.js';
import { DEFAULT_PORT_TOKEN_TTL_SECONDS, MAX_PORT_TOKEN_TTL_SECONDS, MIN_PORT_TOKEN_TTL_SECONDS, type PortTokens } from '../../ports/port-tokens.js';
import type { PortSettings } from '../../ports/settings.js';
import { SMALL_BODY_LIMIT_BYTES } from '../limits.js';
import { sessionIdParams } from '../schemas.js';
import { releaseRequestSlot } from '../tenant-request-limits.js';
import { upgradeSocketOf } from '../upgrade-socket.js';

export interface PortRouteOptions {
  sessions: Pick<SessionAccess, 'connection'> & { displayStartedBySession(id: string): boolean };
  tokens: PortTokens;
  settings: PortSettings;
  /** Live views: E2B Desktop's stream page (port 6080, /vnc.html) of an xfce session is answered by one (views/desktop-stream.ts). */
  views?: LiveViews;
}

/**
 * What a page served by the path-based form may do: it shares the API's origin, so it is put
 * in an opaque origin of its own (a sandboxed document): its requests to the API carry
 * `Origin: null`, which a keyless server refuses (auth/browser-guard.ts), and it cannot read
 * other same-origin pages. The host-based form is a real origin per port and needs none of it.
 */
const PATH_FORM_POLICY = 'sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads allow-pointer-lock';

const errors = { 400: { $ref: 'Error#' }, 401: { $ref: 'Error#' }, 404: { $ref: 'Error#' }, 409: { $ref: 'Error#' }, 410: { $ref: 'Error#' } };

class InvalidPortError extends OrchestratorError {
  constructor(value: string) {
    super('invalid_request', `port must be a whole number from ${MIN_GUEST_PORT} to ${MAX_GUEST_PORT}, got "${value.slice(0, 20)}"`);
  }
}

/** The port of a proxied request's path (strings, 0, 65536 and the like: a 400 naming the field). */
function parsePortParam(value: string | undefined): number {
  const text = value ?? '';
  if (!/^[1-9][0-9]{0,4}$/.test(text) || Number(text) > MAX_GUEST_PORT) throw new InvalidPortError(text);
  return Number(text);
}

/** The port token a request presented (query first, then cookie), for auth/request-identity.ts. */
export function presentedPortToken(request: FastifyRequest): string | undefined {
  const query = (request.query as Record<string, unknown> | undefined)?.[PORT_TOKEN_QUERY];
  if (typeof query === 'string') return query;
  return splitTokenCookie(request.headers.cookie).token;
}

/**
 * Guest ports on URLs. POST /v1/sessions/:id/ports makes a URL (and, when `public`, a token of
 * its own kind); every method under /v1/sessions/:id/ports/:port/ (or on `<port>-<id>.<domain>`,
 * see ports/host-routing.ts) goes to that port in the guest on a direct-tcpip channel of the
 * session's SSH connection: nothing listens on the guest's network for it.
 */
export async function portRoutes(app: FastifyInstance, opts: PortRouteOptions): Promise<void> {
  const { sessions, tokens, settings, views } = opts;
  const slots = new PortChannelSlots(settings.maxChannelsPerSession);
  // Kept-alive channels to guest ports, by session connection and port (upgrades take none).
  const pools = new GuestPortPools(settings.keepAliveChannelsPerPort);

  app.post<{ Params: { id: string }; Body: { port: number; ttlSeconds?: number; public?: boolean } }>(
    '/v1/sessions/:id/ports',
    {
      bodyLimit: SMALL_BODY_LIMIT_BYTES,
      schema: {
        summary: 'A URL for a port in the guest (path-based, and host-based when the operator set SBX_PORTS_DOMAIN)',
        tags: ['ports'],
        params: sessionIdParams,
        body: {
          type: 'object',
          required: ['port'],
          additionalProperties: false,
          properties: {
            port: { type: 'integer', minimum: MIN_GUEST_PORT, maximum: MAX_GUEST_PORT },
            ttlSeconds: { type: 'integer', minimum: MIN_PORT_TOKEN_TTL_SECONDS, maximum: MAX_PORT_TOKEN_TTL_SECONDS, default: DEFAULT_PORT_TOKEN_TTL_SECONDS },
            public: {
              type: 'boolean',
              default: false,
              description: 'Put a port token in the URL: it then opens without the API key (a browser, a script), until it expires or is revoked',
            },
          },
        },
        response: {
          201: {
            type: 'object',
            properties: {
              port: { type: 'integer' },
              url: { type: 'string', description: 'Path-based URL of the port (with ?sbx_token= when public)' },
              hostUrl: { type: 'string', description: 'Host-based URL (`<port>-<id>.<domain>`), when SBX_PORTS_DOMAIN is set' },
              token: { type: 'string', description: 'The port token (public only): shown this once' },
              tokenId: { type: 'string', description: 'Its id, to revoke it (DELETE /v1/sessions/:id/port-tokens/:tokenId)' },
              expiresAt: { type: 'string', format: 'date-time' },
            },
          },
          ...errors,
        },
      },
    },
    async (request, reply) => {
      const { id } = request.params;
      const { port, ttlSeconds = DEFAULT_PORT_TOKEN_TTL_SECONDS } = request.body;
      sessions.connection(id); // 404/409/410 unless the session is ready
      const base = `${request.protocol}://${request.host}${portPathPrefix(id, port)}/`;
      const host = settings.domain ? `${portHostOrigin(request.protocol, request.host, settings.domain, id, port)}/` : undefined;
      if (request.body.public !== true) return reply.status(201).send({ port, url: base, ...(host ? { hostUrl: host } : {}) });
      const { grant, token } = tokens.create(request.tenant, id, port, ttlSeconds);
      const query = `?${PORT_TOKEN_QUERY}=${token}`;
      return reply
        .status(201)
        .send({ port, url: base + query, ...(host ? { hostUrl: host + query } : {}), token, tokenId: grant.id, expiresAt: grant.expiresAt });
    },
  );

  app.get<{ Params: { id: string } }>(
    '/v1/sessions/:id/ports',
    { schema: { summary: "The session's port tokens that still open something", tags: ['ports'], params: sessionIdParams } },
    async (request) => ({ tokens: tokens.listUsable(request.tenant, request.params.id) }),
  );

  app.delete<{ Params: { id: string; tokenId: string } }>(
    '/v1/sessions/:id/port-tokens/:tokenId',
    {
      schema: {
        summary: 'Revoke a port token: from now on it opens nothing (idempotent)',
        tags: ['ports'],
        params: { ...sessionIdParams, required: ['id', 'tokenId'], properties: { ...sessionIdParams.properties, tokenId: { type: 'string', maxLength: 32 } } },
        response: { 204: { type: 'null', description: 'Revoked' }, ...errors },
      },
    },
    async (request, reply) => {
      const { id, tokenId } = request.params;
      if (!tokens.revoke(request.tenant, id, tokenId)) throw new NotFoundError(`session ${id} has no port token ${tokenId}`);
      return reply.status(204).send();
    },
  );

  const proxy = async (request: FastifyRequest<{ Params: { id: string; port: string } }>, reply: FastifyReply) => {
    const { id } = request.params;
    const port = parsePortParam(request.params.port);
    const connection = sessions.connection(id);
    const release = slots.take(id);
    // Long-lived (an event stream, a WebSocket): held by the session's channel slots, not the tenant's request slots.
    releaseRequestSlot(request);
    const byHost = cameByHost(request.raw);
    const prefix = portPathPrefix(id, port);
    const original = byHost ? ((request.raw as { originalUrl?: string }).originalUrl ?? '/') : (request.raw.url ?? '/');
    const stripped = byHost ? original : original.slice(prefix.length);
    const { path, token: queryToken } = withoutTokenParam(stripped === '' || stripped.startsWith('?') ? `/${stripped}` : stripped);
    if (views && request.method === 'GET' && isDesktopStreamRequest(port, path) && sessions.displayStartedBySession(id)) {
      release();
      const query = new URLSearchParams(path.slice(path.indexOf('?') + 1 || path.length));
      // On a `<port>-<id>.<domain>` name every path is the guest's: the view opens on the API's
      // name, `api.<domain>` (the name E2B's SDKs give the control plane on E2B_DOMAIN).
      const listen = /:(\d{1,5})$/.exec(request.host)?.[1];
      const apiOrigin = byHost ? `${request.protocol}://api.${settings.domain ?? ''}${listen ? `:${listen}` : ''}` : `${request.protocol}://${request.host}`;
      const location = await desktopStreamLocation(views, sessions, { sessionId: id, tenant: request.tenant, query, apiOrigin });
      return reply.status(303).header('location', location).header('cache-control', 'no-store').send();
    }
    const { rest: cookie } = splitTokenCookie(request.headers.cookie);
    const headers = { ...request.headers };
    delete headers.authorization; // the API key (or the token) is ours: the guest never sees it
    // On a cluster's node, the gateway's protocol headers (x-sbx-cluster-secret: the credential
    // that makes a request a gateway's; the tenant): a guest holding them could call any node
    // as a gateway, for any tenant. A gateway drops a client's own x-sbx-* headers too.
    for (const name of Object.keys(headers)) if (name.startsWith('x-sbx-')) delete headers[name];
    delete headers.cookie;
    if (cookie !== undefined) headers.cookie = cookie;
    const extra: Array<[string, string]> = [];
    if (queryToken !== undefined) {
      // A browser that opened the URL sends the token back with the page's own requests.
      extra.push(['set-cookie', `${PORT_TOKEN_COOKIE}=${queryToken}; Path=${byHost ? '/' : `${prefix}/`}; HttpOnly; SameSite=Lax`]);
    }
    if (!byHost) extra.push(['content-security-policy', PATH_FORM_POLICY]);
    const target: ProxyTarget = {
      open: (): Promise<Duplex> => connection.forward('127.0.0.1', port),
      port,
      path,
      headers,
      ...(byHost ? {} : { prefix }),
      forwardedHost: request.host,
      forwardedProto: request.protocol,
      clientAddress: request.clientAddress,
      idleTimeoutMs: settings.idleTimeoutMs,
      extraResponseHeaders: extra,
    };
    reply.hijack();
    const upgradeSocket = upgradeSocketOf(request);
    const agent = upgradeSocket ? undefined : pools.agentFor(connection, port);
    if (agent) target.agent = agent;
    try {
      if (upgradeSocket) await proxyUpgrade(request.raw, upgradeSocket.socket, upgradeSocket.head, target);
      else await proxyHttp(request.raw, reply.raw, target);
    } catch (err) {
      const known = err instanceof GuestPortError;
      const code = known ? err.code : 'guest_port_error';
      const message = known ? err.message : `the request to port ${port} in the guest failed`;
      if (!known) request.log.warn({ err, port }, 'port request failed');
      if (upgradeSocket) refuseUpgrade(upgradeSocket.socket, 502, code, message);
      else if (!reply.raw.headersSent)
        reply.raw.writeHead(502, { 'content-type': 'application/json; charset=utf-8', connection: 'close' }).end(JSON.stringify({ error: { code, message } }));
      else reply.raw.destroy();
    } finally {
      release();
    }
  };
  await app.register(async (scope) => {
    // Proxied bodies stream as they are, never parsed nor counted here (this scope only).
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', (_request: FastifyRequest, _payload: NodeJS.ReadableStream, done: (err: Error | null, body?: unknown) => void) =>
      done(null),
    );
    const config = { portAccess: true };
    scope.all('/v1/sessions/:id/ports/:port', { config, schema: { hide: true } }, proxy);
    scope.all('/v1/sessions/:id/ports/:port/*', { config, schema: { hide: true } }, proxy);
  });
}
