/**
 * Live views through a gateway. Their token is their only credential (open routes): the
 * gateway finds the token's session by the token's SHA-256 (recorded when the view was made
 * through any gateway) and forwards to that session's node, which checks the token itself.
 * An unknown token goes to any healthy node, whose "cannot be opened" answer is a single
 * host's. The WebSocket to the desktop is joined to one opened to the node (ws-proxy.ts).
 */
import type { IncomingMessage } from 'node:http';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type WebSocket from 'ws';
import { nodeError } from './node-client.js';
import { countHijacked, forwardUrl } from './forward.js';
import { nodeHeaders } from './node-headers.js';
import type { SessionRouteDeps } from './session-routes.js';
import { joinSockets, openUpstream } from './ws-proxy.js';

/** Largest WebSocket message a live-view browser may send (as on a node: a clipboard paste). */
export const VIEW_MAX_WS_MESSAGE_BYTES = 512 * 1024;

type TokenRequest = FastifyRequest<{ Params: { token: string } }>;

export async function viewTokenRoutes(app: FastifyInstance, deps: SessionRouteDeps): Promise<void> {
  const { router, forwarder, metrics } = deps;
  const proxy = async (request: TokenRequest, reply: FastifyReply) =>
    forwarder.forward(request, reply, await router.view(request.params.token), { family: 'views' });
  app.all('/v1/views/:token', proxy);
  app.all('/v1/views/:token/*', proxy);
  // The live view's and the terminal page's static files: every node has the same.
  for (const assets of ['/v1/view-assets/*', '/v1/terminal-assets/*']) {
    app.get<{ Params: { '*': string } }>(assets, async (request, reply) => forwarder.forward(request, reply, await router.anyNode(), { family: 'views' }));
  }

  // The node's socket of each admitted upgrade, from preValidation to the handler.
  const upstreams = new WeakMap<IncomingMessage, WebSocket>();
  const nodeOf = new WeakMap<WebSocket, string>();
  app.get<{ Params: { token: string } }>(
    '/v1/views/:token/rfb',
    {
      websocket: true,
      preValidation: async (request: TokenRequest, reply: FastifyReply) => {
        const target = await router.view(request.params.token);
        const headers = nodeHeaders(request, request.headers, { secret: deps.secret });
        const upstream = await openUpstream({
          url: forwardUrl(target.url, request).replace(/^http/, 'ws'),
          headers: pick(headers, ['x-sbx-cluster-secret', 'x-forwarded-for', 'user-agent', 'cookie']),
          protocols: protocolsOf(request.headers['sec-websocket-protocol']),
          origin: request.headers.origin,
          timeoutMs: deps.settings.nodeConnectTimeoutMs,
        }).catch((err: unknown) => {
          throw nodeError(target.name, err);
        });
        if (!upstream.open) {
          // The node refused the upgrade (an unknown or expired token, a viewer cap): its answer, as it gave it.
          for (const name of ['content-type', 'retry-after', 'cache-control']) {
            const value = upstream.headers[name];
            if (value !== undefined) void reply.header(name, value);
          }
          return reply.status(upstream.status).send(upstream.body);
        }
        countHijacked(request, metrics, 'views', 101);
        const socket = request.raw.socket;
        if (socket.destroyed) {
          upstream.socket.terminate();
          return;
        }
        upstreams.set(request.raw, upstream.socket);
        nodeOf.set(upstream.socket, target.name);
        // The browser went away before its upgrade completed: the node's socket goes too.
        socket.once('close', () => {
          if (upstreams.get(request.raw) === upstream.socket) upstream.socket.terminate();
        });
      },
    },
    (client, request) => {
      const node = upstreams.get(request.raw);
      upstreams.delete(request.raw);
      if (!node) {
        client.close(1011, 'this live view was not admitted');
        return;
      }
      joinSockets(client, node);
      // A node found lost closes the browser's socket (it reconnects, and is told why).
      const untrack = deps.inFlight.track(nodeOf.get(node) ?? '', () => {
        client.close(1011, 'the node of this session stopped answering');
        node.terminate();
      });
      client.once('close', untrack);
    },
  );
}

function protocolsOf(header: string | undefined): string[] {
  return (header ?? '')
    .split(',')
    .map((p) => p.trim())
    .filter((p) => p !== '');
}

function pick(headers: Record<string, string | string[]>, names: readonly string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of names) {
    const value = headers[name];
    if (typeof value === 'string') out[name] = value;
  }
  return out;
}
