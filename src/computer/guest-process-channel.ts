import type { ClientChannel } from 'ssh2';

/**
 * A long-lived helper process in the guest (xdotool, the screen grabber) on a channel of
 * the session's SSH connection, answering one request at a time. This class owns what both
 * have in common: the one request in flight with its time limit, what the process said on
 * stderr, and the rule that a channel that failed once is dropped for good (the desktop
 * opens a new one next time), with the process's last words in the error.
 */
export abstract class GuestProcessChannel<T> {
  private channel: ClientChannel | undefined;
  /** What the process wrote to stderr since the current request was sent. */
  protected stderr = '';
  private pending: { resolve: (value: T) => void; reject: (err: Error) => void; timer: NodeJS.Timeout } | undefined;

  protected constructor(private readonly makeError: (message: string) => Error) {}

  protected attach(channel: ClientChannel, name: string): void {
    this.channel = channel;
    channel.on('data', (chunk: Buffer) => this.onData(chunk));
    channel.stderr.on('data', (chunk: Buffer) => (this.stderr += chunk.toString('utf8')));
    channel.on('close', () => this.fail(this.makeError(`the ${name} channel closed`)));
  }

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
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => this.fail(this.makeError(`no answer within ${timeoutMs} ms`)), timeoutMs);
      this.pending = { resolve, reject, timer };
      channel.write(input);
    });
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

  /** Drops the channel for good and fails the request in flight. */
  protected fail(cause: Error): void {
    // What the process said before it went (e.g. "Can't open display") explains the failure.
    const said = this.stderr.trim();
    const err = said ? this.makeError(`${cause.message}: ${said.slice(0, 300)}`) : cause;
    const channel = this.channel;
    this.channel = undefined;
    if (channel) channel.close();
    const pending = this.pending;
    this.pending = undefined;
    if (pending) {
      clearTimeout(pending.timer);
      pending.reject(err);
    }
  }
}
