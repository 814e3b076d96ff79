import type { ServerOptions as HttpServerOptions } from 'node:http';
import type { FastifyInstance } from 'fastify';

/**
 * How long the server waits on a client, so that a slow or hostile one holds a socket and a
 * little memory for a bounded time, and never holds up anyone else:
 * - headers sent byte by byte (slowloris): cut after `headersTimeoutMs`;
 * - a request body that trickles in: cut after `requestTimeoutMs` from the request's start
 *   (408), which also bounds an upload's duration (100 MiB needs ~1 MB/s at the default);
 * - a response the client does not read (a screenshot, a download): dropped after
 *   `sendTimeoutMs` without a byte accepted by the client. Only while a response is being
 *   sent: a handler working for minutes (a bash command, a boot) is not a stalled client.
 *   A dropped download destroys its stream, which closes the SFTP handle in the guest.
 */
export interface ConnectionLimits {
  headersTimeoutMs: number;
  requestTimeoutMs: number;
  sendTimeoutMs: number;
}

export const DEFAULT_CONNECTION_LIMITS: ConnectionLimits = {
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 120_000,
  sendTimeoutMs: 30_000,
};

/** The server options that enforce the header and request timeouts (Node checks them). */
export function connectionServerOptions(limits: ConnectionLimits): { requestTimeout: number; connectionTimeout: number; http: HttpServerOptions } {
  return {
    requestTimeout: limits.requestTimeoutMs,
    // No inactivity timeout on the whole socket: it would cut long-running handlers.
    connectionTimeout: 0,
    http: {
      headersTimeout: limits.headersTimeoutMs,
      requestTimeout: limits.requestTimeoutMs,
      // Node checks the two timeouts above this often (default 30 s: a slowloris would
      // then live up to 30 s past its limit).
      connectionsCheckingInterval: Math.max(250, Math.min(1_000, Math.floor(limits.headersTimeoutMs / 2))),
    },
  };
}

/** Hooks: the send timeout, and closing connections whose request body was refused unread. */
export function applyConnectionLimits(app: FastifyInstance, limits: ConnectionLimits): void {
  // Each request's own timeout listener, removed once it is sent (keep-alive sockets carry
  // many requests; Node's own 'timeout' listener on the socket must stay).
  const onStall = new WeakMap<object, () => void>();
  app.addHook('onSend', async (request, reply) => {
    // An error answered before the body arrived (413, 404 on an upload): close rather than
    // let Node read and discard the rest of a possibly huge body to keep the socket.
    if (reply.statusCode >= 400 && !request.raw.complete) void reply.header('connection', 'close');
    const socket = request.raw.socket;
    // inject() has no real socket, and so no client that could stall.
    if (typeof socket?.setTimeout !== 'function') return;
    // Whether the client reads: the timer restarts whenever the socket moves bytes.
    if (onStall.has(request.raw)) return; // onSend runs again for an error sent after a failed send
    const stalled = () => {
      request.log.warn({ sendTimeoutMs: limits.sendTimeoutMs }, 'client stopped reading the response; closing its connection');
      socket.destroy();
    };
    onStall.set(request.raw, stalled);
    socket.setTimeout(limits.sendTimeoutMs, stalled);
  });
  app.addHook('onResponse', async (request) => {
    // Sent: the socket is idle now, which the keep-alive timeout governs, not this one.
    const stalled = onStall.get(request.raw);
    if (!stalled) return;
    request.raw.socket.setTimeout(0);
    request.raw.socket.removeListener('timeout', stalled);
  });
}
