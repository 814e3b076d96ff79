import type { GuestConnection } from '../transport/ssh-connection.js';
import { GuestProcessChannel } from './guest-process-channel.js';

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

export class InputChannel extends GuestProcessChannel<InputResult> {
  private stdout = '';
  /** Location lines that end the command in flight: its own getmouselocation's, and the marker's. */
  private expectedLines = 1;

  private constructor() {
    super((message) => new InputChannelError(message));
  }

  static async open(connection: GuestConnection, display: number): Promise<InputChannel> {
    const input = new InputChannel();
    // stdbuf: xdotool's stdout is a pipe, which stdio would otherwise buffer in blocks.
    input.attach(await connection.spawn(`LC_ALL=C.UTF-8 DISPLAY=:${display} exec stdbuf -oL xdotool -`), 'xdotool input');
    return input;
  }

  /** Runs one xdotool command line; resolves with what it printed. One at a time. */
  run(args: readonly string[], timeoutMs: number): Promise<InputResult> {
    for (const arg of args) {
      if (!SAFE_ARGUMENT.test(arg)) return Promise.reject(new InputChannelError(`argument ${JSON.stringify(arg)} cannot go through xdotool's script parser`));
    }
    if (this.busy) return Promise.reject(new InputChannelError('the xdotool input channel is busy'));
    this.stdout = '';
    this.expectedLines = args.filter((a) => a === 'getmouselocation').length + 1;
    return this.request(`${args.join(' ')}\ngetmouselocation\n`, timeoutMs);
  }

  protected onData(chunk: Buffer): void {
    this.stdout += chunk.toString('utf8');
    if (!this.busy || (this.stdout.match(LOCATION_LINE)?.length ?? 0) < this.expectedLines) return;
    const lines = this.stdout.trimEnd().split('\n');
    this.settle({ stdout: lines.slice(0, -1).join('\n'), stderr: this.stderr });
  }
}
