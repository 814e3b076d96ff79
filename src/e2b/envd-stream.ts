import type { IncomingMessage, ServerResponse } from 'node:http';
import { create, fromBinary, fromJsonString, toBinary, toJsonString, type DescMessage, type DescMethod } from '@bufbuild/protobuf';
import { Code, ConnectError, createContextValues, createHandlerContext, type HandlerContext } from '@connectrpc/connect';
import { createEndStreamSerialization, endStreamFlag } from '@connectrpc/connect/protocol-connect';
import { ENVD_CALL, MAX_CONNECT_MESSAGE_BYTES, toConnectError, type EnvdCall } from './envd-connect.js';
import { processService } from './envd-process.js';
import { ConnectRequestSchema, ConnectResponseSchema, Process, StartRequestSchema, StartResponseSchema } from './gen/process/process_pb.js';

/**
 * process.Process's Start and Connect, the streams every command of the SDK opens, served
 * straight onto the response: one request envelope read (its length checked against
 * MAX_CONNECT_MESSAGE_BYTES before any of it is buffered, none of it parsed before it is
 * whole), the same handlers as connect runs (envd-process.ts: argv stays argv, the output
 * bounded by their queue), each event written as one envelope as the previous one is taken.
 * Connect's generic pipeline (some ten async iterables per message, its abort signals and
 * header copies) cost about 0.7 ms of CPU and 1.5 ms of latency per command here; anything
 * outside this plain case (another content type, compression, a malformed timeout) is left
 * to it (fastPathFor answers undefined).
 */

const JSON_TYPE = 'application/connect+json';
const PROTO_TYPE = 'application/connect+proto';
const endStream = createEndStreamSerialization(undefined);

/** A server-streaming method served here: its schemas and our handler (envd-process.ts). */
interface StreamMethod {
  method: DescMethod;
  input: DescMessage;
  output: DescMessage;
  run: (request: never, context: HandlerContext) => AsyncIterable<unknown>;
}

const METHODS: Readonly<Record<string, StreamMethod>> = {
  '/process.Process/Start': {
    method: Process.method.start,
    input: StartRequestSchema,
    output: StartResponseSchema,
    run: processService.start.bind(processService),
  },
  '/process.Process/Connect': {
    method: Process.method.connect,
    input: ConnectRequestSchema,
    output: ConnectResponseSchema,
    run: processService.connect.bind(processService),
  },
};

/** The method and codec when the call is the plain case served here. */
export function fastPathFor(path: string, request: IncomingMessage): { target: StreamMethod; binary: boolean; timeoutMs?: number } | undefined {
  const target = Object.hasOwn(METHODS, path) ? METHODS[path] : undefined;
  const type = request.headers['content-type']?.split(';')[0]?.trim().toLowerCase();
  const encoding = request.headers['connect-content-encoding'];
  const timeout = request.headers['connect-timeout-ms'];
  if (Array.isArray(timeout)) return undefined;
  if (!target || request.method !== 'POST' || (type !== JSON_TYPE && type !== PROTO_TYPE)) return undefined;
  if (encoding !== undefined && encoding !== 'identity') return undefined;
  if (timeout !== undefined && !/^\d{1,10}$/.test(timeout)) return undefined;
  return { target, binary: type === PROTO_TYPE, ...(timeout !== undefined ? { timeoutMs: Number(timeout) } : {}) };
}

/**
 * The one request envelope's payload; refused from its length before its bytes are kept, and
 * the rest of a refused body left unread (the answer closes the connection).
 */
