import type { GuestChannel } from '../transport/index.js';
import type { WebSocket } from 'ws';
import { ClientFilter, RfbViolation, ServerFilter } from './rfb-filter.js';
import type { ViewMode } from './view-tokens.js';

/** How much one viewer may have waiting for its browser; the guest is paused above it. */
export interface ViewerLimits {
  /** Above this the guest's channel is paused until the browser catches up. */
  highWaterBytes: number;
  /** A viewer with this much still unsent is cut at once (the guest ignored the pause). */
  maxBufferedBytes: number;
  /** A viewer that has not caught up for this long is cut (a browser that stopped reading). */
  stallMs: number;
}

/**
 * A viewer that stops reading costs the orchestrator what waits in its WebSocket (the guest
 * is paused at 1 MiB, so it holds little more) and the SSH channel's window the guest fills
 * meanwhile (2 MiB): 6.6 MiB measured (live-view.test.ts), against 11.1 with a 4 MiB mark.
 * 1 MiB still keeps ~80 Mbit/s in flight to a browser 100 ms away; a frame larger than it
 * simply crosses in parts. The cap is for a guest that would ignore the pause.
 */
export const DEFAULT_VIEWER_LIMITS: ViewerLimits = { highWaterBytes: 1024 * 1024, maxBufferedBytes: 4 * 1024 * 1024, stallMs: 20_000 };

/** Why a viewer's connection ended, for its close frame, the log and the tests. */
export type ViewerEnd = 'viewer_closed' | 'guest_closed' | 'client_protocol' | 'guest_protocol' | 'slow_viewer' | 'revoked' | 'session_ended' | 'expired';

/** Input a guest may leave unread before its viewer is cut (a few clipboard pastes). */
const MAX_UNREAD_BY_GUEST_BYTES = 1024 * 1024;

/** WebSocket close codes: 1000 normal, 1008 policy (input refused, revoked), 1011 server side, 4xxx ours. */
const CLOSE_CODES: Record<ViewerEnd, number> = {
  viewer_closed: 1000,
  guest_closed: 1011,
  client_protocol: 1008,
  guest_protocol: 1011,
  slow_viewer: 4008,
  revoked: 4001,
  session_ended: 4002,
  expired: 4003,
};

export interface ProxyHooks {
  /** Bytes that crossed the proxy, by direction. */
  onBytes(direction: 'to_guest' | 'to_viewer', bytes: number): void;
  onEnd(reason: ViewerEnd, detail?: string): void;
}

/** One viewer's proxy; `cut` ends it from outside (revoke, session end, expiry). */
export interface ViewerLink {
  cut(reason: ViewerEnd): void;
  readonly ended: Promise<ViewerEnd>;
}

/**
 * Joins a browser's WebSocket to a channel to the guest's VNC server, with the RFB parsed
 * in between (rfb-filter.ts): the browser's messages are checked and, for a view token,
 * stripped of input; the guest's bytes are bounded per viewer (paused above the high water
 * mark, cut above the hard cap or after a long stall), so a guest that floods, or a browser
 * that stops reading, costs the host a bounded amount and ends only that viewer.
 */
export function proxyRfb(ws: WebSocket, channel: GuestChannel, mode: ViewMode, limits: ViewerLimits, hooks: ProxyHooks): ViewerLink {
  const client = new ClientFilter(mode);
  const server = new ServerFilter();
  let finished: ViewerEnd | undefined;
  let stallTimer: NodeJS.Timeout | undefined;
  let resolveEnded: (reason: ViewerEnd) => void = () => undefined;
  const ended = new Promise<ViewerEnd>((resolve) => (resolveEnded = resolve));

  const end = (reason: ViewerEnd, detail?: string) => {
    if (finished) return;
    finished = reason;
    clearTimeout(stallTimer);
    channel.removeAllListeners('data');
    channel.on('error', () => undefined);
    channel.close();
    if (ws.readyState === ws.OPEN || ws.readyState === ws.CONNECTING) {
      ws.close(CLOSE_CODES[reason], reason);
      // A browser that does not answer the close within a moment is dropped.
      setTimeout(() => ws.terminate(), 2_000).unref();
    }
    hooks.onEnd(reason, detail);
    resolveEnded(reason);
  };

  const resumeIfDrained = () => {
    if (finished || ws.bufferedAmount > limits.highWaterBytes / 2) return;
    clearTimeout(stallTimer);
    stallTimer = undefined;
    channel.resume();
  };

  channel.on('data', (chunk: Buffer) => {
    if (finished) return;
    let out: Buffer[];
    try {
      out = server.push(chunk);
    } catch (err) {
      return end(err instanceof RfbViolation ? 'guest_protocol' : 'guest_closed', (err as Error).message);
    }
    for (const bytes of out) {
      hooks.onBytes('to_viewer', bytes.length);
      ws.send(bytes, { binary: true }, resumeIfDrained);
    }
    if (ws.bufferedAmount > limits.maxBufferedBytes) return end('slow_viewer', `${ws.bufferedAmount} bytes waiting for the viewer`);
    if (ws.bufferedAmount > limits.highWaterBytes && !stallTimer) {
      channel.pause();
      stallTimer = setTimeout(() => end('slow_viewer', `the viewer read nothing for ${limits.stallMs} ms`), limits.stallMs);
      stallTimer.unref();
    }
  });
  channel.on('close', () => end('guest_closed'));
  channel.on('error', (err: Error) => end('guest_closed', err.message));

  ws.on('message', (data: Buffer, isBinary: boolean) => {
    if (finished) return;
    if (!isBinary) return end('client_protocol', 'text frames are not RFB');
    let out: Buffer[];
    try {
      out = client.push(data);
    } catch (err) {
      return end('client_protocol', (err as Error).message);
    }
    for (const bytes of out) {
      hooks.onBytes('to_guest', bytes.length);
      channel.write(bytes);
    }
    // A guest that stops reading must not make the host hold a control viewer's input.
    if (channel.writableLength > MAX_UNREAD_BY_GUEST_BYTES) end('guest_protocol', 'the guest VNC server stopped reading');
  });
  ws.on('close', () => end('viewer_closed'));
  ws.on('error', (err) => end('viewer_closed', err.message));

  return { cut: (reason) => end(reason), ended };
}
