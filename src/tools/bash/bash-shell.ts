import { GuestProtocolError } from '../../errors.js';
import type { GuestChannel, GuestTransport } from '../../transport/index.js';
import { MarkerScanner, newNonce, printMarker } from './marker.js';
import { ByteBudget, DEFAULT_BASH_OUTPUT_LIMITS, NO_COUNTERS, type BashOutputCounters, type BashOutputLimits } from './output-budget.js';
import { ShellOutput } from './shell-output.js';

export interface BashShellOptions {
  /** X display number: the shell runs with DISPLAY=:<display>, so GUI programs appear on screen. */
  display: number;
  /** Output kept per command; the rest is counted, not kept. */
  maxOutputChars: number;
  /** How long opening the channel and the shell's first answer may take. */
  startTimeoutMs: number;
  /** How much of its output is read, and how fast (output-budget.ts). */
  outputLimits?: BashOutputLimits;
  /** Where bytes dropped and time throttled are counted. */
  counters?: BashOutputCounters;
}

/** Why a shell stopped: by itself, or because we stopped it. */
export type ShellEndReason = 'exited' | 'connection_lost' | 'timed_out' | 'restarted' | 'session_ended' | 'guest_protocol_error';

export interface CommandOutput {
  text: string;
  /** Characters beyond the kept text. */
  clippedChars: number;
}

export type ShellOutcome =
  | { kind: 'completed'; output: CommandOutput; exitCode: number }
  | { kind: 'timed_out'; output: CommandOutput }
  | {
      kind: 'ended';
      output: CommandOutput;
      reason: ShellEndReason;
      exitCode: number | null;
      signal: string | undefined;
      /** What the guest did wrong, when the reason is guest_protocol_error. */
      detail?: string;
    };

/** After bash exits, output still in flight gets this long before the command is reported. */
const EXIT_GRACE_MS = 200;
const KILL_TIMEOUT_MS = 5_000;
const STDERR_KEPT_BYTES = 4_096;

interface Waiter {
  scanner: MarkerScanner;
  onMarker(value: number): void;
  onEnd(): void;
}

/**
 * One long-lived `bash` in the guest, on a channel of the session's SSH connection, so that
 * the working directory, variables and functions persist from one command to the next.
 *
 * A command travels on the shell's standard input, after a line of framing (see
 * commandFraming) that has bash read all of it, check it and run it with eval, then print
 * the marker with its exit status (see marker.ts). So a syntax error (an unclosed quote)
 * is reported instead of swallowing what follows, a command that reads standard input gets
 * EOF instead of eating the protocol, and NUL, which no shell command can contain, ends
 * the command's text. stderr is merged into stdout by the shell itself, so the two
 * interleave as they were written.
 *
 * The shell is the leader of its own process group (sshd starts it in a new session), so
 * stopping it kills everything it started that did not detach itself.
 *
 * One command at a time: callers serialise (see BashSession).
 */
export class BashShell {
  private output: ShellOutput;
  private waiter: Waiter | undefined;
  private stderr: Buffer[] = [];
  private stderrBytes = 0;
  private exitInfo: { code: number | null; signal: string | undefined } | undefined;
  private stopReason: ShellEndReason | undefined;
  private endedFlag = false;
  private readonly endedPromise: Promise<void>;
  private markEnded!: () => void;
  private exitGrace: NodeJS.Timeout | undefined;
  private killing: Promise<void> | undefined;
  /** How the shell broke the protocol: what it sends from then on is ignored until it is stopped. */
  private protocolError: GuestProtocolError | undefined;
  /** The shell's pid in the guest, which is also its process group id. */
  pid = 0;
  private readonly limits: BashOutputLimits;
  private readonly counters: BashOutputCounters;
  private readonly budget: ByteBudget;
  /** Bytes read since the last command ended (a background job's output). */
  private unreadBytes = 0;
  /** Not read until the next command: more than limits.maxUnreadBytes came meanwhile. */
  private heldForUnread = false;
  /** Not read until this fires: the output budget is spent. */
  private rateHold: NodeJS.Timeout | undefined;
  private paused: { since: number; reason: 'rate' | 'unread_cap' } | undefined;

