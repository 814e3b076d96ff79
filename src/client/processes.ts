import { serverSentEvents } from './event-stream.js';
import type { SandboxClient } from './index.js';

/**
 * Processes in a sandbox (docs/api.md#processes):
 *
 *   const proc = await sandbox.processes.start({ argv: ['python3', 'train.py'], cwd: '/home/user' });
 *   for await (const event of proc) if (event.type === 'stdout') process.stdout.write(event.data);
 *   const { exitCode } = await proc.wait();
 */
export interface StartProcessOptions {
  /** The program and its arguments, each passed as one argument (never read by a shell)... */
  argv?: string[];
  /** ... or a shell command of your own, run as `bash -lc <cmd>`. */
  cmd?: string;
  cwd?: string;
  env?: Record<string, string>;
  /** Keep standard input open for stdin() (otherwise it is at EOF from the start). */
  stdin?: boolean;
  /** A terminal: true (80x24) or its size. */
  pty?: boolean | { cols: number; rows: number };
  timeoutSeconds?: number;
}

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
  reason: 'exited' | 'killed' | 'timed_out' | 'session_ended' | 'connection_lost' | null;
  outputBytes: number;
  droppedBytes: number;
  readers: number;
}

export type ProcessExitInfo = { exitCode: number | null; signal: string | null; reason: NonNullable<ProcessInfo['reason']> };

export type ProcessEvent =
  | { type: 'stdout' | 'stderr'; offset: number; data: Buffer }
  | { type: 'dropped'; offset: number; bytes: number }
  | ({ type: 'exit'; outputBytes: number } & ProcessExitInfo);

export interface ProcessRead {
  from: number;
  next: number;
  /** Bytes before what is returned that the server no longer holds. */
  dropped: number;
  stdout: Buffer;
  stderr: Buffer;
  running: boolean;
  /** More output is held beyond `next`. */
  more: boolean;
  exitCode: number | null;
  signal: string | null;
  reason: ProcessInfo['reason'];
}

export type ProcessSignal = 'TERM' | 'KILL' | 'INT' | 'HUP' | 'QUIT' | 'USR1' | 'USR2' | 'STOP' | 'CONT' | 'WINCH' | 'ALRM';

/** How often output() reconnects after its stream was cut before the exit. */
const RECONNECTS = 5;

export class Processes {
  constructor(
    private readonly client: SandboxClient,
    private readonly id: string,
  ) {}

  private get base(): string {
    return `/v1/sessions/${encodeURIComponent(this.id)}/processes`;
  }

  async start(options: StartProcessOptions): Promise<ProcessHandle> {
    const info = await this.client.json<ProcessInfo>('POST', this.base, options);
    return new ProcessHandle(this.client, this.base, info);
  }

  /**
   * Starts a process and follows its output in one request (one round trip less to the first
   * byte than start() then output()): a `start` event with the process first, then its output,
   * ending with `exit`. Stop iterating to disconnect (the process goes on; connect() to it).
   */
  async *run(options: StartProcessOptions, control: { signal?: AbortSignal } = {}): AsyncGenerator<ProcessEvent | { type: 'start'; process: ProcessInfo }> {
    const response = await this.client.send(this.base, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
      body: JSON.stringify(options),
      ...(control.signal ? { signal: control.signal } : {}),
    });
    let handle: ProcessHandle | undefined;
    let offset = 0;
    for await (const event of serverSentEvents(response.body)) {
      if (event.event === 'start') {
        const info = JSON.parse(event.data) as ProcessInfo;
        handle = new ProcessHandle(this.client, this.base, info);
        yield { type: 'start', process: info };
        continue;
      }
      const parsed = parseOutputEvent(event);
      if (!parsed) continue;
      if (parsed.type !== 'exit') offset = parsed.type === 'dropped' ? parsed.offset : parsed.offset + parsed.data.length;
      yield parsed;
      if (parsed.type === 'exit') return;
    }
    // Cut before the exit: go on from where it stopped, as output() does.
    if (handle) yield* handle.output({ from: offset, ...(control.signal ? { signal: control.signal } : {}) });
  }

  /** The running processes (`all`: finished ones still kept too). */
  async list(options: { all?: boolean } = {}): Promise<ProcessInfo[]> {
    return (await this.client.json<{ processes: ProcessInfo[] }>('GET', `${this.base}${options.all ? '?all=true' : ''}`)).processes;
  }

  /** A handle on a process started elsewhere (another client, an earlier run of yours). */
  async connect(pid: number): Promise<ProcessHandle> {
    return new ProcessHandle(this.client, this.base, await this.client.json<ProcessInfo>('GET', `${this.base}/${pid}`));
  }
}

export class ProcessHandle {
  constructor(
    private readonly client: SandboxClient,
    private readonly base: string,
    public info: ProcessInfo,
  ) {}

  get pid(): number {
    return this.info.pid;
  }

  private get path(): string {
    return `${this.base}/${this.pid}`;
  }

