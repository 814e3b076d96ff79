import { setTimeout as sleep } from 'node:timers/promises';
import { DisplayNotReadyError } from '../computer/desktop.js';
import { vncServerFor } from '../guest/contract.js';
import type { AttachmentContext } from '../tools/session-access.js';
import type { GuestChannel, GuestTransport } from '../transport/index.js';

/** How long a freshly started x11vnc gets to listen on the guest's loopback. */
const VNC_START_TIMEOUT_MS = 8_000;
const VNC_POLL_MS = 100;

/** What the tunnel needs of a session: its connection, its display, and a per-session attachment. */
export interface TunnelSessions {
  displayOf(id: string): number;
  /** True when the session's own programs start its X server (the xfce template). */
  displayStartedBySession(id: string): boolean;
  connection(id: string): GuestTransport;
  attachment<T>(id: string, name: string, create: (ctx: AttachmentContext) => Promise<T> | T): Promise<T>;
}

/**
 * A channel to the guest's VNC server through the session's SSH connection (direct-tcpip to
 * 127.0.0.1:5900 in the guest: nothing new listens outside the guest's loopback). The server
 * is started on demand, once per session, on a channel of that connection, and stopped with
 * the session (closing its channel ends x11vnc, whose parent is that channel's sshd).
 */
export async function openVncChannel(sessions: TunnelSessions, sessionId: string): Promise<GuestChannel> {
  const connection = sessions.connection(sessionId);
  const display = sessions.displayOf(sessionId);
  const bySession = sessions.displayStartedBySession(sessionId);
  const { command, port } = vncServerFor(display, bySession ? 'session' : 'init');
  const first = await connection.forwardToGuestLoopback(port).catch(() => undefined);
  if (first) return first;
  // A display the session starts itself may not be there yet: x11vnc would exit at once, and
  // the view wait for nothing. Say so instead (the page can be reloaded once it answers).
  if (bySession && (await connection.exec(`DISPLAY=:${display} exec xdpyinfo >/dev/null 2>&1`, { timeoutMs: 5_000, maxOutputBytes: 1024 })).exitCode !== 0) {
    throw new DisplayNotReadyError(display);
  }
  const server = await sessions.attachment(sessionId, 'vnc-server', async ({ connection: conn, cleanup }) => {
    const made = new VncServer(conn, command);
    await cleanup.push('vnc server', async () => made.stop());
    return made;
  });
  await server.ensureRunning();
  const deadline = Date.now() + VNC_START_TIMEOUT_MS;
  let lastError: unknown;
  while (Date.now() < deadline) {
    try {
      return await connection.forwardToGuestLoopback(port);
    } catch (err) {
      lastError = err;
      await sleep(VNC_POLL_MS);
    }
  }
  throw new Error(`the guest's VNC server did not listen within ${VNC_START_TIMEOUT_MS} ms (${(lastError as Error | undefined)?.message ?? 'no answer'})`);
}

/**
 * The session's x11vnc, on a channel of its SSH connection. On a display the session starts
 * itself, x11vnc ends with that X server (the SDK may stop and start it): the next view starts
 * it again rather than waiting for a server that is gone.
 */
class VncServer {
  private channel: GuestChannel | undefined;
  private stopped = false;
  /** A start under way: two views opened at once start one server. */
  private starting: Promise<void> | undefined;

  constructor(
    private readonly connection: GuestTransport,
    private readonly command: string,
  ) {}

  async ensureRunning(): Promise<void> {
    if (this.channel || this.stopped) return;
    this.starting ??= this.start().finally(() => {
      this.starting = undefined;
    });
    return this.starting;
  }

  private async start(): Promise<void> {
    const channel = await this.connection.spawn(this.command);
    this.channel = channel;
    // x11vnc's chatter is not read by anyone: drained so its channel never stalls on a full window.
    channel.on('data', () => undefined);
    channel.stderr.on('data', () => undefined);
    channel.once('close', () => {
      if (this.channel === channel) this.channel = undefined;
    });
  }

  stop(): void {
    this.stopped = true;
    this.channel?.close();
    this.channel = undefined;
  }
}
