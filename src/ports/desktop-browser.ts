import http from 'node:http';
import type { Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { OrchestratorError } from '../errors.js';
import type { GuestChannel, GuestTransport } from '../transport/index.js';

/** Chromium's DevTools port, on the guest's loopback only (reached through the port routes). */
export const GUEST_CDP_PORT = 9222;
/** How long a starting Chromium gets to answer /json/version. */
const START_TIMEOUT_MS = 30_000;
/** How long a closed Chromium gets to exit after SIGTERM before SIGKILL. */
const STOP_GRACE_MS = 3_000;

export class BrowserUnavailableError extends OrchestratorError {
  constructor(message: string) {
    super('browser_unavailable', message);
  }
}

/** Chromium started but never answered /json/version as it should (it crashed, or something else holds the port). */
export class BrowserStartError extends OrchestratorError {
  constructor(message: string) {
    super('browser_start_failed', message);
  }
}

/**
 * The flags of the desktop's Chromium. DevTools listen on the guest's loopback only; the
 * profile lives in the guest user's home; no first-run dialogs or keyring prompts stand in
 * the way of a script. Chromium's own sandbox needs user namespaces, which a container's
 * guest cannot make: it runs without it, inside the sandbox that is the boundary anyway.
 */
export function chromiumCommand(display: number): string {
  if (!Number.isInteger(display) || display < 0) throw new Error(`bad display number ${display}`);
  const flags = [
    `--remote-debugging-port=${GUEST_CDP_PORT}`,
    '--remote-debugging-address=127.0.0.1',
    '--user-data-dir="$HOME/.config/sbx-chromium"',
    '--no-first-run',
    '--no-default-browser-check',
    '--password-store=basic',
    '--disable-dev-shm-usage',
    '--no-sandbox',
    '--test-type', // no "unsupported flag" bar over the page for --no-sandbox
    '--start-maximized',
    'about:blank',
  ];
  // `echo $$` then exec: the first line is Chromium's own pid, to close it by.
  return `echo $$; DISPLAY=:${display} exec chromium ${flags.join(' ')} >/dev/null 2>&1`;
}

interface Running {
  channel: GuestChannel;
  pid: number;
  /** `/devtools/browser/<id>`: the browser's DevTools WebSocket path. */
  wsPath: string;
  exited: Promise<void>;
}

/**
 * The desktop's Chromium of one session, driven over CDP: started on the session's display
 * (so screenshots, the live view and the recording show it) on a channel of the session's SSH
 * connection, at most one at a time. Calls are serialized: a second start while it runs
 * answers the same browser; after it closed (DELETE, or the window closed in the desktop),
 * the next start starts a new one.
 */
export class DesktopBrowser {
  private running: Running | undefined;
  private queue: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly connection: GuestTransport,
    private readonly display: number,
  ) {}

  /** Starts Chromium unless it runs; its DevTools WebSocket path, and whether it was started now. */
  start(): Promise<{ wsPath: string; started: boolean }> {
    return this.serialized(async () => {
      if (this.running && (await this.version().catch(() => undefined))) return { wsPath: this.running.wsPath, started: false };
      if (this.running) await this.kill(this.running);
      this.running = await this.launch();
      return { wsPath: this.running.wsPath, started: true };
    });
  }

  /** Closes Chromium; false when it was not running. */
  stop(): Promise<boolean> {
    return this.serialized(async () => {
      const running = this.running;
      if (!running) return false;
      await this.kill(running);
      return true;
    });
  }

  private serialized<T>(work: () => Promise<T>): Promise<T> {
    const next = this.queue.then(work, work);
    this.queue = next.catch(() => undefined);
    return next;
  }

  private async launch(): Promise<Running> {
    const found = await this.connection.exec('command -v chromium', { timeoutMs: 10_000, maxOutputBytes: 4096 });
    if (found.exitCode !== 0) throw new BrowserUnavailableError("this session's template has no Chromium (the desktop template has it)");
    const channel = await this.connection.spawn(chromiumCommand(this.display));
    channel.stderr.on('data', () => undefined);
    let exitCode: number | null = null;
    const exited = new Promise<void>((resolve) => {
      channel.on('exit', (code: number | null) => (exitCode = code));
      channel.once('close', () => {
        if (this.running?.channel === channel) this.running = undefined;
        resolve();
      });
    });
    let pid: number;
    try {
      pid = await pidLine(channel, exited, () => exitCode);
    } catch (err) {
      channel.close();
      throw err;
    }
    const deadline = Date.now() + START_TIMEOUT_MS;
    let lastError: unknown;
    while (Date.now() < deadline) {
      if (exitCode !== null || channel.destroyed) break;
      try {
        const version = await this.version();
        const wsPath = new URL(version.webSocketDebuggerUrl).pathname;
        return { channel, pid, wsPath, exited };
      } catch (err) {
        lastError = err;
        await sleep(150);
      }
    }
    await this.kill({ channel, pid, wsPath: '', exited });
    throw new BrowserStartError(
      `Chromium did not answer on its DevTools port within ${START_TIMEOUT_MS} ms (${(lastError as Error | undefined)?.message ?? `it exited with status ${exitCode}`})`,
    );
  }

  /** GET /json/version on the guest's DevTools port, through a channel of the connection. */
  private async version(): Promise<{ webSocketDebuggerUrl: string }> {
    const channel = await this.connection.forward('127.0.0.1', GUEST_CDP_PORT);
    try {
      const body = await new Promise<string>((resolve, reject) => {
        // Our own timer: the channel is no socket (http's `timeout` option would call setTimeout on it).
        const timer = setTimeout(() => req.destroy(new Error('/json/version did not answer within 5 s')), 5_000);
        const req = http.get(
          { path: '/json/version', headers: { host: `127.0.0.1:${GUEST_CDP_PORT}` }, createConnection: () => channel as unknown as Socket },
          (res) => {
            let text = '';
            res.setEncoding('utf8');
            res.on('data', (c: string) => {
              text += c;
              if (text.length > 64 * 1024) req.destroy(new Error('an oversized /json/version answer'));
            });
            res.on('end', () => {
              clearTimeout(timer);
              resolve(text);
            });
            res.on('error', reject);
          },
        );
        req.on('error', (err) => {
          clearTimeout(timer);
          reject(err);
        });
      });
      const parsed = JSON.parse(body) as { webSocketDebuggerUrl?: unknown };
      if (typeof parsed.webSocketDebuggerUrl !== 'string' || !/^ws:\/\/[^/]+\/devtools\/browser\/[A-Za-z0-9-]+$/.test(parsed.webSocketDebuggerUrl)) {
        throw new Error('the DevTools port answered without a browser WebSocket URL');
      }
      return { webSocketDebuggerUrl: parsed.webSocketDebuggerUrl };
    } finally {
      channel.destroy();
    }
  }

  /**
   * SIGTERM to Chromium's whole process group (the launcher's shell was its session leader,
   * and Chromium's zygote and renderers stay in it), SIGKILL after the grace; resolves once
   * no process of the group is left, so that a DELETE's answer means "closed".
   */
  private async kill(running: Running): Promise<void> {
    if (this.running === running) this.running = undefined;
    const group = `-- -${running.pid}`;
    await this.connection.exec(`kill -TERM ${group} 2>/dev/null; true`, { timeoutMs: 5_000 }).catch(() => undefined);
    const gone = await Promise.race([running.exited.then(() => true), sleep(STOP_GRACE_MS).then(() => false)]);
    const script = `${gone ? '' : `kill -KILL ${group} 2>/dev/null; `}for i in $(seq 40); do pgrep -g ${running.pid} >/dev/null || exit 0; sleep 0.05; done; kill -KILL ${group} 2>/dev/null; true`;
    await this.connection.exec(script, { timeoutMs: 10_000 }).catch(() => undefined);
    running.channel.close();
  }
}

