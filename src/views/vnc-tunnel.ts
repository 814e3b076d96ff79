import { setTimeout as sleep } from 'node:timers/promises';
import { GUEST_VNC_PORT, vncServerCommand } from '../guest/contract.js';
import type { AttachmentContext } from '../tools/session-access.js';
import type { GuestChannel, GuestTransport } from '../transport/index.js';

/** How long a freshly started x11vnc gets to listen on the guest's loopback. */
const VNC_START_TIMEOUT_MS = 8_000;
const VNC_POLL_MS = 100;

/** What the tunnel needs of a session: its connection, its display, and a per-session attachment. */
export interface TunnelSessions {
  readonly display: number;
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
  const first = await connection.forwardToGuestLoopback(GUEST_VNC_PORT).catch(() => undefined);
  if (first) return first;
  await sessions.attachment(sessionId, 'vnc-server', async ({ connection: conn, cleanup }) => {
    const server = await conn.spawn(vncServerCommand(sessions.display));
    // x11vnc's chatter is not read by anyone: drained so its channel never stalls on a full window.
    server.on('data', () => undefined);
    server.stderr.on('data', () => undefined);
    await cleanup.push('vnc server', async () => {
      server.close();
    });
    return server;
  });
  const deadline = Date.now() + VNC_START_TIMEOUT_MS;
  let lastError: unknown;
  while (Date.now() < deadline) {
    try {
      return await connection.forwardToGuestLoopback(GUEST_VNC_PORT);
    } catch (err) {
      lastError = err;
      await sleep(VNC_POLL_MS);
    }
  }
  throw new Error(`the guest's VNC server did not listen within ${VNC_START_TIMEOUT_MS} ms (${(lastError as Error | undefined)?.message ?? 'no answer'})`);
}
