/**
 * HTTP upgrades (WebSockets) as @fastify/websocket hands them to fastify: its upgrade listener
 * routes each through the app (so it passes the same hooks as any request), keeping the
 * client's socket and the bytes after its head on the raw request under its own symbols.
 */
import type { Duplex } from 'node:stream';
import type { FastifyInstance, FastifyRequest } from 'fastify';

/** The client's socket of an upgrade request, and the bytes that came after its head (normally none); undefined for a plain request. */
export function upgradeSocketOf(request: FastifyRequest): { socket: Duplex; head: Buffer } | undefined {
  if (typeof request.headers.upgrade !== 'string') return undefined;
  const raw = request.raw as unknown as Record<symbol, unknown>;
  const symbols = Object.getOwnPropertySymbols(raw);
  const socketSymbol = symbols.find((s) => s.description === 'ws-socket');
  const headSymbol = symbols.find((s) => s.description === 'ws-head');
  const socket = socketSymbol ? (raw[socketSymbol] as Duplex | undefined) : undefined;
  if (!socket) return undefined;
  const head = headSymbol ? raw[headSymbol] : undefined;
  return { socket, head: Buffer.isBuffer(head) ? head : Buffer.alloc(0) };
}

/**
 * An upgrade answered over HTTP instead (a 401 of the auth hook, a 404, a node's or a guest's
 * refusal) closes its socket once the answer is out. Nothing else would: the socket left the
 * HTTP server's parser when it asked to upgrade, and @fastify/websocket's own clean-up runs
 * only when its onRequest hook ran, which an earlier hook's refusal skips. Each refused
 * upgrade held a descriptor for good (the server's half of a connection its client had
 * closed), and a server being stopped waited for them forever. Upgrades that went through
 * were hijacked: their sockets are their handlers', and this hook does not run for them.
 */
export function closeRefusedUpgrades(app: FastifyInstance): void {
  app.addHook('onResponse', async (request) => {
    upgradeSocketOf(request)?.socket.destroy();
  });
}
