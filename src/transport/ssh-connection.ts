import { EventEmitter } from 'node:events';
import type { Duplex } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import ssh2, { type ClientChannel } from 'ssh2';
import { GuestProtocolError } from '../errors.js';
import { dial, endpointLabel, type GuestEndpoint } from './endpoint.js';
import type { ExecOptions, ExecResult, GuestChannel, GuestPty, GuestSftp, GuestTransport, TransportOptions } from './guest-transport.js';
import { collect, guardChannel } from './ssh-channels.js';
import { SshSftp } from './ssh-sftp.js';
import { signLoginAtOnce } from './ssh-signed-auth.js';
import { ConnectionLostError, HostKeyMismatchError, SshAuthenticationError, SshTimeoutError } from './ssh-errors.js';

export { ConnectionLostError, HostKeyMismatchError, SshAuthenticationError, SshTimeoutError } from './ssh-errors.js';
export type { ExecOptions, ExecResult } from './guest-transport.js';

const { Client } = ssh2;
type Client = InstanceType<typeof Client>;

/** Kept for the callers inside transport/ that name it so. */
export type ConnectionOptions = TransportOptions;

const DEFAULT_EXEC_TIMEOUT_MS = 30_000;
/** Output of one command kept by default; callers that expect little ask for less. */
const DEFAULT_MAX_OUTPUT = 16 * 1024 * 1024;
const BACKOFF_MIN_MS = 100;
const BACKOFF_MAX_MS = 5_000;
const DEFAULT_RECONNECT_GIVE_UP_MS = 30_000;
/** How often an idle connection checks the guest still answers (three missed: dropped, then reconnected). */
const KEEPALIVE_INTERVAL_MS = 5_000;
/** How long close() lets the guest answer the disconnect before the socket is destroyed. */
const CLOSE_GRACE_MS = 1_000;
/** The stream under each ssh2 client (ours: dialed by the endpoint, see connectOnce). */
const SOCKETS = new WeakMap<Client, Duplex>();

/**
 * One persistent SSH connection to one guest. Every command is a channel multiplexed on it,
 * so the handshake is paid once per session, not once per action. If the connection drops,
 * it reconnects with exponential backoff; commands issued meanwhile wait for it.
 *
 * Events: 'reconnecting' (attempt, delayMs), 'reconnected', 'guest_protocol_error'
 * (GuestProtocolError: the guest broke a protocol on one channel, which was closed), 'lost'
 * (ConnectionLostError: reconnecting gave up, the connection is closed for good);
 * 'error' is never emitted.
 *
 * Everything here is fed by the guest, and in Node an 'error' that no listener catches ends
 * the process with every tenant's sessions: the client, its socket and every channel handed
 * out carry an error listener for their whole life (attached before anything can emit).
 */
export class GuestConnection extends EventEmitter implements GuestTransport {
  private client: Client | undefined;
  private connected: Promise<Client> | undefined;
  private closed = false;

  constructor(private readonly opts: ConnectionOptions) {
    super();
  }

  get endpointLabel(): string {
    return endpointLabel(this.opts.endpoint);
  }

  get endpoint(): GuestEndpoint {
    return this.opts.endpoint;
  }

