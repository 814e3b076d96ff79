import type { EventEmitter } from 'node:events';
import type { Duplex, Readable, Writable } from 'node:stream';
import type { GuestProtocolError } from '../errors.js';
import type { GuestEndpoint } from './endpoint.js';

/** What a command run with exec() gave back. */
export interface ExecResult {
  stdout: Buffer;
  stderr: Buffer;
  exitCode: number | null;
  signal: string | undefined;
}

export interface ExecOptions {
  /** Bytes written to the command's standard input (then EOF). Model text travels here. */
  stdin?: string | Buffer;
  timeoutMs?: number;
  /** Output beyond this is an error: a guest cannot make the orchestrator buffer without bound. */
  maxOutputBytes?: number;
}

/**
 * A long-lived process in the guest: the stream is its stdin/stdout, `stderr` its standard
 * error; it emits 'exit' (code, signal) and 'close'. close() ends it.
 */
export interface GuestChannel extends Duplex {
  readonly stderr: Readable;
  close(): void;
  /** The terminal's new size (a process started with a pty). */
  setWindow(rows: number, cols: number, height: number, width: number): void;
}

/** A terminal for a spawned process (sshd allocates it). */
export interface GuestPty {
  cols: number;
  rows: number;
  height: number;
  width: number;
  term: string;
}

/** What the callers read of a file's attributes. */
export interface GuestFileStats {
  mode: number;
  size: number;
  /** Seconds since the epoch. */
  mtime: number;
  isDirectory(): boolean;
  isFile(): boolean;
  isSymbolicLink(): boolean;
}

/**
 * File I/O in the guest as the guest user (SFTP on the session's connection). Failures carry
 * the SFTP status as `code` (2: no such file, 3: permission denied, 4: failure).
 */
export interface GuestSftp {
  stat(path: string): Promise<GuestFileStats>;
  lstat(path: string): Promise<GuestFileStats>;
  realpath(path: string): Promise<string>;
  /** `mode` is the permissions of a file this creates (the server's umask still applies). */
  open(path: string, flags: 'r' | 'w' | 'wx', mode?: number): Promise<Buffer>;
  fchmod(handle: Buffer, mode: number): Promise<void>;
  close(handle: Buffer): Promise<void>;
  unlink(path: string): Promise<void>;
  /** Renames over an existing file, atomically where the server can. */
  replace(from: string, to: string): Promise<void>;
  writeFile(path: string, data: Buffer, opts: { flag: 'w' | 'wx' }): Promise<void>;
  readlink(path: string): Promise<string>;
  mkdir(path: string, mode: number): Promise<void>;
  /** Plain SFTP rename: refuses to replace an existing file. */
  rename(from: string, to: string): Promise<void>;
  rmdir(path: string): Promise<void>;
  opendir(path: string): Promise<Buffer>;
  /** The next entries of an open directory; false at its end. */
  readdir(handle: Buffer): Promise<Array<{ filename: string; attrs: GuestFileStats }> | false>;
  /** Reads up to `length` bytes at `position` into `into` at `offset`: how many were read (0 at the end of the file). */
  read(handle: Buffer, into: Buffer, offset: number, length: number, position: number): Promise<number>;
  createReadStream(path: string, opts: { handle?: Buffer; start?: number; end?: number; highWaterMark?: number }): Readable;
  createWriteStream(path: string, opts: { handle?: Buffer; autoClose?: boolean; highWaterMark?: number }): Writable;
}

/**
 * One persistent, authenticated control channel to one guest: everything the orchestrator
 * does in a sandbox goes through it. Whatever carries it (TCP, a Unix socket, vsock) is the
 * endpoint's business; callers see only this.
 *
 * Events: 'reconnecting' (attempt, delayMs), 'reconnected' (attempt), 'guest_protocol_error'
 * (GuestProtocolError), 'lost' (ConnectionLostError: given up for good); never 'error'.
 */
export interface GuestTransport extends EventEmitter {
  /** Where it goes, for messages and the session view ("10.0.0.2:22", "unix:/…"). */
  readonly endpointLabel: string;
  readonly endpoint: GuestEndpoint;
  readonly isClosed: boolean;
  /** True while the connection is up (false while it reconnects or after close). */
  readonly isConnected: boolean;
  /** Connects, retrying while the guest boots, until the deadline or `isAlive` says no. */
  open(timeoutMs: number, isAlive?: () => boolean): Promise<void>;
  /** Runs one command; the command string must contain no untrusted text. */
  exec(command: string, opts?: ExecOptions): Promise<ExecResult>;
  /** Starts a long-lived command and hands its channel over (the caller owns it). */
  spawn(command: string, timeoutMs?: number, pty?: GuestPty): Promise<GuestChannel>;
  /** The connection's file I/O (opened once, reopened after a reconnect). */
  sftp(timeoutMs?: number): Promise<GuestSftp>;
  /** A stream to `host:port` as seen from inside the guest (SSH direct-tcpip). */
  forward(host: string, port: number): Promise<Duplex>;
  /** A channel to `port` on the guest's loopback (the live view's VNC server). */
  forwardToGuestLoopback(port: number, timeoutMs?: number): Promise<GuestChannel>;
  /**
   * Keeps the connection from being declared dead while the guest is frozen (a paused
   * session); returns the release.
   */
  holdKeepalives(): () => void;
  /** A channel on this connection closed because the guest broke its protocol. */
  reportProtocolError(err: GuestProtocolError): void;
  close(): void;
}

/** What it takes to open a transport to a guest. */
export interface TransportOptions {
  endpoint: GuestEndpoint;
  username: string;
  privateKey: string;
  /** SSH wire encoding of the only host key we accept. */
  pinnedHostKey: Buffer;
  /** How long a dropped connection is retried before it is given up ('lost'). */
  reconnectGiveUpMs?: number;
}
