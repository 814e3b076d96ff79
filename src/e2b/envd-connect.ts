import { Readable } from 'node:stream';
import {
  Code,
  ConnectError,
  createConnectRouter,
  createContextKey,
  createContextValues,
  type ConnectRouter,
  type HandlerContext,
  type Interceptor,
} from '@connectrpc/connect';
import { universalRequestFromNodeRequest } from '@connectrpc/connect-node';
import { encodeEnvelope, type UniversalHandler } from '@connectrpc/connect/protocol';
import { codeToHttpStatus, contentTypeStreamProto, createEndStreamSerialization, errorToJsonBytes, endStreamFlag } from '@connectrpc/connect/protocol-connect';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { FsCalls } from '../files/fs-calls.js';
import type { ProcessTable } from '../processes/process-table.js';
import type { WatcherTable } from './envd-filesystem.js';
import { e2bFailure, E2bUnsupportedError, type ConnectCode } from './errors.js';
import type { EventQueue } from './event-queue.js';

/**
 * envd's Connect services served by @connectrpc/connect from the code generated from E2B's
 * own protos (src/e2b/gen): the Connect protocol only (no gRPC), its JSON codec (the SDK's)
 * and its binary one. The call arrives through fastify, so it was authenticated (the envd
 * access token), counted against the tenant's limits and its sandbox resumed before the
 * body is read; connect reads the body itself, refusing a message over readMaxBytes from its
 * length before anything of it is parsed.
 */

/** Largest Connect message (one unary body or one envelope): 512 KiB of stdin in base64, with room. */
export const MAX_CONNECT_MESSAGE_BYTES = 1024 * 1024;
/** The content types connect serves: unary JSON and binary, streamed JSON and binary. */
export const CONNECT_TYPES = ['application/json', 'application/proto', 'application/connect+json', 'application/connect+proto'];

/** What a handler needs of the HTTP call it serves (the context value ENVD_CALL). */
export interface EnvdCall {
  request: FastifyRequest;
  reply: FastifyReply;
  sandboxId: string;
  /** Counts the call as one of the tenant's streams (429 beyond its limit) instead of one of its requests. */
  openStream(): void;
  processes(): Promise<{ table: ProcessTable; envVars: Record<string, string> }>;
  fs(): Promise<FsCalls>;
  watchers(): Promise<WatcherTable>;
}

export const ENVD_CALL = createContextKey<EnvdCall | undefined>(undefined, { description: 'envd call' });

export function envdCall(ctx: HandlerContext): EnvdCall {
  const call = ctx.values.get(ENVD_CALL);
  if (!call) throw new ConnectError('envd call without its request', Code.Internal);
  return call;
}

/** Why connect aborted a call: its deadline (a ConnectError), or nothing to say (the client went). */
export function abortReason(ctx: HandlerContext): Error | undefined {
  const reason: unknown = ctx.signal.reason;
  return reason instanceof ConnectError ? reason : undefined;
}

const CODE: Readonly<Record<ConnectCode, Code>> = {
  invalid_argument: Code.InvalidArgument,
  unauthenticated: Code.Unauthenticated,
  permission_denied: Code.PermissionDenied,
  not_found: Code.NotFound,
  already_exists: Code.AlreadyExists,
  failed_precondition: Code.FailedPrecondition,
  resource_exhausted: Code.ResourceExhausted,
  unimplemented: Code.Unimplemented,
  unavailable: Code.Unavailable,
  deadline_exceeded: Code.DeadlineExceeded,
  internal: Code.Internal,
};

/** Any error as connect's: ours keep their code's meaning (errors.ts), with our code leading the message. */
export function toConnectError(err: unknown, log?: FastifyRequest['log']): ConnectError {
  if (err instanceof ConnectError) return err;
  const failure = e2bFailure(err);
  if (failure.status >= 500) log?.warn({ err }, 'envd call failed');
  return new ConnectError(failure.message, CODE[failure.connectCode]);
}

/** Our errors, thrown by a handler or by its stream, said in Connect's terms. */
const ourErrors: Interceptor = (next) => async (req) => {
  const log = req.contextValues.get(ENVD_CALL)?.request.log;
  try {
    const res = await next(req);
    if (!res.stream) return res;
    const messages = res.message;
    return {
      ...res,
      message: (async function* () {
        try {
          yield* messages;
        } catch (err) {
          throw toConnectError(err, log);
        }
      })(),
    };
  } catch (err) {
    throw toConnectError(err, log);
  }
};

