import type { GuestChannel } from '../transport/index.js';
import { GuestProtocolError, type GuestChannelName } from '../errors.js';

/** Where a channel reports a guest that broke its protocol (a GuestConnection: it is counted). */
export interface ProtocolErrorSink {
  reportProtocolError(err: GuestProtocolError): void;
}

/**
 * stderr kept per request. Our helpers write a line or two there, and only as they fail. More
 * than this is a helper that is not ours any more (or broken beyond use): the channel is
 * closed rather than the excess dropped, because every byte the guest keeps sending still
 * costs the host its decryption, and a closed channel stops the flood at its source.
 */
export const STDERR_MAX_BYTES = 4_096;

/**
 * A long-lived helper process in the guest (xdotool, the screen grabber) on a channel of
 * the session's SSH connection, answering one request at a time. This class owns what both
 * have in common: the one request in flight with its time limit, what the process said on
 * stderr, and the rule that a channel that failed once is dropped for good (the desktop
 * opens a new one next time), with the process's last words in the error.
 */
export abstract class GuestProcessChannel<T> {
  private channel: GuestChannel | undefined;
  /** What the process wrote to stderr since the current request was sent (at most STDERR_MAX_BYTES). */
  protected stderr = '';
  private stderrBytes = 0;
  private watch: { label: GuestChannelName; sink: ProtocolErrorSink } | undefined;
  private pending: { resolve: (value: T) => void; reject: (err: Error) => void; timer: NodeJS.Timeout } | undefined;

  protected constructor(private readonly makeError: (message: string) => Error) {}

  /**
   * Takes over the process's channel. With `watch`, a guest that breaks the protocol is
   * reported to the sink under that label (the metric of protocol errors).
   */
  protected attach(channel: GuestChannel, name: string, watch?: { label: GuestChannelName; sink: ProtocolErrorSink }): void {
    this.channel = channel;
    this.watch = watch;
    channel.on('data', (chunk: Buffer) => this.onData(chunk));
    channel.stderr.on('data', (chunk: Buffer) => this.onStderr(chunk, name));
    channel.on('close', () => {
      if (this.channel) this.closedByGuest = true;
      this.fail(this.makeError(`the ${name} channel closed`));
    });
  }

  /** The channel ended from the guest's side (its process exited or was killed), not by us. */
  protected closedByGuest = false;

  /** Output of the process; a subclass calls settle() once the answer is complete. */
  protected abstract onData(chunk: Buffer): void;

  get isOpen(): boolean {
    return this.channel !== undefined;
  }

  protected get busy(): boolean {
    return this.pending !== undefined;
  }

  /** Sends one request and waits for its answer, at most timeoutMs. One at a time. */
  protected request(input: string, timeoutMs: number): Promise<T> {
    const channel = this.channel;
    if (!channel) return Promise.reject(this.makeError('the channel is closed'));
    if (this.pending) return Promise.reject(this.makeError('the channel is busy'));
    this.stderr = '';
    this.stderrBytes = 0;
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => this.fail(this.makeError(`no answer within ${timeoutMs} ms`)), timeoutMs);
      this.pending = { resolve, reject, timer };
      channel.write(input);
    });
  }

  private onStderr(chunk: Buffer, name: string): void {
    if (!this.channel) return;
    this.stderrBytes += chunk.length;
    if (this.stderrBytes > STDERR_MAX_BYTES) {
      // A channel attached without a watch is the input channel's (xdotool's), the only other one.
      this.fail(
        new GuestProtocolError(
          this.watch?.label ?? 'input',
          'stderr_overrun',
          `the ${name} helper in the guest wrote more than ${STDERR_MAX_BYTES} bytes of errors`,
        ),
      );
      return;
    }
    this.stderr += chunk.toString('utf8');
  }

  protected settle(value: T): void {
    const pending = this.pending;
    this.pending = undefined;
    if (!pending) return;
    clearTimeout(pending.timer);
    pending.resolve(value);
  }

  close(): void {
    this.fail(this.makeError('the channel was closed'));
  }

  /**
   * Drops the channel for good and fails the request in flight. A GuestProtocolError reaches
   * the caller as it is (a 502 naming the guest) and is reported once.
   */
  protected fail(cause: Error): void {
    const channel = this.channel;
    this.channel = undefined;
    if (cause instanceof GuestProtocolError && channel) this.watch?.sink.reportProtocolError(cause);
    // What the process said before it went (e.g. "Can't open display") explains the failure.
    const said = this.stderr.trim();
    const err = said && !(cause instanceof GuestProtocolError) ? this.makeError(`${cause.message}: ${said.slice(0, 300)}`) : cause;
    if (channel) channel.close();
    const pending = this.pending;
    this.pending = undefined;
    if (pending) {
      clearTimeout(pending.timer);
      pending.reject(err);
    }
  }
}
