/**
 * The transport's public face: callers outside transport/ import from here (or from the
 * interface and endpoint modules), never ssh2 or the SSH class itself.
 */
import type { GuestTransport, TransportOptions } from './guest-transport.js';
import { GuestConnection } from './ssh-connection.js';

export type { ExecOptions, ExecResult, GuestChannel, GuestFileStats, GuestPty, GuestSftp, GuestTransport, TransportOptions } from './guest-transport.js';
export { exitOf } from './ssh-channels.js';
export { DialError, endpointLabel, transportOf } from './endpoint.js';
export type { GuestEndpoint, HybridVsockEndpoint, TcpEndpoint, TransportKind, UnixEndpoint, VsockEndpoint } from './endpoint.js';
export { ConnectionLostError, HostKeyMismatchError, SshAuthenticationError, SshTimeoutError } from './ssh-errors.js';

/** A transport to one guest (not yet open): SSH over the stream its endpoint dials. */
export function guestTransport(opts: TransportOptions): GuestTransport {
  return new GuestConnection(opts);
}
