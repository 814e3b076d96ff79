import { GuestProtocolError, NotFoundError, OrchestratorError } from '../errors.js';
import type { GuestTransport } from '../transport/index.js';
import { GuestProcess, type ProcessInfo } from './guest-process.js';
import type { ProcessLimits } from './limits.js';
import type { ProcessSpec } from './process-request.js';
import { Spawner } from './spawner.js';

/** How often a session's spawner is started again after it died or could not start. */
const SPAWNER_RETRY_MS = 10_000;

export class ProcessLimitError extends OrchestratorError {
  constructor(message: string) {
    super('session_process_limit', message, { retryAfterSeconds: 1 });
  }
}

/**
 * The processes of one session: the running ones (at most maxRunning, the slot taken in the
 * same synchronous step as the check, before the first await), the finished ones kept a while
 * for their exit status and last output, and the session's budget of output held by all of
 * them (beyond it, the oldest output of the process that is writing goes first, then that of
 * finished processes).
 */
export class ProcessTable {
  private readonly running = new Map<number, GuestProcess>();
  private readonly finished = new Map<number, { process: GuestProcess; timer: NodeJS.Timeout }>();
  private starting = 0;
  private held = 0;
  private closed = false;
  private spawner: Spawner | undefined;
  private spawnerStarting = false;
  private spawnerTriedAt = -Infinity;

  constructor(
    private readonly connection: GuestTransport,
    private readonly display: number,
    private readonly limits: ProcessLimits,
  ) {}

  async start(spec: ProcessSpec): Promise<GuestProcess> {
    if (this.closed) throw new OrchestratorError('session_not_ready', 'the session is ending');
    if (this.running.size + this.starting >= this.limits.maxRunning) {
      throw new ProcessLimitError(`the session already runs ${this.limits.maxRunning} processes, its limit; wait for one to end or kill one`);
    }
    this.starting++;
    let process: GuestProcess;
    try {
      const spawner = spec.pty ? undefined : this.spawnerNow();
      process = await GuestProcess.start(
        this.connection,
        spec,
        this.display,
        this.limits,
        {
          held: (delta, writer) => this.account(delta, writer),
          ended: (ended) => this.onEnded(ended),
        },
        spawner,
      );
    } finally {
      this.starting--;
    }
    if (this.closed) {
      await process.stop();
      throw new OrchestratorError('session_not_ready', 'the session is ending');
    }
    // Two running processes never share a pid: the guest's answer is false (whoever controls it
    // can replace the spawner or the shell), and letting the new one take the entry would drop
    // the other from the table and from its cap. The new one is let go, unsignalled (its pid is the other's).
    const holder = this.running.get(process.pid);
    if (holder !== undefined && holder !== process && holder.running) {
      process.discard();
      throw new GuestProtocolError('exec', 'duplicate_pid', `the sandbox gave pid ${process.pid} to a second process while the first runs`);
    }
    // A pid of a finished process the guest gave out again: the new one wins.
    this.forget(process.pid);
    if (process.running) this.running.set(process.pid, process);
    else this.keep(process);
    return process;
  }

  get(pid: number): GuestProcess {
    const found = this.running.get(pid) ?? this.finished.get(pid)?.process;
    if (!found) throw new NotFoundError(`no process ${pid} in this session (finished ones are kept ${this.limits.finishedRetentionMs / 1000} s)`);
    return found;
  }

  list(includeFinished: boolean): ProcessInfo[] {
    const all = [...this.running.values(), ...(includeFinished ? [...this.finished.values()].map((f) => f.process) : [])];
    return all.map((p) => p.info());
  }

  /** Bytes of output held across the session's processes (tests, metrics). */
  get heldBytes(): number {
    return this.held;
  }

  /** The session ends: every process is killed, every buffer let go. */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.all([...this.running.values()].map((p) => p.stop()));
    for (const pid of [...this.finished.keys()]) this.forget(pid);
    this.spawner?.close();
  }

  /**
   * The session's spawner (spawner.ts) if it runs. It is started in the background on the
   * first start, and again when it died (the guest may kill it) at most every
   * SPAWNER_RETRY_MS; until it runs, processes start on channels of their own (as terminals
   * always do), so nobody waits for its interpreter to start.
   */
  private spawnerNow(): Spawner | undefined {
    if (this.spawner?.alive) return this.spawner;
    if (!this.spawnerStarting && performance.now() - this.spawnerTriedAt >= SPAWNER_RETRY_MS) {
      this.spawnerTriedAt = performance.now();
      this.spawnerStarting = true;
      Spawner.start(this.connection).then(
        (started) => {
          this.spawnerStarting = false;
          if (this.closed) started.close();
          else this.spawner = started;
        },
        () => (this.spawnerStarting = false),
      );
    }
    return undefined;
  }

  private account(delta: number, writer: GuestProcess): void {
    this.held += delta;
    if (delta <= 0 || this.held <= this.limits.bufferBytesPerSession) return;
    // Over the session's budget: what finished processes left first, oldest first (history,
    // kept for a replay), then the writer's own oldest output, then other running ones'. The
    // writer's own first would drop output its attached reader has not read yet whenever
    // earlier processes of the session hold most of the budget.
    for (const other of [...[...this.finished.values()].map((f) => f.process), writer, ...this.running.values()]) {
      while (this.held > this.limits.bufferBytesPerSession && other.log.dropOldest() > 0);
    }
  }

  private onEnded(process: GuestProcess): void {
    // Not listed yet: it ended in the same tick as it started (start() keeps it), or its start failed.
    if (this.running.get(process.pid) !== process) return;
    this.running.delete(process.pid);
    if (this.closed) process.log.clear();
    else this.keep(process);
  }

  private keep(process: GuestProcess): void {
    const timer = setTimeout(() => this.forget(process.pid), this.limits.finishedRetentionMs);
    timer.unref();
    this.finished.set(process.pid, { process, timer });
    while (this.finished.size > this.limits.maxFinished) this.forget(this.finished.keys().next().value as number);
  }

  private forget(pid: number): void {
    const kept = this.finished.get(pid);
    if (!kept) return;
    clearTimeout(kept.timer);
    this.finished.delete(pid);
    kept.process.log.clear();
    kept.process.evictReaders('the process was forgotten');
  }
}
