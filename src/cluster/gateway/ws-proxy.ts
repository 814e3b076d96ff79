/**
 * A live view's WebSocket through a gateway: the browser's socket joined to one the gateway
 * opens to the node, message for message. The node's socket is opened first (in the route's
 * preValidation), so a token the node refuses gets the node's own HTTP answer, not a socket
 * that closes at once. Backpressure holds both ways: a side whose peer has more than
 * HIGH_WATER_BYTES unsent is paused until it drains. Either side closing or failing closes
 * the other, with the same close code where one may be sent.
 */
import type { IncomingMessage } from 'node:http';
import WebSocket from 'ws';

/** Bytes waiting for one side above which the other is paused (a noVNC frame or two). */
export const HIGH_WATER_BYTES = 1024 * 1024;
/** A peer that does not answer a close within this long is cut. */
const CLOSE_GRACE_MS = 2_000;

export interface UpstreamOptions {
  readonly url: string;
  readonly headers: Record<string, string>;
  readonly protocols: string[];
  readonly origin?: string | undefined;
  readonly timeoutMs: number;
}

/** The node's answer: an open socket, or the HTTP refusal it sent instead of upgrading. */
export type Upstream =
  | { readonly open: true; readonly socket: WebSocket }
  | { readonly open: false; readonly status: number; readonly headers: IncomingMessage['headers']; readonly body: Buffer };

/** Opens the node's side; rejects (with the socket error) when the node cannot be reached. */
export function openUpstream(opts: UpstreamOptions): Promise<Upstream> {
  return new Promise((resolve, reject) => {
    const socket = new WebSocket(opts.url, opts.protocols, {
      headers: opts.headers,
      handshakeTimeout: opts.timeoutMs,
      perMessageDeflate: false,
      ...(opts.origin !== undefined ? { origin: opts.origin } : {}),
    });
    const onError = (err: Error) => {
      socket.terminate();
      reject(err);
    };
    socket.once('error', onError);
    socket.once('open', () => {
      socket.removeListener('error', onError);
      resolve({ open: true, socket });
    });
    socket.once('unexpected-response', (_request, response) => {
      socket.removeListener('error', onError);
      socket.on('error', () => undefined);
      const chunks: Buffer[] = [];
      let size = 0;
      response.on('data', (chunk: Buffer) => {
        size += chunk.length;
        if (size <= 64 * 1024) chunks.push(chunk);
      });
      response.on('error', reject);
      response.on('end', () => {
        resolve({ open: false, status: response.statusCode ?? 502, headers: response.headers, body: Buffer.concat(chunks) });
        socket.terminate();
      });
    });
  });
}

/** Joins two open sockets until either ends. */
export function joinSockets(client: WebSocket, node: WebSocket): void {
  relay(client, node);
  relay(node, client);
}

function relay(from: WebSocket, to: WebSocket): void {
  from.on('message', (data: Buffer, isBinary: boolean) => {
    if (to.readyState !== WebSocket.OPEN) return;
    to.send(data, { binary: isBinary }, () => {
      if (from.isPaused && to.bufferedAmount < HIGH_WATER_BYTES / 2) from.resume();
    });
    if (to.bufferedAmount > HIGH_WATER_BYTES && !from.isPaused) from.pause();
  });
  from.on('close', (code: number, reason: Buffer) => closeWith(to, code, reason));
  from.on('error', () => {
    from.terminate();
    to.terminate();
  });
}

/** Codes an endpoint may send in a close frame (1005, 1006, 1015 are only ever reported). */
function sendable(code: number): boolean {
  return (code >= 1000 && code <= 1014 && code !== 1004 && code !== 1005 && code !== 1006) || (code >= 3000 && code <= 4999);
}

function closeWith(socket: WebSocket, code: number, reason: Buffer): void {
  if (socket.readyState === WebSocket.CLOSED || socket.readyState === WebSocket.CLOSING) return;
  if (socket.readyState !== WebSocket.OPEN) {
    socket.terminate();
    return;
  }
  if (sendable(code)) socket.close(code, reason.subarray(0, 123));
  else socket.close(1011, 'the other side of the gateway closed');
  setTimeout(() => socket.terminate(), CLOSE_GRACE_MS).unref();
}
