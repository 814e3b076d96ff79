import { InvalidRequestError, OrchestratorError } from '../errors.js';
import { ByteBudget } from '../tools/bash/output-budget.js';
import { exitOf, type GuestChannel, type GuestTransport } from '../transport/index.js';
import type { ProcessLimits } from './limits.js';
import { OutputLog, type OutputStream } from './output-log.js';
import { guestCommand, NO_CWD_LINE, PID_LINE, type ProcessSpec } from './process-request.js';
import { SpawnedChannel, type Spawner } from './spawner.js';
import { OutputReader, type ProcessEndReason, type ProcessExit, type ReadableProcess, type ReaderTarget } from './readers.js';

/** Signals a client may send (by name, without SIG): nothing else reaches `pkill`. */
export const SIGNALS = ['TERM', 'KILL', 'INT', 'HUP', 'QUIT', 'USR1', 'USR2', 'STOP', 'CONT', 'WINCH', 'ALRM'] as const;
export type SignalName = (typeof SIGNALS)[number];

/** The first line (the pid) is at most this long; more before a newline is not our shell. */
const PRELUDE_MAX = 64;
/** After the process exits, output still in flight (or a background child holding the pipes) gets this long. */
const EXIT_GRACE_MS = 1_000;
const SIGNAL_TIMEOUT_MS = 10_000;
/** Standard input a process has not read yet, beyond which a write waits (and then fails). */
const STDIN_WAIT_MS = 10_000;
/** Standard input held for a process beyond the guest's window, past which a write is refused at once. */
export const STDIN_HELD_MAX_BYTES = 1024 * 1024;

export class ProcessStartError extends OrchestratorError {
  constructor(message: string) {
    super('process_start_failed', message);
  }
}

/** What GET .../processes lists. */
export interface ProcessInfo {
  pid: number;
  argv?: string[];
  cmd?: string;
  cwd?: string;
  pty: boolean;
  stdin: boolean;
  startedAt: string;
  running: boolean;
  exitCode: number | null;
  signal: string | null;
  reason: ProcessEndReason | null;
  /** Bytes of output so far, and of those the bytes no longer held (dropped unread). */
  outputBytes: number;
  droppedBytes: number;
  readers: number;
}

export interface ProcessHooks {
  /** Bytes of output held by `process` changed (the session's budget). */
  held(delta: number, process: GuestProcess): void;
  ended(process: GuestProcess): void;
}

/**
 * One process in the guest on its own channel of the session's SSH connection. Its output is
 * always read (never left to block the process for want of a client) into a bounded log, at
 * most at the configured rate; readers attached to it follow the log, and one that falls
 * behind pauses the channel (so a client that reads slowly slows the process, as a pipe
 * would) until it catches up or is evicted for stalling.
 */
export class GuestProcess implements ReadableProcess {
  pid = 0;
  readonly log: OutputLog;
  readonly startedAt = new Date();
  exitInfo: ProcessExit | undefined;
  private exitStatus: { code: number | null; signal: string | null } | undefined;
  private readonly readers = new Set<OutputReader>();
  private readonly budget: ByteBudget;
  private rateHold: NodeJS.Timeout | undefined;
  private paused = false;
  private prelude: Buffer | undefined = Buffer.alloc(0);
  private started!: { resolve: () => void; reject: (err: Error) => void };
  private exitGrace: NodeJS.Timeout | undefined;
  private deadline: NodeJS.Timeout | undefined;
  private stallCheck: NodeJS.Timeout | undefined;
  private stopping: ProcessEndReason | undefined;
  private stdinStuck = false;

  private constructor(
    private readonly connection: GuestTransport,
    private readonly channel: GuestChannel,
    readonly spec: ProcessSpec,
    private readonly limits: ProcessLimits,
    private readonly hooks: ProcessHooks,
  ) {
    this.log = new OutputLog(limits.bufferBytesPerProcess, (delta) => hooks.held(delta, this));
    this.budget = new ByteBudget(limits.bytesPerSecond, limits.burstBytes);
    // With a terminal both streams are the terminal's, and the pid line comes on it.
    channel.on('data', (chunk: Buffer) => this.onData('stdout', chunk, spec.pty !== undefined));
    channel.stderr.on('data', (chunk: Buffer) => this.onData('stderr', chunk, !spec.pty));
    const onExit = (code: unknown, signal: unknown) => {
      if (this.exitStatus) return;
      this.exitStatus = { code: typeof code === 'number' ? code : null, signal: typeof signal === 'string' ? signal.replace(/^SIG/, '').slice(0, 16) : null };
      this.armExitGrace();
    };
    channel.on('exit', onExit);
    // It may have come already, before the channel was handed over (a command that ends at once).
    const early = exitOf(channel);
    if (early) onExit(early.code, early.signal);
    channel.on('close', () => this.finish());
  }