  /**
   * Output events from `from` (default 0: all that the server still holds, after a `dropped`
   * event for what it no longer does), then live, ending with `exit`. A stream cut before the
   * exit is resumed where it stopped.
   */
  async *output(options: { from?: number; signal?: AbortSignal } = {}): AsyncGenerator<ProcessEvent> {
    let offset = options.from ?? 0;
    for (let attempt = 0; attempt <= RECONNECTS; attempt++) {
      const response = await this.client.send(`${this.path}/output?from=${offset}`, { method: 'GET', ...(options.signal ? { signal: options.signal } : {}) });
      try {
        for await (const event of serverSentEvents(response.body)) {
          const data = JSON.parse(event.data) as Record<string, unknown>;
          if (event.event === 'output') {
            const bytes = Buffer.from(data.data as string, 'base64');
            offset = (data.offset as number) + bytes.length;
            yield { type: data.stream === 'stderr' ? 'stderr' : 'stdout', offset: data.offset as number, data: bytes };
          } else if (event.event === 'dropped') {
            offset = data.offset as number;
            yield { type: 'dropped', offset, bytes: data.bytes as number };
          } else if (event.event === 'exit') {
            const exit = data as unknown as ProcessExitInfo & { outputBytes: number };
            this.info = { ...this.info, running: false, exitCode: exit.exitCode, signal: exit.signal, reason: exit.reason };
            yield { type: 'exit', ...exit };
            return;
          } else if (event.event === 'evicted') {
            break; // the server let this reader go: reconnect from where it was
          }
        }
      } catch (err) {
        if (options.signal?.aborted) throw err;
      }
    }
    throw new Error(`the output of process ${this.pid} was cut ${RECONNECTS + 1} times before it ended`);
  }

  [Symbol.asyncIterator](): AsyncGenerator<ProcessEvent> {
    return this.output();
  }

  /** Waits for the end, collecting the output (what the server dropped is counted, not kept). */
  async wait(): Promise<ProcessExitInfo & { stdout: Buffer; stderr: Buffer; droppedBytes: number }> {
    const stdout: Buffer[] = [];
    const stderr: Buffer[] = [];
    let droppedBytes = 0;
    for await (const event of this.output()) {
      if (event.type === 'stdout') stdout.push(event.data);
      else if (event.type === 'stderr') stderr.push(event.data);
      else if (event.type === 'dropped') droppedBytes += event.bytes;
      else if (event.type === 'exit')
        return {
          exitCode: event.exitCode,
          signal: event.signal,
          reason: event.reason,
          stdout: Buffer.concat(stdout),
          stderr: Buffer.concat(stderr),
          droppedBytes,
        };
    }
    throw new Error('the output ended without an exit');
  }

  /** What the server holds from `from` on, at once (no waiting): read again from `next`. */
  async read(options: { from?: number; maxBytes?: number } = {}): Promise<ProcessRead> {
    const query = new URLSearchParams({ from: String(options.from ?? 0), ...(options.maxBytes ? { maxBytes: String(options.maxBytes) } : {}) });
    const raw = await this.client.json<Omit<ProcessRead, 'stdout' | 'stderr'> & { stdout: string; stderr: string }>('GET', `${this.path}/read?${query}`);
    return { ...raw, stdout: Buffer.from(raw.stdout, 'base64'), stderr: Buffer.from(raw.stderr, 'base64') };
  }

  /** Writes to standard input (the process must have been started with stdin or pty). */
  async stdin(data: string | Buffer, options: { eof?: boolean } = {}): Promise<void> {
    const body = typeof data === 'string' ? { data } : { data: data.toString('base64'), encoding: 'base64' };
    await this.client.send(`${this.path}/stdin`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ ...body, eof: options.eof === true }),
    });
  }

  closeStdin(): Promise<void> {
    return this.stdin('', { eof: true });
  }

  async signal(signal: ProcessSignal): Promise<void> {
    await this.client.send(`${this.path}/signal`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ signal }) });
  }

  /** SIGTERM, then SIGKILL after the server's grace; resolves once it ended. */
  async kill(): Promise<ProcessInfo> {
    this.info = await this.client.json<ProcessInfo>('POST', `${this.path}/kill`, {});
    return this.info;
  }

  async resize(cols: number, rows: number): Promise<void> {
    await this.client.send(`${this.path}/resize`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ cols, rows }) });
  }

  async refresh(): Promise<ProcessInfo> {
    this.info = await this.client.json<ProcessInfo>('GET', this.path);
    return this.info;
  }

  /** The WebSocket URL of this process (xterm.js's attach addon; send the API key as a Bearer header). */
  get socketUrl(): string {
    return `${this.client.baseUrl.replace(/^http/, 'ws')}${this.path}/ws`;
  }
}

/** One event of the output stream as the SDK gives it (undefined: not an output event). */
function parseOutputEvent(event: { event: string; data: string }): ProcessEvent | undefined {
  const data = JSON.parse(event.data) as Record<string, unknown>;
  if (event.event === 'output')
    return { type: data.stream === 'stderr' ? 'stderr' : 'stdout', offset: data.offset as number, data: Buffer.from(data.data as string, 'base64') };
  if (event.event === 'dropped') return { type: 'dropped', offset: data.offset as number, bytes: data.bytes as number };
  if (event.event === 'exit') return { type: 'exit', ...(data as unknown as ProcessExitInfo & { outputBytes: number }) };
  return undefined;
}