  private constructor(
    private readonly connection: GuestTransport,
    private readonly channel: GuestChannel,
    private readonly maxOutputChars: number,
    opts: Pick<BashShellOptions, 'outputLimits' | 'counters'>,
  ) {
    this.limits = opts.outputLimits ?? DEFAULT_BASH_OUTPUT_LIMITS;
    this.counters = opts.counters ?? NO_COUNTERS;
    this.budget = new ByteBudget(this.limits.bytesPerSecond, this.limits.burstBytes);
    this.output = new ShellOutput(maxOutputChars);
    this.endedPromise = new Promise((resolve) => (this.markEnded = resolve));
    channel.on('data', (chunk: Buffer) => this.onData(chunk));
    channel.stderr.on('data', (chunk: Buffer) => this.onStderr(chunk));
    // Writing to a channel the guest already closed must not become an unhandled 'error'.
    channel.on('error', () => undefined);
    channel.on('exit', (code: number | null, signal?: string) => {
      this.exitInfo = { code, signal: signal ?? undefined };
      // A background job can keep the output pipe (and so the channel) open after bash
      // exits: do not wait for that, only for output already on its way.
      this.exitGrace = setTimeout(() => this.onEnd(), EXIT_GRACE_MS);
    });
    channel.on('close', () => this.onEnd());
  }

  /** Starts bash as the guest user, with DISPLAY set, and waits until it answers. */
  static async start(connection: GuestTransport, opts: BashShellOptions): Promise<BashShell> {
    if (!Number.isInteger(opts.display) || opts.display < 0 || opts.display > 65_535) {
      throw new Error(`invalid display number ${opts.display}`);
    }
    // LANG: sshd passes no locale, and tools print UTF-8 only in a UTF-8 one. 2>&1 here, not
    // in the framing, so that a command's own `exec 2>...` still works as in a terminal.
    const command = `exec env DISPLAY=:${opts.display} LANG=C.UTF-8 bash --noprofile --norc 2>&1`;
    const channel = await connection.spawn(command, opts.startTimeoutMs);
    const shell = new BashShell(connection, channel, opts.maxOutputChars, opts);
    try {
      shell.pid = await shell.handshake(opts.startTimeoutMs);
    } catch (err) {
      channel.close();
      throw err;
    }
    return shell;
  }

  /** Runs one command; the shell must not be running another. */
  run(command: string, timeoutMs: number): Promise<ShellOutcome> {
    if (this.waiter) return Promise.reject(new Error('the shell is already running a command'));
    if (this.endedFlag) return Promise.resolve(this.endedOutcome());
    const nonce = newNonce();
    return new Promise<ShellOutcome>((resolve) => {
      const timer = setTimeout(() => {
        this.waiter?.scanner.flush();
        this.waiter = undefined;
        resolve({ kind: 'timed_out', output: this.takeOutput() });
      }, timeoutMs);
      this.waiter = {
        scanner: new MarkerScanner(nonce, (bytes) => this.keep(bytes)),
        onMarker: (exitCode) => {
          clearTimeout(timer);
          resolve({ kind: 'completed', output: this.takeOutput(), exitCode });
        },
        onEnd: () => {
          clearTimeout(timer);
          resolve(this.endedOutcome());
        },
      };
      const framing = commandFraming(nonce);
      this.channel.write(Buffer.concat([Buffer.from(framing), Buffer.from(command, 'utf8'), Buffer.from([0])]));
      // Someone reads the output again: what a background job was kept waiting on may come.
      this.unreadBytes = 0;
      this.heldForUnread = false;
      this.updateFlow();
    });
  }