/** The services' handlers by path (`/process.Process/Start`). */
export function envdHandlers(routes: (router: ConnectRouter) => void): Map<string, UniversalHandler> {
  const router = createConnectRouter({
    grpc: false,
    grpcWeb: false,
    readMaxBytes: MAX_CONNECT_MESSAGE_BYTES,
    // No compression: nothing to inflate past the cap, and the SDK sends none.
    acceptCompression: [],
    // A newer SDK's fields we do not know are skipped, as envd's own server does.
    jsonOptions: { ignoreUnknownFields: true },
    interceptors: [ourErrors],
  });
  routes(router);
  return new Map(router.handlers.map((handler) => [handler.requestPath, handler]));
}

/** Whether a path is a server- or client-streaming method (its errors go in an end-of-stream message). */
export function isStreamingPath(handlers: Map<string, UniversalHandler>, path: string): boolean {
  const kind = handlers.get(path)?.method.methodKind;
  return kind !== undefined && kind !== 'unary';
}

/**
 * Serves one call through fastify's reply (so its hooks, log line and connection handling
 * apply): connect's answer is taken once its first chunk exists (its headers are final then),
 * then streamed one message at a time, pulled only as the client takes them.
 */
export async function serveConnect(handlers: Map<string, UniversalHandler>, path: string, call: EnvdCall): Promise<FastifyReply> {
  const { request, reply } = call;
  const handler = handlers.get(path);
  if (!handler) throw new E2bUnsupportedError(`${path.slice(0, 96)} is not a method of envd's services`);
  const answer = await handler(universalRequestFromNodeRequest(request.raw, reply.raw, undefined, createContextValues().set(ENVD_CALL, call)));
  const chunks = answer.body?.[Symbol.asyncIterator]();
  const first = chunks ? await chunks.next() : undefined;
  void reply.status(answer.status);
  answer.header?.forEach((value, key) => void reply.header(key, value));
  // Answered before the body was all read (a message over the cap): close rather than read the rest.
  if (!request.raw.complete) void reply.header('connection', 'close');
  if (!chunks || !first || first.done === true) return reply.send();
  if (handler.method.methodKind === 'unary') return reply.send(Buffer.from(first.value));
  const rest = chunks;
  const messages = (async function* () {
    try {
      yield first.value;
      for (let next = await rest.next(); next.done !== true; next = await rest.next()) yield next.value;
    } finally {
      // A client gone ends this generator early: the handler's own must end too (its finally releases readers, watches, timers).
      await rest.return?.();
    }
  })();
  return reply.send(Readable.from(messages, { objectMode: true, highWaterMark: 1 }));
}

const endStream = createEndStreamSerialization(undefined);

/**
 * A call refused before connect had it (a wrong token, a tenant limit, a paused sandbox that
 * would not resume): answered as Connect answers, a unary call with the code's HTTP status and
 * a JSON error, a streaming one with HTTP 200 and one end-of-stream message carrying the error.
 */
export function connectRefusal(reply: FastifyReply, streaming: boolean, contentType: string | undefined, err: unknown): FastifyReply {
  const failure = e2bFailure(err);
  const error = new ConnectError(failure.message, CODE[failure.connectCode]);
  if (!streaming)
    return reply
      .status(codeToHttpStatus(error.code))
      .header('content-type', 'application/json')
      .send(Buffer.from(errorToJsonBytes(error, {})));
  const type = contentType?.startsWith(contentTypeStreamProto) ? contentTypeStreamProto : 'application/connect+json';
  const body = encodeEnvelope(endStreamFlag, endStream.serialize({ metadata: new Headers(), error }));
  return reply.status(200).header('content-type', type).send(Buffer.from(body));
}

/**
 * Keepalive messages at the interval the SDK asks (Keepalive-Ping-Interval, seconds), so
 * proxies keep an idle stream open: only while nothing else waits to be sent, so a client that
 * stopped reading does not pile them up uncounted.
 */
export function keepalive<T>(ctx: HandlerContext, queue: EventQueue<T>, message: T): () => void {
  const every = Number(ctx.requestHeader.get('keepalive-ping-interval'));
  if (!Number.isFinite(every) || every < 1) return () => undefined;
  const timer = setInterval(
    () => {
      if (queue.isEmpty) queue.push(message);
    },
    Math.min(every, 300) * 1000,
  );
  return () => clearInterval(timer);
}
