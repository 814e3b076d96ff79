import type { GuestTransport } from '../../transport/index.js';
import { SerialQueue } from '../../util/serial-queue.js';
import { BashShell, type ShellOutcome } from './bash-shell.js';
import type { BashOutputCounters, BashOutputLimits } from './output-budget.js';

export interface BashSessionOptions {
  display: number;
  /** A command running longer than this is killed, and the shell with it. */
  timeoutMs: number;
  maxOutputChars: number;
  startTimeoutMs: number;
  outputLimits?: BashOutputLimits;
  counters?: BashOutputCounters;
}

/**
 * The bash tool's state in one sandbox: the current shell, replaced after a restart, a
 * timeout or an exit. Commands run one at a time in the order they came (two at once in one
 * shell would mix their output); other sessions have their own and are not held up.
 */
export class BashSession {
  private shell: Promise<BashShell> | undefined;
  private readonly queue = new SerialQueue();
  private closed = false;

  constructor(
    private readonly connection: GuestTransport,
    private readonly opts: BashSessionOptions,
  ) {}

  /** Runs a command in the persistent shell, starting one if there is none. */
  run(command: string): Promise<ShellOutcome> {
    return this.queue.run(async () => {
      if (this.closed) return sessionEnded();
      const shell = await this.current();
      const outcome = await shell.run(command, this.opts.timeoutMs);
      if (outcome.kind === 'timed_out') await this.replace(shell, 'timed_out');
      // An exited shell may leave background jobs holding its channel open: stop them too.
      else if (outcome.kind === 'ended') await this.replace(shell, outcome.reason);
      return outcome;
    });
  }

  /**
   * Kills the shell (and a command it is running, without waiting for it in the queue) and
   * starts a fresh one, whose pid it returns.
   */
  async restart(): Promise<number> {
    if (this.closed) throw new Error('the session is ending');
    const old = this.shell;
    this.shell = undefined;
    if (old)
      await old.then(
        (shell) => shell.stop('restarted'),
        () => undefined,
      );
    return (await this.current()).pid;
  }

  /** Stops the shell for good (the session is being destroyed). */
  async close(): Promise<void> {
    this.closed = true;
    const shell = this.shell;
    this.shell = undefined;
    if (shell)
      await shell.then(
        (s) => s.stop('session_ended'),
        () => undefined,
      );
  }

  private current(): Promise<BashShell> {
    if (!this.shell) {
      const starting = BashShell.start(this.connection, {
        display: this.opts.display,
        maxOutputChars: this.opts.maxOutputChars,
        startTimeoutMs: this.opts.startTimeoutMs,
        ...(this.opts.outputLimits ? { outputLimits: this.opts.outputLimits } : {}),
        ...(this.opts.counters ? { counters: this.opts.counters } : {}),
      });
      // A shell that failed to start is forgotten, so the next command tries again.
      starting.catch(() => {
        if (this.shell === starting) this.shell = undefined;
      });
      this.shell = starting;
    }
    return this.shell;
  }

  /** Forgets a finished shell (the next command starts another) after stopping what is left of it. */
  private async replace(shell: BashShell, reason: Parameters<BashShell['stop']>[0]): Promise<void> {
    if (this.shell && (await this.shell.catch(() => undefined)) === shell) this.shell = undefined;
    await shell.stop(reason);
  }
}

function sessionEnded(): ShellOutcome {
  return { kind: 'ended', output: { text: '', clippedChars: 0 }, reason: 'session_ended', exitCode: null, signal: undefined };
}