  /** Starts the process; resolves once the guest said its pid (the program is being exec'd). */
  static async start(
    connection: GuestTransport,
    spec: ProcessSpec,
    display: number,
    limits: ProcessLimits,
    hooks: ProcessHooks,
    spawner?: Spawner,
  ): Promise<GuestProcess> {
    const pty = spec.pty ? { cols: spec.pty.cols, rows: spec.pty.rows, height: 0, width: 0, term: 'xterm-256color' } : undefined;
    // Without a terminal, the session's spawner forks it (one message); a terminal is sshd's.
    const channel = spawner?.alive && !pty ? spawner.spawn(spec, display) : await connection.spawn(guestCommand(spec, display), limits.startTimeoutMs, pty);
    const process = new GuestProcess(connection, channel, spec, limits, hooks);
    const started = new Promise<void>((resolve, reject) => (process.started = { resolve, reject }));
    const timer = setTimeout(
      () => process.started.reject(new ProcessStartError(`the process did not start within ${limits.startTimeoutMs} ms`)),
      limits.startTimeoutMs,
    );
    if (!spec.stdin) channel.end();
    try {
      await started;
    } catch (err) {
      process.discard();
      throw err;
    } finally {
      clearTimeout(timer);
    }
    if (spec.timeoutSeconds) process.deadline = setTimeout(() => void process.kill('timed_out'), spec.timeoutSeconds * 1000);
    return process;
  }

  get outputEnd(): number {
    return this.log.end;
  }

  get running(): boolean {
    return this.exitInfo === undefined;
  }

  info(): ProcessInfo {
    const { spec } = this;
    return {
      pid: this.pid,
      ...(spec.argv ? { argv: spec.argv } : { cmd: spec.cmd as string }),
      ...(spec.cwd ? { cwd: spec.cwd } : {}),
      pty: spec.pty !== undefined,
      stdin: spec.stdin,
      startedAt: this.startedAt.toISOString(),
      running: this.running,
      exitCode: this.exitInfo?.exitCode ?? null,
      signal: this.exitInfo?.signal ?? null,
      reason: this.exitInfo?.reason ?? null,
      outputBytes: this.log.end,
      droppedBytes: this.log.droppedBytes,
      readers: this.readers.size,
    };
  }

  read(offset: number, maxBytes: number): ReturnType<OutputLog['read']> {
    return this.log.read(offset, maxBytes);
  }

  /** A reader from `from` (default 0: a replay of what is held, after a `dropped` for what is not, then live). */
  attach(target: ReaderTarget, from?: number): OutputReader {
    if (this.readers.size >= this.limits.maxReadersPerProcess) {
      throw new OrchestratorError('process_reader_limit', `process ${this.pid} has ${this.readers.size} readers, its limit; close one`);
    }
    const reader = new OutputReader(this, target, Math.max(0, Math.min(from ?? 0, this.log.end)));
    this.readers.add(reader);
    queueMicrotask(() => reader.pump());
    return reader;
  }

  /** Disconnects every reader (the process is forgotten). */
  evictReaders(reason: string): void {
    for (const reader of [...this.readers]) reader.evict(reason);
  }

  detach(reader: OutputReader): void {
    this.readers.delete(reader);
    this.updateFlow();
  }

  readerMoved(): void {
    this.updateFlow();
  }

