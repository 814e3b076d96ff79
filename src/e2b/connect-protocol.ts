import type { FastifyReply, FastifyRequest } from 'fastify';
import { InvalidRequestError } from '../errors.js';
import type { ConnectCode } from './errors.js';

/**
 * Connect's protocol (connectrpc.com/docs/protocol) with the JSON codec, as the `e2b` SDK
 * speaks it (connect-web, useBinaryFormat false): a unary call is a POST of one JSON message
 * (application/json) answered with one; a server-streaming call posts one enveloped message
 * (application/connect+json: a flags byte, a 4-byte big-endian length, the JSON) and is
 * answered with envelopes, the last one flagged end-of-stream with the error, if any.
 * Hand-written rather than served by connect-node: the messages are few and small, and this
 * way the body's cap is fastify's (counted as it arrives, before anything is parsed) and the
 * errors are ours.
 */

/** Largest Connect request (envelope and JSON): 512 KiB of stdin in base64, with room. */
export const MAX_CONNECT_MESSAGE_BYTES = 1024 * 1024;
export const UNARY_TYPE = 'application/json';
export const STREAM_TYPE = 'application/connect+json';
const END_STREAM = 0x02;

/** The one message of a request, parsed from the buffered (capped) body. */
export function requestMessage(request: FastifyRequest): Record<string, unknown> {
  const body = request.body;
  if (!Buffer.isBuffer(body)) throw new InvalidRequestError('the Connect request has no body');
  const streaming = (request.headers['content-type'] ?? '').startsWith(STREAM_TYPE);
  let json: Buffer = body;
  if (streaming) {
    if (body.length < 5) throw new InvalidRequestError('the Connect request is not one enveloped message');
    const flags = body.readUInt8(0);
    const length = body.readUInt32BE(1);
    if (flags !== 0 || length !== body.length - 5) throw new InvalidRequestError('the Connect request must be exactly one uncompressed enveloped message');
    json = body.subarray(5);
  }
  if (json.length === 0) return {};
  let parsed: unknown;
  try {
    parsed = JSON.parse(json.toString('utf8'));
  } catch {
    throw new InvalidRequestError('the Connect message is not JSON');
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new InvalidRequestError('the Connect message must be a JSON object');
  return parsed as Record<string, unknown>;
}

function envelope(flags: number, message: unknown): Buffer {
  const json = Buffer.from(JSON.stringify(message), 'utf8');
  const head = Buffer.alloc(5);
  head.writeUInt8(flags, 0);
  head.writeUInt32BE(json.length, 1);
  return Buffer.concat([head, json]);
}

/** The answer of a streaming call that failed before it began: HTTP 200 and one end-of-stream envelope with the error. */
export function streamError(reply: FastifyReply, code: ConnectCode, message: string): FastifyReply {
  return reply
    .status(200)
    .header('content-type', STREAM_TYPE)
    .send(envelope(END_STREAM, { error: { code, message } }));
}

/**
 * A server stream on a hijacked reply: messages as envelopes, back-pressure through `send`'s
 * result and `drained`, and one end (an error or none). A client that goes away ends it (onClose).
 */
export class ConnectStream {
  private ended = false;
  private readonly closeHooks: Array<() => void> = [];

  constructor(private readonly reply: FastifyReply) {
    reply.hijack();
    reply.raw.writeHead(200, { 'content-type': STREAM_TYPE, 'cache-control': 'no-store' });
    reply.raw.on('close', () => {
      this.ended = true;
      for (const hook of this.closeHooks.splice(0)) hook();
    });
  }

  get open(): boolean {
    return !this.ended && !this.reply.raw.destroyed;
  }

  /** Writes one message; false when the client's buffer is full (wait for drained). */
  send(message: unknown): boolean {
    if (!this.open) return true;
    return this.reply.raw.write(envelope(0, message));
  }

  /** Bytes written and not yet taken by the client. */
  get buffered(): number {
    return this.reply.raw.writableLength;
  }

  drained(callback: () => void): void {
    if (!this.open) return;
    this.reply.raw.once('drain', callback);
  }

  onClose(hook: () => void): void {
    if (this.ended) hook();
    else this.closeHooks.push(hook);
  }

  end(error?: { code: ConnectCode; message: string }): void {
    if (!this.open) return;
    this.ended = true;
    this.reply.raw.end(envelope(END_STREAM, error ? { error } : {}));
    for (const hook of this.closeHooks.splice(0)) hook();
  }
}

/**
 * Keepalive messages at the interval the SDK asks (its Keepalive-Ping-Interval header, in
 * seconds), so that proxies on the way keep an idle stream open; and the call's deadline
 * (Connect-Timeout-Ms), after which the stream ends with deadline_exceeded.
 */
export function streamTimers(request: FastifyRequest, stream: ConnectStream, keepalive: () => unknown): void {
  const every = Number(request.headers['keepalive-ping-interval']);
  const ping = Number.isFinite(every) && every >= 1 ? setInterval(() => stream.send(keepalive()), Math.min(every, 300) * 1000) : undefined;
  const timeoutMs = Number(request.headers['connect-timeout-ms']);
  const deadline =
    Number.isInteger(timeoutMs) && timeoutMs > 0
      ? setTimeout(() => stream.end({ code: 'deadline_exceeded', message: `the call's deadline of ${timeoutMs} ms passed` }), timeoutMs)
      : undefined;
  stream.onClose(() => {
    clearInterval(ping);
    clearTimeout(deadline);
  });
}

/** A bytes field of a message (base64, as proto3's JSON mapping says). */
export function bytesField(value: unknown, field: string): Buffer {
  if (value === undefined || value === null || value === '') return Buffer.alloc(0);
  if (typeof value !== 'string' || !/^[A-Za-z0-9+/_-]*={0,2}$/.test(value)) throw new InvalidRequestError(`${field} must be base64`);
  return Buffer.from(value, 'base64');
}