  /**
   * Stops the shell and every process of its group (a command still running, background
   * jobs), then closes the channel. `reason` is what a command running meanwhile reports.
   */
  stop(reason: ShellEndReason): Promise<void> {
    this.stopReason ??= reason;
    this.killing ??= (async () => {
      // Read whatever is left, or the channel's end (and so its close) would never come.
      this.release();
      if (this.pid > 0) {
        // A separate channel: the shell's own stdin is busy with the command it runs.
        await this.connection.exec(`kill -s KILL -- -${this.pid}`, { timeoutMs: KILL_TIMEOUT_MS }).catch(() => undefined);
      }
      this.channel.close();
      const backstop = new Promise<void>((resolve) => setTimeout(resolve, KILL_TIMEOUT_MS).unref());
      await Promise.race([this.endedPromise, backstop]);
      this.onEnd();
    })();
    return this.killing;
  }

  /** Waits for the shell's first marker, whose value is its pid. */
  private handshake(timeoutMs: number): Promise<number> {
    const nonce = newNonce();
    return new Promise<number>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiter = undefined;
        reject(new Error(`bash did not start within ${timeoutMs} ms`));
      }, timeoutMs);
      this.waiter = {
        // Whatever bash prints before its first marker (it should print nothing) is kept
        // for the first command's output rather than lost.
        scanner: new MarkerScanner(nonce, (bytes) => this.keep(bytes)),
        onMarker: (pid) => {
          clearTimeout(timer);
          resolve(pid);
        },
        onEnd: () => {
          clearTimeout(timer);
          const why = Buffer.concat(this.stderr).toString('utf8').trim() || this.output.finish().text.trim();
          reject(new Error(`bash exited as it started${why ? `: ${why.slice(0, 500)}` : ''}`));
        },
      };
      this.channel.write(`${printMarker(nonce, '$$')}\n`);
    });
  }

  private onData(chunk: Buffer): void {
    this.take(chunk);
    this.regulate(chunk.length);
  }

  private take(chunk: Buffer): void {
    if (this.protocolError) return;
    const waiter = this.waiter;
    if (!waiter) {
      // Between commands: a background job's output, shown with the next command's.
      this.keepUnread(chunk);
      return;
    }
    let found: ReturnType<MarkerScanner['feed']>;
    try {
      found = waiter.scanner.feed(chunk);
    } catch (err) {
      if (!(err instanceof GuestProtocolError)) throw err;
      this.onProtocolError(err);
      return;
    }
    if (!found) return;
    this.waiter = undefined;
    waiter.onMarker(found.value);
    if (found.rest.length > 0) this.keepUnread(found.rest);
  }

  private keep(bytes: Buffer): void {
    const dropped = this.output.push(bytes);
    if (dropped > 0) this.counters.dropped(dropped, 'command');
  }

  private keepUnread(bytes: Buffer): void {
    this.unreadBytes += bytes.length;
    const dropped = this.output.push(bytes);
    if (dropped > 0) this.counters.dropped(dropped, 'between_commands');
  }

  /**
   * Stops reading the channel when the output budget is spent, or when a background job
   * has written more than maxUnreadBytes since the last command. A channel not read stops
   * granting the guest window, so its sshd, and then the writer, block: a flood costs the
   * orchestrator its budget's worth of decryption and nothing more.
   */
  private regulate(bytes: number): void {
    if (this.killing) return;
    const wait = this.budget.charge(bytes);
    if (wait > 0 && !this.rateHold) {
      this.rateHold = setTimeout(() => {
        this.rateHold = undefined;
        this.updateFlow();
      }, wait);
    }
    // Also after the shell ended (a background job holds the channel open): stop() lifts it.
    if (!this.waiter && this.unreadBytes >= this.limits.maxUnreadBytes) this.heldForUnread = true;
    this.updateFlow();
  }

  /** Pauses or resumes the channel as the holds say, timing the pauses for the metrics. */
  private updateFlow(): void {
    const reason = this.heldForUnread ? 'unread_cap' : this.rateHold ? 'rate' : undefined;
    if (reason && !this.paused) {
      this.paused = { since: performance.now(), reason };
      this.channel.pause();
    } else if (!reason && this.paused) {
      this.counters.throttled((performance.now() - this.paused.since) / 1000, this.paused.reason);
      this.paused = undefined;
      this.channel.resume();
    }
  }

  /** Drops every hold (the shell is being stopped or has ended). */
  private release(): void {
    this.heldForUnread = false;
    clearTimeout(this.rateHold);
    this.rateHold = undefined;
    this.updateFlow();
  }

  /**
   * A marker that cannot be ours (see MarkerScanner): the shell is stopped and its command
   * ends with a tool error, rather than its output being held or guessed at.
   */
  private onProtocolError(err: GuestProtocolError): void {
    this.protocolError = err;
    this.connection.reportProtocolError(err);
    void this.stop('guest_protocol_error');
  }

  private onStderr(chunk: Buffer): void {
    // Only the login shell's own complaints land here (bash's stderr, and so every command's,
    // is merged into stdout): a line or two. More is not our bash, and is not kept.
    if (this.protocolError) return;
    this.stderrBytes += chunk.length;
    if (this.stderrBytes > STDERR_KEPT_BYTES) {
      this.onProtocolError(new GuestProtocolError('bash', 'stderr_overrun', `the shell in the guest wrote more than ${STDERR_KEPT_BYTES} bytes of errors`));
      return;
    }
    this.stderr.push(chunk);
  }

  private onEnd(): void {
    if (this.endedFlag) return;
    this.endedFlag = true;
    clearTimeout(this.exitGrace);
    this.markEnded();
    const waiter = this.waiter;
    this.waiter = undefined;
    if (waiter) {
      // What a broken shell held back was the forged marker: not output to show.
      if (!this.protocolError) waiter.scanner.flush();
      waiter.onEnd();
    }
  }

  private takeOutput(): CommandOutput {
    const finished = this.output.finish();
    this.output = new ShellOutput(this.maxOutputChars);
    return finished;
  }

  private endedOutcome(): ShellOutcome {
    const reason = this.stopReason ?? (this.exitInfo ? 'exited' : 'connection_lost');
    return {
      kind: 'ended',
      output: this.takeOutput(),
      reason,
      exitCode: this.exitInfo?.code ?? null,
      signal: this.exitInfo?.signal,
      ...(this.protocolError ? { detail: this.protocolError.message } : {}),
    };
  }
}