function readEnvelope(request: IncomingMessage): Promise<Uint8Array> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    let have = 0;
    let want: number | undefined;
    const finish = (err: Error | undefined) => {
      request.off('data', onData);
      request.off('end', onEnd);
      request.off('error', onError);
      request.off('close', onClose);
      if (err) {
        request.pause();
        reject(err);
      } else resolve(Buffer.concat(parts).subarray(5));
    };
    const onData = (chunk: Buffer) => {
      parts.push(chunk);
      have += chunk.length;
      if (want === undefined && have >= 5) {
        const head = parts.length === 1 ? chunk : Buffer.concat(parts);
        const length = head.readUInt32BE(1);
        if (length > MAX_CONNECT_MESSAGE_BYTES)
          return finish(new ConnectError(`message size ${length} is larger than configured readMaxBytes ${MAX_CONNECT_MESSAGE_BYTES}`, Code.ResourceExhausted));
        if (head[0] !== 0) return finish(new ConnectError('protocol error: a compressed or end-of-stream request envelope', Code.InvalidArgument));
        want = 5 + length;
      }
      if (want !== undefined && have > want)
        finish(new ConnectError('protocol error: received extra input message for server_streaming method', Code.Unimplemented));
    };
    const onEnd = () => finish(want === undefined || have < want ? new ConnectError('protocol error: incomplete envelope', Code.InvalidArgument) : undefined);
    const onError = (err: Error) => finish(ConnectError.from(err, Code.Canceled));
    const onClose = () => {
      if (!request.complete) finish(new ConnectError('the client went before its request was whole', Code.Canceled));
    };
    request.on('data', onData);
    request.once('end', onEnd);
    request.once('error', onError);
    request.once('close', onClose);
  });
}

function envelope(flags: number, payload: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(5 + payload.length);
  out[0] = flags;
  out.writeUInt32BE(payload.length, 1);
  out.set(payload, 5);
  return out;
}

/** Serves the call on the (hijacked) response: HTTP 200, the events, then the end-of-stream message with the error if one ended it. */
export async function serveProcessStream(call: EnvdCall, path: { target: StreamMethod; binary: boolean; timeoutMs?: number }): Promise<void> {
  const { request, reply } = call;
  const res = reply.raw;
  const { target, binary } = path;
  const encode = (message: unknown): Buffer => {
    const full = create(target.output, message as never);
    return envelope(0, binary ? toBinary(target.output, full) : Buffer.from(toJsonString(target.output, full)));
  };
  // The client gone before the stream ended, or its deadline passed: the handler's signal
  // aborts (its reader, keepalive and queue go; a deadline ends the stream with its error).
  const gone = new AbortController();
  const onClose = () => {
    if (!res.writableFinished) gone.abort();
  };
  const deadline =
    path.timeoutMs === undefined ? undefined : setTimeout(() => gone.abort(new ConnectError('the operation timed out', Code.DeadlineExceeded)), path.timeoutMs);
  reply.hijack();
  res.on('error', () => undefined);
  res.once('close', onClose);
  let failure: ConnectError | undefined;
  try {
    const payload = await readEnvelope(request.raw);
    let input;
    try {
      input = binary ? fromBinary(target.input, payload) : fromJsonString(target.input, Buffer.from(payload).toString('utf8'), { ignoreUnknownFields: true });
    } catch (err) {
      throw ConnectError.from(err, Code.InvalidArgument);
    }
    const ctx = createHandlerContext({
      service: Process,
      method: target.method,
      protocolName: 'connect',
      requestMethod: 'POST',
      url: `http://${request.headers.host ?? 'envd'}${request.url}`,
      requestHeader: new Headers({ 'keepalive-ping-interval': request.headers['keepalive-ping-interval']?.toString() ?? '' }),
      requestSignal: gone.signal,
      contextValues: createContextValues().set(ENVD_CALL, call),
    });
    const events = target.run(input as never, ctx);
    for await (const event of events) {
      if (res.destroyed) break;
      if (!res.headersSent) res.writeHead(200, { 'content-type': binary ? PROTO_TYPE : JSON_TYPE });
      // The next event is taken only once this one is written (or the client gone): nothing piles up here.
      if (!res.write(encode(event))) await drainedOrClosed(res);
    }
  } catch (err) {
    failure = toConnectError(err, request.log);
  } finally {
    clearTimeout(deadline);
    res.off('close', onClose);
  }
  if (res.destroyed) return;
  if (!res.headersSent) {
    const headers: Record<string, string> = { 'content-type': binary ? PROTO_TYPE : JSON_TYPE };
    // Refused before its body was all read (a message over the cap): close rather than read the rest.
    if (!request.raw.complete) headers.connection = 'close';
    res.writeHead(200, headers);
  }
  res.end(envelope(endStreamFlag, endStream.serialize({ metadata: new Headers(), ...(failure ? { error: failure } : {}) })));
}

/** Resolves once `res` drained or closed, leaving no listener behind (a long stream waits many times). */
function drainedOrClosed(res: ServerResponse): Promise<void> {
  return new Promise<void>((resolve) => {
    const done = () => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.once('drain', done);
    res.once('close', done);
  });
}