  /**
   * Opens the connection, retrying while the guest is still booting (refused, reset, no
   * banner yet) until the deadline. A host key mismatch fails at once: retrying cannot fix it.
   */
  async open(timeoutMs: number, isAlive: () => boolean = () => true): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    let lastError: Error | undefined;
    let delay = 25;
    while (!this.closed && Date.now() < deadline) {
      if (!isAlive()) throw new Error('the sandbox exited while waiting for SSH');
      try {
        const client = await this.connectOnce(Math.max(500, Math.min(5_000, deadline - Date.now())));
        this.adopt(client);
        return;
      } catch (err) {
        if (err instanceof HostKeyMismatchError || err instanceof SshAuthenticationError) throw err;
        lastError = err as Error;
        await sleep(delay);
        // At most 50 ms: a boot's sshd comes up at an unknown moment, and every ms the host
        // sleeps past it is a ms of the create (a refused attempt costs next to nothing).
        delay = Math.min(delay * 2, 50);
      }
    }
    if (this.closed) throw new Error('connection closed while opening');
    throw new SshTimeoutError(`SSH to ${this.endpointLabel}${lastError ? ` (last error: ${lastError.message})` : ''}`, timeoutMs);
  }

  /** Runs one command on its own channel. The command string must contain no untrusted text. */
  async exec(command: string, opts: ExecOptions = {}): Promise<ExecResult> {
    const timeoutMs = opts.timeoutMs ?? DEFAULT_EXEC_TIMEOUT_MS;
    const maxOutput = opts.maxOutputBytes ?? DEFAULT_MAX_OUTPUT;
    const client = await this.waitConnected(timeoutMs);
    return new Promise<ExecResult>((resolve, reject) => {
      client.exec(command, (err, channel) => {
        if (err) return reject(err);
        guardChannel(channel);
        collect(channel, opts.stdin, timeoutMs, maxOutput, command).then(resolve, (error: Error) => {
          if (error instanceof GuestProtocolError) this.reportProtocolError(error);
          reject(error);
        });
      });
    });
  }

  /**
   * Stops the keepalives while the guest is paused (frozen, or its VM stopped): a guest that
   * cannot answer them would have its connection dropped after keepaliveCountMax of them, and
   * every channel on it (the desktop helpers, the bash shell) with it. An idle connection sends
   * nothing, so nothing times out. The returned function starts them again. ssh2 has no public
   * switch: its keepalive timer restarts on every resetKA (which answers also call), so calling
   * it more often than the interval keeps the timer from ever firing.
   */
  holdKeepalives(): () => void {
    const reset = () => (this.client as unknown as { _resetKA?: () => void } | undefined)?._resetKA?.();
    const timer = setInterval(reset, KEEPALIVE_INTERVAL_MS / 2);
    timer.unref();
    reset();
    return () => {
      clearInterval(timer);
      reset();
    };
  }

  /** A channel on this connection closed because the guest broke its protocol (counted by the session). */
  reportProtocolError(err: GuestProtocolError): void {
    this.emit('guest_protocol_error', err);
  }

  close(): void {
    this.closed = true;
    const client = this.client;
    client?.end();
    // end() waits for the guest's FIN. A VM stopped right after (destroy stops it next)
    // never sends one, and the socket would stay open for minutes, holding the process.
    // (ssh2's own destroy() does nothing once end() was called: destroy the socket itself.)
    const socket = client && SOCKETS.get(client);
    if (socket) setTimeout(() => socket.destroy(), CLOSE_GRACE_MS).unref();
    this.client = undefined;
    this.connected = undefined;
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** True while the connection is up (false while it reconnects or after close). */
  get isConnected(): boolean {
    return this.client !== undefined;
  }

  private async waitConnected(timeoutMs: number): Promise<Client> {
    if (this.closed) throw new Error('connection is closed');
    if (this.client) return this.client;
    if (!this.connected) throw new Error('connection was never opened');
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new SshTimeoutError(`reconnecting to ${this.endpointLabel}`, timeoutMs)), timeoutMs);
    });
    try {
      return await Promise.race([this.connected, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  private adopt(client: Client): void {
    this.client = client;
    this.connected = Promise.resolve(client);
    client.once('close', () => {
      if (this.client !== client) return;
      this.client = undefined;
      if (this.closed) return;
      const reconnected = this.reconnectLoop();
      // Waiters see the outcome; if nobody waits, a close during reconnection is not an error.
      reconnected.catch(() => undefined);
      this.connected = reconnected;
    });
  }

  private async reconnectLoop(): Promise<Client> {
    const giveUpAt = Date.now() + (this.opts.reconnectGiveUpMs ?? DEFAULT_RECONNECT_GIVE_UP_MS);
    let delay = BACKOFF_MIN_MS;
    for (let attempt = 1; ; attempt++) {
      if (this.closed) throw new Error('connection is closed');
      this.emit('reconnecting', attempt, delay);
      await sleep(delay);
      if (this.closed) throw new Error('connection is closed');
      try {
        const client = await this.connectOnce(Math.max(500, Math.min(5_000, giveUpAt - Date.now())));
        if (this.closed) {
          client.end();
          throw new Error('connection is closed');
        }
        this.adopt(client);
        this.emit('reconnected', attempt);
        return client;
      } catch (err) {
        if (this.closed) throw new Error('connection is closed');
        const lost =
          err instanceof HostKeyMismatchError
            ? new ConnectionLostError(this.endpointLabel, 'host_key_mismatch', err)
            : err instanceof SshAuthenticationError
              ? new ConnectionLostError(this.endpointLabel, 'authentication', err)
              : Date.now() >= giveUpAt
                ? new ConnectionLostError(this.endpointLabel, 'unreachable', err as Error)
                : undefined;
        if (lost) {
          // For good: the session layer fails the session with this reason ('lost').
          this.closed = true;
          this.emit('lost', lost);
          throw lost;
        }
        delay = Math.min(delay * 2, BACKOFF_MAX_MS);
      }
    }
  }

  private connectOnce(timeoutMs: number): Promise<Client> {
    return new Promise((resolve, reject) => {
      const client = new Client();
      let hostKeyRejected = false;
      let settled = false;
      // ssh2 may end a refused handshake with only 'close' (no 'error'), so every way out
      // settles the promise, and a timer backs them all up.
      const backstop = setTimeout(() => fail(new SshTimeoutError(`SSH handshake with ${this.endpointLabel}`, timeoutMs)), timeoutMs + 1_000);
      const fail = (err: Error) => {
        if (settled) return;
        settled = true;
        clearTimeout(backstop);
        client.removeAllListeners('ready');
        client.end();
        if (hostKeyRejected) reject(new HostKeyMismatchError(this.endpointLabel));
        else if ((err as Error & { level?: string }).level === 'client-authentication') {
          reject(new SshAuthenticationError(this.endpointLabel));
        } else reject(err);
      };
      client.once('ready', () => {
        if (settled) return;
        settled = true;
        clearTimeout(backstop);
        resolve(client);
      });
      // For the client's whole life, not once: a handshake that times out emits a second
      // error as ssh2 then destroys the socket ("Connection lost before handshake"), and an
      // error after 'ready' (keepalive, a protocol violation) is followed by 'close', which
      // is what the connection acts on. `fail` does nothing once settled.
      client.on('error', fail);
      client.once('close', () => fail(new Error(`connection to ${this.endpointLabel} closed during the handshake`)));
      // The endpoint dials the stream (TCP with Nagle off, a Unix socket, vsock): ssh2
      // only ever sees a stream.
      dial(this.opts.endpoint, timeoutMs).then((sock) => {
        if (settled) return void sock.destroy();
        SOCKETS.set(client, sock);
        sock.on('error', () => undefined); // ssh2 reports socket errors through the client
        this.handshake(client, sock, timeoutMs, () => (hostKeyRejected = true));
      }, fail);
    });
  }

  private handshake(client: Client, sock: Duplex, timeoutMs: number, onHostKeyRejected: () => void): void {
    client.connect({
      sock,
      username: this.opts.username,
      privateKey: this.opts.privateKey,
      // The session's key only: by default ssh2 first tries "none", whose refusal costs a round
      // trip and the fixed delay sshd puts on every failed attempt (6-8 ms of each handshake).
      authHandler: ['publickey'],
      readyTimeout: timeoutMs,
      keepaliveInterval: KEEPALIVE_INTERVAL_MS,
      keepaliveCountMax: 3,
      algorithms: { serverHostKey: ['ssh-ed25519'] },
      hostVerifier: (key: Buffer) => {
        const ok = key.equals(this.opts.pinnedHostKey);
        if (!ok) onHostKeyRejected();
        return ok;
      },
    });
    signLoginAtOnce(client);
  }

  /** SFTP sessions by the ssh2 client they run on, so a reconnect gets a fresh one. */
  private readonly sftpSessions = new WeakMap<Client, Promise<GuestSftp>>();

  /** An SFTP session on this connection (opened once, reopened after a reconnect). */
  async sftp(timeoutMs = 10_000): Promise<GuestSftp> {
    const client = await this.waitConnected(timeoutMs);
    const cached = this.sftpSessions.get(client);
    if (cached) return cached;
    const opening = new Promise<GuestSftp>((resolve, reject) => {
      let timedOut = false;
      const timer = setTimeout(() => {
        timedOut = true;
        reject(new SshTimeoutError(`opening SFTP on ${this.endpointLabel}`, timeoutMs));
      }, timeoutMs);
      client.sftp((err, wrapper) => {
        clearTimeout(timer);
        if (err) return reject(err);
        if (timedOut) return wrapper.end(); // nobody waits for it any more
        // A closed or broken session is useless: forget it, the next call opens another.
        // The 'error' listener also keeps a protocol error from being an unhandled event.
        wrapper.once('close', forget);
        wrapper.once('end', forget);
        wrapper.on('error', forget);
        resolve(new SshSftp(wrapper));
      });
    });
    const forget = () => {
      if (this.sftpSessions.get(client) === opening) this.sftpSessions.delete(client);
    };
    opening.catch(forget);
    this.sftpSessions.set(client, opening);
    return opening;
  }

  /**
   * A direct-tcpip channel to `port` on the guest's own loopback (the live view's tunnel to
   * its VNC server): nothing in the guest listens beyond loopback, and the caller owns the
   * channel. It dies with the connection.
   */
  async forwardToGuestLoopback(port: number, timeoutMs = DEFAULT_EXEC_TIMEOUT_MS): Promise<GuestChannel> {
    return this.forwardOut('127.0.0.1', port, timeoutMs);
  }

  /**
   * A direct-tcpip channel to `host`:`port` as the guest sees it (its loopback or any of its
   * addresses): the guest ports' door (api/routes/ports.ts). sshd in the guest makes the TCP
   * connection, so nothing new listens on the guest's network; a port nothing listens on is
   * a refused channel (rejects). The caller owns the stream; it dies with the connection.
   */
  async forward(host: string, port: number): Promise<Duplex> {
    return this.forwardOut(host, port, DEFAULT_EXEC_TIMEOUT_MS);
  }

  private async forwardOut(host: string, port: number, timeoutMs: number): Promise<ClientChannel> {
    const client = await this.waitConnected(timeoutMs);
    return new Promise<ClientChannel>((resolve, reject) => {
      client.forwardOut('127.0.0.1', 0, host, port, (err, channel) => (err ? reject(err) : resolve(guardChannel(channel))));
    });
  }

  /**
   * Starts a long-lived command on its own channel and hands the open channel over (for the
   * bash tool's persistent shell). Unlike exec(), nothing is collected, no timeout applies
   * once it runs and the caller owns the channel: it writes stdin, reads output and closes
   * it. The channel dies with the connection (a reconnect does not bring it back). The
   * command string must contain no untrusted text. With `pty`, sshd gives the command a
   * terminal of that size (the process API's terminals; resized with channel.setWindow).
   */
  async spawn(command: string, timeoutMs = DEFAULT_EXEC_TIMEOUT_MS, pty?: GuestPty): Promise<GuestChannel> {
    const client = await this.waitConnected(timeoutMs);
    return new Promise<ClientChannel>((resolve, reject) => {
      const done = (err: Error | undefined, channel: ClientChannel) => (err ? reject(err) : resolve(guardChannel(channel)));
      if (pty) client.exec(command, { pty }, done);
      else client.exec(command, done);
    });
  }
}
