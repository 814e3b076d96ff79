/**
 * A GuestTransport that never reaches a guest, for the unit tier: the session layer only
 * needs a connection present (its events, close, whether it is up). Every guest operation
 * fails at once with a clear error instead of dialing anywhere.
 */
import { EventEmitter } from 'node:events';
import type { Duplex } from 'node:stream';
import type { GuestProtocolError } from '../../src/errors.js';
import { endpointLabel, type ExecResult, type GuestChannel, type GuestEndpoint, type GuestSftp, type GuestTransport } from '../../src/transport/index.js';

export class FakeTransport extends EventEmitter implements GuestTransport {
  private closed = false;
  /** Commands asked of it, in order (they all failed). */
  readonly asked: string[] = [];

  constructor(readonly endpoint: GuestEndpoint = { transport: 'unix', path: '/nonexistent/fake-guest.sock' }) {
    super();
  }

  get endpointLabel(): string {
    return endpointLabel(this.endpoint);
  }

  get isClosed(): boolean {
    return this.closed;
  }

  get isConnected(): boolean {
    return false;
  }

  async open(): Promise<void> {
    throw this.unreachable('open');
  }

  async exec(command: string): Promise<ExecResult> {
    this.asked.push(command);
    throw this.unreachable(`exec ${command.slice(0, 40)}`);
  }

  async spawn(command: string): Promise<GuestChannel> {
    this.asked.push(command);
    throw this.unreachable(`spawn ${command.slice(0, 40)}`);
  }

  async sftp(): Promise<GuestSftp> {
    throw this.unreachable('sftp');
  }

  async forward(host: string, port: number): Promise<Duplex> {
    throw this.unreachable(`forward ${host}:${port}`);
  }

  async forwardToGuestLoopback(port: number): Promise<GuestChannel> {
    throw this.unreachable(`forward 127.0.0.1:${port}`);
  }

  /** Held keepalives (a paused session); the release gives them back. */
  heldKeepalives = 0;

  holdKeepalives(): () => void {
    this.heldKeepalives++;
    return () => void this.heldKeepalives--;
  }

  reportProtocolError(err: GuestProtocolError): void {
    this.emit('guest_protocol_error', err);
  }

  close(): void {
    this.closed = true;
  }

  private unreachable(what: string): Error {
    return new Error(`fake transport (${this.endpointLabel}): ${what} reaches no guest in the unit tier`);
  }
}