  /** Writes to the process's standard input; `eof` closes it after. */
  async write(data: Buffer, eof: boolean): Promise<void> {
    if (!this.running) throw new OrchestratorError('process_exited', `process ${this.pid} has exited`);
    if (!this.spec.stdin) throw new InvalidRequestError(`process ${this.pid} was started without stdin: true; its standard input is closed`);
    if (this.channel.writableEnded) throw new OrchestratorError('stdin_closed', `the standard input of process ${this.pid} is already closed`);
    // Bytes already waiting for the guest's window: a process that does not read gets no more
    // (checked and written in one turn, so concurrent writes cannot pass it together).
    if (data.length > 0 && (this.channel.writableLength > STDIN_HELD_MAX_BYTES || this.stdinStuck)) {
      throw new OrchestratorError('stdin_full', `process ${this.pid} is not reading its standard input (${this.channel.writableLength} bytes wait for it)`);
    }
    const room = data.length === 0 || this.channel.write(data);
    if (eof) this.channel.end();
    if (room || eof) return;
    // The guest's window is full: the process is not reading. Wait a while, not for ever.
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.channel.off('drain', done);
        // Until it reads again, further input is refused at once rather than after a wait each.
        this.stdinStuck = true;
        this.channel.once('drain', () => (this.stdinStuck = false));
        reject(new OrchestratorError('stdin_full', `process ${this.pid} did not read its standard input within ${STDIN_WAIT_MS} ms`));
      }, STDIN_WAIT_MS);
      const done = () => {
        clearTimeout(timer);
        resolve();
      };
      this.channel.once('drain', done);
    });
  }

  resize(cols: number, rows: number): void {
    if (!this.spec.pty) throw new InvalidRequestError(`process ${this.pid} has no terminal to resize (start it with pty)`);
    if (this.running) this.channel.setWindow(rows, cols, 0, 0);
  }

  /**
   * Sends a signal to every process of the process's session in the guest (sshd made it a
   * session leader: its children and the jobs of a shell in a terminal are all in it). The
   * name is one of SIGNALS and the pid an integer we parsed: nothing else is in the command.
   */
  async signal(name: SignalName): Promise<void> {
    if (!SIGNALS.includes(name)) throw new InvalidRequestError(`signal must be one of ${SIGNALS.join(', ')}`);
    if (!this.running) throw new OrchestratorError('process_exited', `process ${this.pid} has exited`);
    // A process of the spawner is signalled by it (one frame); one on a channel of its own by `pkill`.
    if (this.channel instanceof SpawnedChannel) await this.channel.signal(name, SIGNAL_TIMEOUT_MS);
    else await this.connection.exec(`pkill -${name} -s ${this.pid}`, { timeoutMs: SIGNAL_TIMEOUT_MS, maxOutputBytes: 4096 });
  }

  /** SIGTERM, then SIGKILL after the grace if it is still running. Resolves once it ended. */
  async kill(reason: ProcessEndReason = 'killed'): Promise<void> {
    if (!this.running) return;
    this.stopping ??= reason;
    await this.signal('TERM').catch(() => undefined);
    if (await this.endedWithin(this.limits.killGraceMs)) return;
    await this.signal('KILL').catch(() => undefined);
    if (await this.endedWithin(SIGNAL_TIMEOUT_MS)) return;
    this.channel.close();
  }

  /** Given up without a signal (its start failed, or its pid is not its own): the channel closed, its output let go. */
  discard(): void {
    this.finish();
    this.log.clear();
  }

  /** For good, at once (the session ends): SIGKILL to its session, then the channel closed. */
  async stop(): Promise<void> {
    if (!this.running) return;
    this.stopping ??= 'session_ended';
    const killed =
      this.channel instanceof SpawnedChannel
        ? this.channel.signal('KILL', 2_000)
        : this.connection.exec(`pkill -KILL -s ${this.pid}`, { timeoutMs: 2_000, maxOutputBytes: 4096 });
    await killed.catch(() => undefined);
    this.channel.close();
    this.finish();
  }

  /**
   * After the exit status, the channel is closed once its output stopped: a background child
   * that holds the pipes open but says nothing does not keep the process running, while
   * output still on its way (held in the channel while a reader catches up, or still coming)
   * is read to its end first.
   */
  private armExitGrace(): void {
    this.exitGrace = setTimeout(() => {
      if (this.paused || performance.now() - this.lastDataAt < EXIT_GRACE_MS) this.armExitGrace();
      else this.finish();
    }, EXIT_GRACE_MS);
  }

  private lastDataAt = 0;

  private endedWithin(ms: number): Promise<boolean> {
    if (!this.running) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(!this.running), ms);
      this.waitEnd.push(() => {
        clearTimeout(timer);
        resolve(true);
      });
    });
  }

  private readonly waitEnd: Array<() => void> = [];

  private onData(stream: OutputStream, chunk: Buffer, carriesPrelude: boolean): void {
    this.lastDataAt = performance.now();
    if (carriesPrelude && this.prelude) {
      chunk = this.takePrelude(chunk);
      if (chunk.length === 0) return;
    }
    this.log.push(stream, chunk);
    for (const reader of this.readers) reader.pump();
    const wait = this.budget.charge(chunk.length);
    if (wait > 0 && !this.rateHold) {
      this.rateHold = setTimeout(() => {
        this.rateHold = undefined;
        this.updateFlow();
      }, wait);
    }
    this.updateFlow();
  }

  /** The guest's first line: our shell's pid (or that cwd could not be entered); the rest is output. */
  private takePrelude(chunk: Buffer): Buffer {
    const seen = Buffer.concat([this.prelude as Buffer, chunk]);
    const newline = seen.indexOf(0x0a);
    if (newline < 0) {
      if (seen.length > PRELUDE_MAX) this.badStart(`the guest's first line was not the process id`);
      else this.prelude = seen;
      return Buffer.alloc(0);
    }
    this.prelude = undefined;
    const line = seen.subarray(0, newline).toString('latin1').replace(/\r$/, '');
    const rest = seen.subarray(newline + 1);
    if (line === NO_CWD_LINE) {
      this.started.reject(new InvalidRequestError(`cwd: ${this.spec.cwd ?? ''} is not a directory the sandbox user can enter`));
      return Buffer.alloc(0);
    }
    const pid = line.startsWith(PID_LINE) ? Number(line.slice(PID_LINE.length)) : NaN;
    if (!Number.isInteger(pid) || pid < 2 || pid > 4_194_304) {
      this.badStart(`the guest's first line was not the process id`);
      return Buffer.alloc(0);
    }
    this.pid = pid;
    this.started.resolve();
    return rest;
  }

  private badStart(why: string): void {
    this.prelude = undefined;
    this.started.reject(new ProcessStartError(why));
    this.channel.close();
  }

  /**
   * Pauses the channel while the rate budget is spent, or while an attached reader is more
   * than half the log behind (a slow client slows the process; without readers the oldest
   * output is dropped instead, and nothing waits). A reader that holds it back without
   * moving for readerStallMs is evicted.
   */
  private updateFlow(): void {
    if (!this.running) return;
    const highWater = this.limits.bufferBytesPerProcess / 2;
    let laggard = false;
    for (const reader of this.readers) if (reader.behind > highWater) laggard = true;
    const hold = laggard || this.rateHold !== undefined;
    if (hold && !this.paused) {
      this.paused = true;
      this.channel.pause();
      this.channel.stderr.pause();
    } else if (!hold && this.paused) {
      this.paused = false;
      this.channel.resume();
      this.channel.stderr.resume();
    }
    if (laggard && !this.stallCheck) {
      this.stallCheck = setInterval(() => this.evictStalled(highWater), Math.min(1_000, this.limits.readerStallMs));
    } else if (!laggard && this.stallCheck) {
      clearInterval(this.stallCheck);
      this.stallCheck = undefined;
    }
  }

  private evictStalled(highWater: number): void {
    const now = performance.now();
    for (const reader of [...this.readers])
      if (reader.behind > highWater && now - reader.movedAt > this.limits.readerStallMs) {
        reader.evict(`the client read nothing for ${this.limits.readerStallMs} ms while the process waited for it`);
      }
    this.updateFlow();
  }

  private finish(): void {
    if (this.exitInfo) return;
    clearTimeout(this.exitGrace);
    clearTimeout(this.deadline);
    clearTimeout(this.rateHold);
    clearInterval(this.stallCheck);
    const status = this.exitStatus;
    const reason: ProcessEndReason = this.stopping ?? (status ? 'exited' : 'connection_lost');
    this.exitInfo = { exitCode: status?.code ?? null, signal: status?.signal ?? null, reason };
    if (this.prelude) this.started?.reject(new ProcessStartError('the process ended before it started (is the command there?)'));
    this.channel.close();
    for (const wake of this.waitEnd.splice(0)) wake();
    for (const reader of [...this.readers]) reader.pump();
    this.hooks.ended(this);
  }
}
