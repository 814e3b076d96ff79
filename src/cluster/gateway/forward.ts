/**
 * Forwarding a request to the node that holds its session, streamed both ways with
 * @fastify/reply-from (undici): an upload's body goes to the node as it arrives, a download,
 * a recording's byte range or an event stream comes back as the node sends it; nothing is
 * held whole. The headers are the protocol's (node-headers.ts). A node that cannot be reached
 * or breaks off is a 503 node_unreachable or 502 node_failed, never a 500 or a hang.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { pipeline, type Readable } from 'node:stream';
import { errorHandler } from '../../api/errors.js';
import { cameByHost } from '../../ports/host-routing.js';
import { OrchestratorError } from '../../errors.js';
import type { ClusterState } from './cluster-state.js';
import type { GatewayMetrics, RouteFamily } from './metrics.js';
import { nodeError, nodeUrl } from './node-client.js';
import { NodeFailedError } from './errors.js';
import type { InFlight } from './in-flight.js';
import { nodeHeaders } from './node-headers.js';

/** Where a request goes: a node's name (for errors and metrics) and its advertised URL. */
export interface Target {
  readonly name: string;
  readonly url: string;
}

export interface ForwardOptions {
  readonly family: RouteFamily;
  /** The tenant the gateway authenticated (absent on open routes). */
  readonly tenant?: string | undefined;
  /** The session, so a failed forward drops its cached route. */
  readonly sessionId?: string;
  /**
   * Reads a successful answer (2xx, at most 64 KiB) before it is sent on: the gateway records
   * what the answer names (a view's token, a run's id). A rejection becomes the answer.
   */
  readonly inspect?: (status: number, body: Buffer) => Promise<void>;
}

export interface Forwarder {
  forward(request: FastifyRequest, reply: FastifyReply, target: Target, opts: ForwardOptions): FastifyReply;
}

const MAX_INSPECTED_BYTES = 64 * 1024;

export function createForwarder(secret: string, state: ClusterState, metrics: GatewayMetrics, inFlight: InFlight): Forwarder {
  return {
    forward(request, reply, target, opts) {
      // Found lost while this is in flight: an unanswered request gets 502, a stream is cut.
      const untrack = inFlight.track(target.name, () => {
        if (!reply.sent) errorHandler(new NodeFailedError(target.name, 'it stopped heartbeating and was marked lost'), request, reply);
        else request.raw.destroy();
      });
      reply.raw.once('close', untrack);
      reply.raw.once('finish', untrack);
      const whole = Buffer.isBuffer(request.body) ? request.body : undefined;
      return reply.from(forwardUrl(target.url, request), {
        // A small body read whole (smallBodyWholeOrStream), sent with its type as the client gave it.
        ...(whole !== undefined ? { body: whole, contentType: request.headers['content-type'] } : {}),
        rewriteRequestHeaders: (_req, headers) => {
          const req = request;
          const rewritten = nodeHeaders(req, headers, { secret, tenant: opts.tenant, keyId: req.apiKeyId });
          // reply-from sets Host to the node's; the node must see the client's (the URLs it builds).
          if (req.headers.host !== undefined) rewritten.host = req.headers.host;
          return rewritten;
        },
        // reply-from retries a GET answered 503 up to 10 times by default: a node's 503 is the client's answer.
        retryDelay: () => null,
        onError: (_failed, { error }) => {
          if (reply.sent) return; // already answered (cut when its node was found lost)
          if (opts.sessionId !== undefined) state.forgetSession(opts.sessionId);
          const answer = nodeError(target.name, error);
          errorHandler(answer, request, reply);
        },
        onResponse: (_req, _answered, res) => {
          const answered = reply;
          if (answered.sent) {
            (res.stream as Readable).destroy(); // answered already (cut when its node was found lost)
            return;
          }
          metrics.proxyDuration.observe({ family: opts.family }, answered.elapsedTime / 1000);
          const stream = res.stream as Readable;
          if (String(answered.getHeader('content-type') ?? '').startsWith('text/event-stream')) {
            countHijacked(request, metrics, opts.family, answered.statusCode);
            sendEventStream(answered, stream);
            return;
          }
          if (!opts.inspect || answered.statusCode < 200 || answered.statusCode >= 300) {
            void answered.send(stream);
            return;
          }
          const fail = (err: unknown) => {
            // The node's headers were copied already: they describe its body, not this error.
            answered.removeHeader('content-length');
            answered.removeHeader('content-type');
            errorHandler(err instanceof Error ? err : new Error(String(err)), request, answered);
          };
          readSmall(stream).then(
            (body) =>
              (opts.inspect?.(answered.statusCode, body) ?? Promise.resolve()).then(() => {
                void answered.send(body);
              }, fail),
            (err: unknown) => fail(nodeError(target.name, err)),
          );
        },
      });
    },
  };
}

/** Bodies up to this size (by their content-length) are read whole before they are forwarded. */
export const WHOLE_BODY_BYTES = 64 * 1024;

/**
 * The forwarded routes' body parser. A small body with a content-length and a type (an
 * action, a bash command, a guest app's form) is read whole and forwarded as one buffer:
 * undici then writes it with the request's head at once, instead of waiting on a stream's
 * events across turns of the event loop (counted with strace over a bench run: ~2 fewer
 * epoll wake-ups a POST; its CPU a request 0.3-0.6 ms lower, GETs unchanged). Anything else
 * (an upload, chunked, no type) streams to the node as it arrives, never held.
 */
