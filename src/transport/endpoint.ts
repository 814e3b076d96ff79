import net from 'node:net';
import type { Duplex } from 'node:stream';

/**
 * Where a guest's sshd is reached, and so how a stream to it is dialed. A runtime reports
 * it for each sandbox (at start and on adoption); the SSH layer above only sees a stream.
 * An endpoint without `transport` is TCP (what every runtime reported before there was a
 * choice, and what older session records hold).
 */
export type GuestEndpoint = TcpEndpoint | UnixEndpoint | HybridVsockEndpoint | VsockEndpoint;

export interface TcpEndpoint {
  transport?: 'tcp';
  host: string;
  port: number;
}

/** A Unix socket on the host, bind-mounted into a container, where the guest accepts SSH. */
export interface UnixEndpoint {
  transport: 'unix';
  path: string;
}

/** Firecracker's hybrid vsock: a Unix socket on the host, then `CONNECT <port>\n` / `OK …\n`. */
export interface HybridVsockEndpoint {
  transport: 'hybrid-vsock';
  path: string;
  port: number;
}

/** AF_VSOCK (QEMU's vhost-vsock-pci): a context id and a port. */
export interface VsockEndpoint {
  transport: 'vsock';
  cid: number;
  port: number;
}

export type TransportKind = NonNullable<GuestEndpoint['transport']>;

export function transportOf(endpoint: GuestEndpoint): TransportKind {
  return endpoint.transport ?? 'tcp';
}

/** For messages and the session view. */
export function endpointLabel(endpoint: GuestEndpoint): string {
  switch (endpoint.transport) {
    case 'unix':
      return `unix:${endpoint.path}`;
    case 'hybrid-vsock':
      return `vsock:${endpoint.path}:${endpoint.port}`;
    case 'vsock':
      return `vsock:${endpoint.cid}:${endpoint.port}`;
    default:
      return `${endpoint.host}:${endpoint.port}`;
  }
}

/** A dial that could not produce a stream: the endpoint is wrong, or the guest answered wrongly. */
export class DialError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'DialError';
  }
}

/** The hybrid vsock answer is one short line: more than this without a newline is not one. */
const MAX_HANDSHAKE_LINE = 64;

/**
 * A byte stream to the guest's sshd. TCP and Unix sockets are returned at once, still
 * connecting (ssh2 waits for 'connect' and reports their errors); hybrid vsock resolves
 * once the multiplexer has answered the CONNECT, within `timeoutMs`.
 */
export async function dial(endpoint: GuestEndpoint, timeoutMs: number): Promise<Duplex> {
  switch (endpoint.transport) {
    case 'unix':
      return net.connect({ path: endpoint.path });
    case 'hybrid-vsock':
      return dialHybridVsock(endpoint, timeoutMs);
    case 'vsock':
      // Node has no AF_VSOCK sockets; runtimes only report this endpoint where a dialer
      // exists, so reaching here is a programming error, said plainly.
      throw new DialError(`AF_VSOCK endpoints (${endpointLabel(endpoint)}) cannot be dialed by this orchestrator`);
    default:
      // Nagle's algorithm off: every command is a handful of small packets, and Nagle plus
      // delayed ACKs would add ~40 ms to each of them.
      return net.connect({ host: endpoint.host, port: endpoint.port, noDelay: true });
  }
}

/**
 * Firecracker's hybrid vsock handshake: connect to the Unix socket, send `CONNECT <port>\n`,
 * expect `OK <host port>\n`. A guest (or a multiplexer) that answers anything else, too
 * much, or nothing within the deadline fails this dial only, with the reason.
 */
export function dialHybridVsock(endpoint: HybridVsockEndpoint, timeoutMs: number): Promise<Duplex> {
  return new Promise((resolve, reject) => {
    const sock = net.connect({ path: endpoint.path });
    let answer = Buffer.alloc(0);
    let settled = false;
    const fail = (message: string) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      sock.destroy();
      reject(new DialError(`vsock ${endpointLabel(endpoint)}: ${message}`));
    };
    const timer = setTimeout(() => fail(`no answer to CONNECT within ${timeoutMs} ms`), timeoutMs);
    sock.on('error', (err) => fail(err.message));
    sock.on('close', () => fail('the socket closed during the CONNECT handshake'));
    sock.once('connect', () => sock.write(`CONNECT ${endpoint.port}\n`));
    const onData = (chunk: Buffer) => {
      answer = Buffer.concat([answer, chunk]);
      const newline = answer.indexOf(0x0a);
      if (newline < 0) {
        if (answer.length > MAX_HANDSHAKE_LINE) fail(`the answer to CONNECT is longer than ${MAX_HANDSHAKE_LINE} bytes without a newline`);
        return;
      }
      const line = answer.subarray(0, newline).toString('latin1');
      if (!/^OK \d{1,10}$/.test(line)) return fail(`unexpected answer to CONNECT: ${JSON.stringify(line.slice(0, MAX_HANDSHAKE_LINE))}`);
      settled = true;
      clearTimeout(timer);
      sock.off('data', onData);
      sock.removeAllListeners('close');
      sock.removeAllListeners('error');
      sock.on('error', () => undefined); // ssh2 reports later errors through the client
      sock.pause();
      // Whatever followed the line (sshd's banner) belongs to SSH.
      const rest = answer.subarray(newline + 1);
      if (rest.length > 0) sock.unshift(rest);
      sock.setNoDelay?.(true);
      resolve(sock);
    };
    sock.on('data', onData);
  });
}
