import http, { type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { ChannelOpenError, socketOfChannel, type ChannelAgent } from './channel-pool.js';

/** Largest response head a guest may send (status line and headers): beyond, the request fails with a 502. */
export const MAX_GUEST_HEADER_BYTES = 32 * 1024;

/** Headers of one hop only (RFC 9110 7.6.1), never passed on in either direction. */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authorization',
  'proxy-authenticate',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

/** Where one proxied request goes, and what the guest is told about where it came from. */
export interface ProxyTarget {
  /** Opens a channel to the guest port (rejects when nothing listens there). */
  open(): Promise<Duplex>;
  port: number;
  /** The path and query for the guest (prefix and token already taken out). */
  path: string;
  /** The request's headers for the guest (our credentials already taken out). */
  headers: IncomingHttpHeaders;
  /** The path-based form's prefix (sent as X-Forwarded-Prefix); none for the host-based form. */
  prefix?: string;
  /** The Host the client used, scheme, and address, for X-Forwarded-*. */
  forwardedHost: string;
  forwardedProto: string;
  clientAddress: string;
  /** A request or WebSocket that moves no byte either way this long is closed. */
  idleTimeoutMs: number;
  /** Headers added to the guest's answer (a token cookie, a sandbox policy). */
  extraResponseHeaders: Array<[string, string]>;
  /** The session's keep-alive channels to this port (ports/channel-pool.ts); none: a channel per request. Upgrades never use it. */
  agent?: ChannelAgent;
}

/** Nothing listens on the guest port, or the guest broke HTTP: said to the client as a 502 JSON error. */
export class GuestPortError extends Error {
  constructor(
    message: string,
    readonly code: 'port_not_listening' | 'guest_port_error',
  ) {
    super(message);
  }
}

/** The guest's view of the request's headers: hop-by-hop ones dropped, Host its own, X-Forwarded-* added. */
function guestHeaders(target: ProxyTarget, upgrade: boolean): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(target.headers)) {
    if (value === undefined || HOP_BY_HOP.has(name) || name === 'host' || name.startsWith('x-forwarded-')) continue;
    out[name] = value;
  }
  // Servers that refuse other names (Chromium's DevTools, dev servers' host checks) accept their own.
  out.host = `localhost:${target.port}`;
  out['x-forwarded-host'] = target.forwardedHost;
  out['x-forwarded-proto'] = target.forwardedProto;
  out['x-forwarded-for'] = target.clientAddress;
  if (target.prefix !== undefined) out['x-forwarded-prefix'] = target.prefix;
  if (upgrade) {
    out.connection = 'Upgrade';
    out.upgrade = String(target.headers.upgrade);
  }
  return out;
}

async function openChannel(target: ProxyTarget): Promise<Duplex> {
  try {
    return await target.open();
  } catch (err) {
    throw new GuestPortError(`nothing listens on port ${target.port} in the guest (${(err as Error).message})`, 'port_not_listening');
  }
}

/**
 * Closes everything after `idleMs` without a byte either way; `touch` marks activity. One
 * coarse timer per request (re-armed at most every second) rather than one per chunk.
 */
function idleGuard(idleMs: number, onIdle: () => void): { touch: () => void; stop: () => void } {
  let last = Date.now();
  const check = Math.max(250, Math.min(5_000, Math.floor(idleMs / 4)));
  const timer = setInterval(() => {
    if (Date.now() - last >= idleMs) {
      clearInterval(timer);
      onIdle();
    }
  }, check);
  timer.unref();
  return { touch: () => (last = Date.now()), stop: () => clearInterval(timer) };
}

/** Methods that may be sent again when a reused channel failed before any answer (RFC 9110 9.2.2), without a body. */
const RETRIABLE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS', 'DELETE']);

function hasNoBody(req: IncomingMessage): boolean {
  const length = req.headers['content-length'];
  return req.headers['transfer-encoding'] === undefined && (length === undefined || length === '0');
}

/** The guest closed a kept-alive connection it had been idle on: what Node says when the request met its close. */
function metClosedConnection(err: Error): boolean {
  const code = (err as NodeJS.ErrnoException).code;
  return code === 'ECONNRESET' || code === 'EPIPE';
}

function asGuestPortError(err: Error, port: number): GuestPortError {
  if (err instanceof GuestPortError) return err;
  if (err instanceof ChannelOpenError) return new GuestPortError(`nothing listens on port ${port} in the guest (${err.message})`, 'port_not_listening');
  return new GuestPortError(`the guest's server on port ${port} did not answer HTTP (${err.message})`, 'guest_port_error');
}

/**
 * One HTTP request to a guest port. With `target.agent` it goes on a kept-alive channel of
 * the session's port (ports/channel-pool.ts): Node's HTTP client reuses a channel whose last
 * exchange ended cleanly, and the channel goes back to the pool only then. Without, on a
 * channel of its own that ends with the request. A bodiless GET, HEAD, OPTIONS or DELETE that
 * met a reused channel the guest had closed (before any byte of an answer) is sent once more
 * on a fresh channel; anything else is a 502 as before. Bodies stream both ways with
 * backpressure: a client or a guest that stops reading stops the other side, within the SSH
 * channel's window, instead of filling the orchestrator's memory. Resolves when the exchange
 * is over; rejects with GuestPortError before any byte of an answer was sent.
 */