/** The launcher's first line (`echo $$`) holds at most this many bytes. */
const PID_LINE_MAX_BYTES = 64;

/**
 * The pid Chromium's launcher prints first. The guest's side decides what comes: anything but
 * a pid line within PID_LINE_MAX_BYTES (checked before it is kept) or START_TIMEOUT_MS fails
 * the start, and the listener goes with it, so nothing more the channel brings is kept.
 */
function pidLine(channel: GuestChannel, exited: Promise<void>, exitCode: () => number | null): Promise<number> {
  return new Promise<number>((resolve, reject) => {
    let text = '';
    let done = false;
    const settle = (err: Error | undefined, pid = 0) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      channel.off('data', onData);
      channel.on('data', () => undefined); // drained, never kept
      if (err) reject(err);
      else resolve(pid);
    };
    const onData = (chunk: Buffer) => {
      // At most one byte past the cap is kept: enough to know the line is too long.
      text += chunk.subarray(0, PID_LINE_MAX_BYTES + 1 - text.length).toString('latin1');
      const line = /^(\d+)\n/.exec(text);
      if (line) settle(undefined, Number(line[1]));
      else if (text.length > PID_LINE_MAX_BYTES) settle(new BrowserStartError("Chromium's launcher said something else than its pid"));
    };
    const timer = setTimeout(() => settle(new BrowserStartError(`Chromium's launcher did not say its pid within ${START_TIMEOUT_MS} ms`)), START_TIMEOUT_MS);
    channel.on('data', onData);
    void exited.then(() => settle(new BrowserStartError(`Chromium exited at once (status ${exitCode()})`)));
  });
}