/**
 * The line that runs one command, followed on the wire by the command's text and a NUL:
 *
 *     { IFS= read -r -d '' __sbx_command; } 2>/dev/null
 *     if ( eval "__sbx_syntax() { $__sbx_command"$'\n'"}" ) >/dev/null 2>&1
 *     then eval "$__sbx_command" </dev/null
 *     else ( eval "$__sbx_command" </dev/null )
 *     fi
 *     { printf <marker with $?>; } 2>/dev/null
 *
 * (all on one line). The syntax check parses the command as a function body in a forked
 * subshell, without running it: bash 5.2.15 (Debian 12) corrupts its heap after eval fails
 * to parse an unclosed `$(`, and aborts a few commands later, so text that does not parse
 * only ever meets a throwaway subshell, where eval reports the error as usual. (A command
 * that only parses once it has run, e.g. one that enables extglob and then uses it, runs
 * in that subshell too: its output is right, its changes to the shell's state are lost.)
 *
 * The framing's own commands send their stderr to /dev/null, so that a `set -x` the model
 * left on traces its command (and the eval that runs it), not the protocol. The empty line
 * first: after an eval that failed on an unclosed quote, bash 5.2 does not take the first
 * word of the next line as a keyword, and a `{` there would be a syntax error that ends the
 * shell. `builtin` everywhere, so that functions the model defined (a `read`, a `printf`)
 * cannot stand in.
 */
function commandFraming(nonce: string): string {
  const run = 'builtin eval "$__sbx_command" </dev/null';
  return (
    `\n{ IFS= builtin read -r -d '' __sbx_command; } 2>/dev/null; ` +
    `if ( builtin eval "__sbx_syntax() { $__sbx_command"$'\\n'"}" ) </dev/null >/dev/null 2>&1; then ${run}; else ( ${run} ); fi; ` +
    `{ ${printMarker(nonce, '$?')}; } 2>/dev/null\n`
  );
}
