/**
 * An HTTP upgrade (a WebSocket) under /v1/sessions/:id/ through a gateway: a guest port's
 * WebSocket (path- or host-based, with the API key or a port token), a process's xterm socket,
 * the browser's DevTools socket that Playwright's connectOverCDP opens. The gateway asks the
 * node for the same upgrade and, once the node switched protocols, joins the two sockets byte
 * for byte: no frame is parsed, so subprotocols, extensions and close codes are the node's (and
 * the guest's) as they are on a single host, and a large CDP message costs a copy, not a
 * decode and re-encode. Until the node switches, its answer (a 401 for a bad token, a 404, the
 * guest's own refusal) is the client's, as it gave it; a node that cannot be reached is a 503
 * node_unreachable or 502 node_failed, as for any request.
 */
import http from 'node:http';
import type { Duplex } from 'node:stream';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { errorHandler } from '../../api/errors.js';
import { countHijacked, forwardUrl, type Target } from './forward.js';
import type { InFlight } from './in-flight.js';
import type { GatewayMetrics, RouteFamily } from './metrics.js';
import { nodeError } from './node-client.js';
import { nodeHeaders } from './node-headers.js';

export interface UpgradeOptions {
  readonly secret: string;
  readonly family: RouteFamily;
  /** The tenant the gateway authenticated (absent when a token the node checks opened it). */
  readonly tenant?: string | undefined;
  readonly connectTimeoutMs: number;
  /** Until the node switches protocols or answers (a CDP socket waits for nothing longer than a request). */
  readonly answerTimeoutMs: number;
  readonly metrics: GatewayMetrics;
  readonly inFlight: InFlight;
}

/** The largest refusal (a non-101 answer) read from a node: an error's JSON, a guest's small page. */
const MAX_REFUSAL_BYTES = 64 * 1024;
/** Never copied from a node's refusal: fastify sets its own framing. */
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'upgrade', 'content-length']);

/** Asks `target` for the request's upgrade and joins the sockets; answers through `reply` until then. */
export function forwardUpgrade(
  request: FastifyRequest,
  reply: FastifyReply,
  target: Target,
  client: { socket: Duplex; head: Buffer },
  opts: UpgradeOptions,
): FastifyReply {
  const headers = nodeHeaders(request, request.headers, { secret: opts.secret, tenant: opts.tenant, keyId: request.apiKeyId });
  headers.connection = 'Upgrade';
  headers.upgrade = request.headers.upgrade as string;
  const outgoing = http.request(forwardUrl(target.url, request), { method: request.method, headers, agent: false });
  let settled = false;
  const timer = setTimeout(() => fail(Object.assign(new Error('no answer in time'), { code: 'EANSWER_TIMEOUT' })), opts.answerTimeoutMs);
  const connectTimer = setTimeout(() => fail(Object.assign(new Error('connect timed out'), { code: 'ECONNECT_TIMEOUT' })), opts.connectTimeoutMs);
  outgoing.once('socket', (socket) => socket.once('connect', () => clearTimeout(connectTimer)));
  const settle = (): boolean => {
    if (settled) return false;
    settled = true;
    clearTimeout(timer);
    clearTimeout(connectTimer);
    return true;
  };
  function fail(err: unknown): void {
    if (!settle()) return;
    outgoing.destroy();
    if (!reply.sent) errorHandler(nodeError(target.name, err), request, reply);
  }
  // The client went away while the node was asked: the node's side goes too.
  const onClientClose = () => {
    if (settle()) outgoing.destroy();
  };
  client.socket.once('close', onClientClose);
  outgoing.on('error', fail);
  outgoing.on('response', (answer) => {
    // The node (or the guest behind it) would not switch: its answer, as it gave it.
    const chunks: Buffer[] = [];
    let size = 0;
    answer.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size <= MAX_REFUSAL_BYTES) chunks.push(chunk);
    });
    answer.on('error', fail);
    answer.on('end', () => {
      if (!settle()) return;
      client.socket.removeListener('close', onClientClose);
      for (const [name, value] of Object.entries(answer.headers)) if (value !== undefined && !HOP_BY_HOP.has(name)) void reply.header(name, value);
      void reply.status(answer.statusCode ?? 502).send(Buffer.concat(chunks).subarray(0, MAX_REFUSAL_BYTES));
    });
  });
  outgoing.on('upgrade', (answer, nodeSocket, nodeHead) => {
    if (!settle()) {
      nodeSocket.destroy();
      return;
    }
    client.socket.removeListener('close', onClientClose);
    reply.hijack();
    countHijacked(request, opts.metrics, opts.family, 101);
    join(client.socket, client.head, nodeSocket, nodeHead, statusHead(answer));
    // A node found lost cuts its sockets (the client reconnects through the gateway, and is told why).
    const untrack = opts.inFlight.track(target.name, () => {
      nodeSocket.destroy();
      client.socket.destroy();
    });
    client.socket.once('close', untrack);
  });
  outgoing.end();
  return reply;
}

/** The node's 101 as the client gets it: its status line and headers, as they came. */
function statusHead(answer: http.IncomingMessage): string {
  let head = `HTTP/1.1 ${answer.statusCode ?? 101} ${answer.statusMessage ?? 'Switching Protocols'}\r\n`;
  const raw = answer.rawHeaders;
  for (let i = 0; i + 1 < raw.length; i += 2) head += `${raw[i]}: ${raw[i + 1]}\r\n`;
  return `${head}\r\n`;
}

/** The two sockets, joined until either ends (with backpressure both ways: pipe pauses a side whose peer is full). */
function join(client: Duplex, clientHead: Buffer, node: Duplex, nodeHead: Buffer, head: string): void {
  for (const socket of [client, node]) (socket as Duplex & { setNoDelay?: (on: boolean) => void }).setNoDelay?.(true);
  client.write(head);
  if (nodeHead.length > 0) client.write(nodeHead);
  if (clientHead.length > 0) node.write(clientHead);
  const cut = () => {
    client.destroy();
    node.destroy();
  };
  client.on('error', cut);
  node.on('error', cut);
  client.once('close', () => node.destroy());
  node.once('close', () => client.destroy());
  node.pipe(client);
  client.pipe(node);
}