export function smallBodyWholeOrStream(request: FastifyRequest, payload: NodeJS.ReadableStream, done: (err: Error | null, body?: unknown) => void): void {
  const length = Number(request.headers['content-length'] ?? Number.NaN);
  if (!(length >= 0 && length <= WHOLE_BODY_BYTES) || request.headers['content-type'] === undefined || request.headers['transfer-encoding'] !== undefined) {
    done(null, payload);
    return;
  }
  const chunks: Buffer[] = [];
  let size = 0;
  payload.on('data', (chunk: Buffer) => {
    size += chunk.length;
    chunks.push(chunk);
  });
  payload.once('error', (err: Error) => done(err));
  payload.once('end', () => done(null, Buffer.concat(chunks, size)));
}

/** A path a URL parser rewrites (dot segments, backslashes): no route, as on a single host. */
export class RouteNotFoundError extends OrchestratorError {
  constructor(method: string, path: string) {
    super('route_not_found', `no route ${method} ${path}`);
  }
}

const PLAIN_PATH = /^\/[A-Za-z0-9/_-]*$/;

/**
 * The node's URL for this request, with the path exactly as the gateway routed (and checked)
 * it. A URL parser resolves \`..\` and \`%2e%2e\` segments and turns \`\\\` into \`/\`: forwarded
 * through one, \`/v1/sessions/<mine>/%2e%2e/<theirs>/actions\` would be checked as the caller's
 * session and reach another (reply-from refuses a literal \`..\` itself, with a 400; the
 * WebSocket client would not). Such a path is no route of the API: the single host's 404.
 */
export function forwardUrl(base: string, request: FastifyRequest): string {
  const url = sentUrl(request);
  const joined = nodeUrl(base, url);
  // Letters, digits, '/', '-' and '_' only (every session route but a file's path): nothing a
  // URL parser would rewrite, so no parse per request.
  const query = url.indexOf('?');
  if (PLAIN_PATH.test(query < 0 ? url : url.slice(0, query))) return joined;
  const parsed = new URL(joined);
  const path = joined.slice(parsed.origin.length).split('?')[0];
  if (parsed.pathname !== path) throw new RouteNotFoundError(request.method, url.split('?')[0] ?? '');
  return joined;
}

/**
 * The path and query the client sent. A guest port's host-based request (`<port>-<id>.<domain>`)
 * was routed here as the path form; the node gets it as it came, with its Host, and routes it
 * by that Host itself (its SBX_PORTS_DOMAIN is the gateways'), so that the guest sees the
 * host-based form (its own origin, the root path), not a path a second rewrite would nest.
 */
function sentUrl(request: FastifyRequest): string {
  if (!cameByHost(request.raw)) return request.url;
  return (request.raw as { originalUrl?: string }).originalUrl ?? '/';
}

/**
 * An event stream: its headers go to the client at once (the node flushed them before its
 * first event, so the client knows its stream is open), then its events as they come, with
 * backpressure; either side going away ends the other.
 */
function sendEventStream(reply: FastifyReply, stream: Readable): void {
  const headers = reply.getHeaders();
  reply.hijack();
  const raw = reply.raw;
  raw.writeHead(reply.statusCode, headers as Record<string, string | string[] | number>);
  raw.flushHeaders();
  pipeline(stream, raw, () => undefined);
}

/** Requests answered outside fastify's reply (event streams, WebSocket upgrades): counted where they are answered. */
const counted = new WeakSet<FastifyRequest>();

export function countHijacked(request: FastifyRequest, metrics: GatewayMetrics, family: RouteFamily, status: number): void {
  counted.add(request);
  metrics.proxiedRequests.inc({ family, status: String(status) });
}

/**
 * Every answer counted by its route family and status (forwarded, or answered by the
 * gateway for a node: 404, 410, 5xx), in one onResponse hook.
 */
export function installRequestCount(app: FastifyInstance, metrics: GatewayMetrics): void {
  app.addHook('onResponse', async (request, reply) => {
    if (counted.has(request)) return;
    const family = familyOf(request);
    if (family !== undefined) metrics.proxiedRequests.inc({ family, status: String(reply.statusCode) });
  });
}

/** The route family of a request (undefined: the gateway's own /healthz and /metrics, not counted). */
export function familyOf(request: FastifyRequest): RouteFamily | undefined {
  const route = request.routeOptions.url;
  if (route === '/healthz' || route === '/metrics') return undefined;
  if (route === '/v1/sessions') return request.method === 'POST' ? 'create' : 'list';
  if (route === '/mcp') return 'mcp';
  if (route?.startsWith('/v1/runs')) return 'runs';
  if (route?.startsWith('/v1/view')) return 'views';
  if (route?.startsWith('/v1/volumes')) return 'volumes';
  if (route?.startsWith('/v1/sessions/:id')) {
    const rest = (request.params as { '*'?: string })['*'] ?? '';
    if (rest.startsWith('files')) return 'files';
    if (rest === 'screen/stream' || rest.startsWith('recording')) return 'streams';
    if (rest.startsWith('views')) return 'views';
    return 'sessions';
  }
  return 'other';
}

/** A small answer read whole (a view or a run: a few hundred bytes). */
function readSmall(stream: Readable): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    stream.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_INSPECTED_BYTES) {
        stream.destroy();
        reject(Object.assign(new Error(`the node's answer is over ${MAX_INSPECTED_BYTES} bytes`), { code: 'EANSWER_TOO_LARGE' }));
      } else chunks.push(chunk);
    });
    stream.once('error', reject);
    stream.once('end', () => resolve(Buffer.concat(chunks)));
  });
}