export async function proxyHttp(req: IncomingMessage, res: ServerResponse, target: ProxyTarget): Promise<void> {
  const { agent } = target;
  const retriable = agent !== undefined && RETRIABLE_METHODS.has(req.method ?? '') && hasNoBody(req);
  let guestReq: http.ClientRequest | undefined;
  /** Without keep-alive: the channel of this request alone, closed with it. */
  let ownChannel: Duplex | undefined;
  /** The request body's way to the guest (none to wait for when there is no body). */
  let sent: Promise<unknown> = Promise.resolve();
  const idle = idleGuard(target.idleTimeoutMs, () => {
    guestReq?.destroy();
    res.destroy();
  });
  /** Sends the request; resolves with the guest's answer (its head). */
  const send = (): Promise<IncomingMessage> => {
    const sending = http.request({
      method: req.method,
      path: target.path,
      headers: guestHeaders(target, false),
      maxHeaderSize: MAX_GUEST_HEADER_BYTES,
      ...(agent
        ? { agent }
        : {
            createConnection: (_options, done) => {
              openChannel(target).then(
                (channel) => done(null, (ownChannel = socketOfChannel(channel))),
                (err: Error) => (done as (err: Error) => void)(err),
              );
              return undefined;
            },
          }),
    });
    guestReq = sending;
    // Bytes from the guest count as activity for this request only (a pooled channel outlives it).
    sending.once('socket', (socket: Duplex) => {
      socket.on('data', idle.touch);
      sending.once('close', () => socket.removeListener('data', idle.touch));
    });
    const answered = new Promise<IncomingMessage>((resolve, reject) => {
      sending.once('response', resolve);
      sending.on('error', reject);
    });
    if (retriable) {
      req.resume();
      sending.end();
    } else {
      req.on('data', idle.touch);
      // The request body: the client's bytes as they come, stopped while the guest does not read.
      sent = pipeline(req, sending).catch(() => sending.destroy());
    }
    return answered;
  };
  let clean = false;
  try {
    let answer: IncomingMessage;
    try {
      answer = await send();
    } catch (err) {
      if (!(retriable && guestReq?.reusedSocket === true && metClosedConnection(err as Error))) throw asGuestPortError(err as Error, target.port);
      // The guest closes idle connections: the pool's other idle ones may be closed as well.
      agent?.closeIdle();
      answer = await send().catch((again: Error) => {
        throw asGuestPortError(again, target.port);
      });
    }
    const headers: Array<[string, string]> = [];
    for (let i = 0; i + 1 < answer.rawHeaders.length; i += 2) {
      const name = answer.rawHeaders[i] as string;
      if (!HOP_BY_HOP.has(name.toLowerCase())) headers.push([name, answer.rawHeaders[i + 1] as string]);
    }
    headers.push(...target.extraResponseHeaders);
    res.writeHead(answer.statusCode ?? 502, answer.statusMessage, headers.flat());
    // Small writes go out at once (a proxied exchange is many of them: head, chunks, end).
    res.socket?.setNoDelay(true);
    // An answer without a length (an event stream) shows its head before its first event;
    // one with a length goes out with its first bytes (one packet for a small answer).
    if (answer.headers['content-length'] === undefined) res.flushHeaders();
    // A client that went away or a guest that broke off mid-answer: nothing more to say to either.
    await pipeline(answer, res).then(
      () => (clean = answer.complete),
      () => undefined,
    );
    await sent;
  } finally {
    idle.stop();
    // A channel whose exchange did not end cleanly is never reused (destroyed: out of the pool).
    if (!clean) guestReq?.destroy();
    ownChannel?.destroy();
  }
}

/**
 * A WebSocket (or any HTTP upgrade) to a guest port: the request's head is written on a
 * channel of its own and then the bytes flow both ways as they are, the guest's 101 (or its
 * refusal) included, so subprotocols and extensions are the guest's business. Backpressure
 * both ways (pipe); closed when either side closes or after the idle timeout.
 */
export async function proxyUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer, target: ProxyTarget): Promise<void> {
  const channel = await openChannel(target);
  const lines = [`${req.method ?? 'GET'} ${target.path} HTTP/1.1`];
  for (const [name, value] of Object.entries(guestHeaders(target, true))) {
    for (const one of Array.isArray(value) ? value : [value]) lines.push(`${name}: ${one.replace(/[\r\n]/g, '')}`);
  }
  channel.write(`${lines.join('\r\n')}\r\n\r\n`);
  if (head.length > 0) channel.write(head);
  const idle = idleGuard(target.idleTimeoutMs, () => {
    channel.destroy();
    socket.destroy();
  });
  channel.on('data', idle.touch);
  socket.on('data', idle.touch);
  await new Promise<void>((resolve) => {
    const done = () => {
      idle.stop();
      channel.destroy();
      socket.destroy();
      resolve();
    };
    channel.once('close', done);
    socket.once('close', done);
    channel.on('error', done);
    socket.on('error', done);
    channel.pipe(socket);
    socket.pipe(channel);
  });
}

/** A 502 (or other) JSON error written on a raw socket whose upgrade cannot go on. */
export function refuseUpgrade(socket: Duplex, status: number, code: string, message: string): void {
  const body = JSON.stringify({ error: { code, message } });
  socket.end(
    `HTTP/1.1 ${status} ${http.STATUS_CODES[status] ?? 'Error'}\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
  );
}
