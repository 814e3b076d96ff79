import type { ClientChannel } from 'ssh2';
import type { GuestConnection } from '../transport/ssh-connection.js';

/**
 * One long-lived `xdotool -` per session, reading commands from its standard input on a
 * channel of the session's SSH connection. An action then costs a write and a read on an
 * open channel: no new channel, no sshd fork, no shell and no xdotool start-up, which is
 * what a fresh command per action pays (about 6 ms here, more than xdotool itself).
 *
 * xdotool says nothing when a command is done, so every command line is followed by
 * `getmouselocation`: a round trip to the X server, which therefore has applied everything
 * before it, and a line on stdout that marks the end. What the command wrote to stderr
 * meanwhile (an unknown key name) is handed back with it.
 *
 * Arguments are validated keysym names and numbers (see actions.ts and keys.ts): no
 * whitespace, quotes or `$`, so xdotool's script parser sees exactly the argument vector.
 */
const LOCATION_LINE = /^x:-?\d+ y:-?\d+ screen:\d+ window:\d+$/gm;
const SAFE_ARGUMENT = /^[A-Za-z0-9_+.:-]+$/;

export class InputChannelError extends Error {}

export interface InputResult {
  /** What the command printed (getmouselocation lines, the marker excluded). */
  stdout: string;
  stderr: string;
}

export class InputChannel {
  private channel: ClientChannel | undefined;
  private stdout = '';
  private stderr = '';
  private waiter: { lines: number; resolve: (result: InputResult) => void; reject: (err: Error) => void } | undefined;

  private constructor() {}

  static async open(connection: GuestConnection, display: number): Promise<InputChannel> {
    const input = new InputChannel();
    // stdbuf: xdotool's stdout is a pipe, which stdio would otherwise buffer in blocks.
    const channel = await connection.spawn(`LC_ALL=C.UTF-8 DISPLAY=:${display} exec stdbuf -oL xdotool -`);
    input.channel = channel;
    channel.on('data', (chunk: Buffer) => input.onStdout(chunk.toString('utf8')));
    channel.stderr.on('data', (chunk: Buffer) => (input.stderr += chunk.toString('utf8')));
    channel.on('close', () => input.fail(new InputChannelError('the xdotool input channel closed')));
    return input;
  }

  get isOpen(): boolean {
    return this.channel !== undefined;
  }

  /** Runs one xdotool command line; resolves with what it printed. One at a time. */
  run(args: readonly string[], timeoutMs: number): Promise<InputResult> {
    const channel = this.channel;
    if (!channel) return Promise.reject(new InputChannelError('the xdotool input channel is closed'));
    if (this.waiter) return Promise.reject(new InputChannelError('the xdotool input channel is busy'));
    for (const arg of args) {
      if (!SAFE_ARGUMENT.test(arg)) return Promise.reject(new InputChannelError(`argument ${JSON.stringify(arg)} cannot go through xdotool's script parser`));
    }
    this.stdout = '';
    this.stderr = '';
    return new Promise<InputResult>((resolve, reject) => {
      const timer = setTimeout(() => this.fail(new InputChannelError(`xdotool did not answer within ${timeoutMs} ms`)), timeoutMs);
      this.waiter = {
        // The command's own location lines (getmouselocation), then the marker's.
        lines: args.filter((a) => a === 'getmouselocation').length + 1,
        resolve: (result) => {
          clearTimeout(timer);
          resolve(result);
        },
        reject: (err) => {
          clearTimeout(timer);
          reject(err);
        },
      };
      channel.write(`${args.join(' ')}\ngetmouselocation\n`);
    });
  }

  close(): void {
    const channel = this.channel;
    this.channel = undefined;
    if (channel) {
      channel.end();
      channel.close();
    }
    this.fail(new InputChannelError('the xdotool input channel was closed'));
  }

  private onStdout(text: string): void {
    this.stdout += text;
    const waiter = this.waiter;
    if (!waiter || (this.stdout.match(LOCATION_LINE)?.length ?? 0) < waiter.lines) return;
    this.waiter = undefined;
    const lines = this.stdout.trimEnd().split('\n');
    waiter.resolve({ stdout: lines.slice(0, -1).join('\n'), stderr: this.stderr });
  }

  /** Ends the channel for good: a broken or stuck xdotool is replaced, not reused. */
  private fail(cause: Error): void {
    // What xdotool said before it went (e.g. "Can't open display") explains the failure.
    const said = this.stderr.trim();
    const err = said ? new InputChannelError(`${cause.message}: ${said.slice(0, 300)}`) : cause;
    const channel = this.channel;
    this.channel = undefined;
    if (channel) channel.close();
    const waiter = this.waiter;
    this.waiter = undefined;
    waiter?.reject(err);
  }
}
