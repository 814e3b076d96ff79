import { OrchestratorError } from '../errors.js';

export class PortChannelLimitError extends OrchestratorError {
  constructor(sessionId: string, max: number) {
    super(
      'port_channel_limit',
      `session ${sessionId} has ${max} requests and WebSockets open through its ports, its limit (SBX_PORT_MAX_CHANNELS_PER_SESSION): wait for one to end, then retry`,
      { retryAfterSeconds: 1 },
    );
  }
}

/**
 * Channels open through each session's ports: every proxied request or WebSocket holds one
 * SSH channel (and its window of buffered bytes) for as long as it lives, so a session gets
 * a fixed number; one session's many open requests never take another's.
 */
export class PortChannelSlots {
  private readonly open = new Map<string, number>();

  constructor(private readonly maxPerSession: number) {}

  /** Takes a slot (or throws a 429); the returned function gives it back, once. */
  take(sessionId: string): () => void {
    const count = this.open.get(sessionId) ?? 0;
    if (count >= this.maxPerSession) throw new PortChannelLimitError(sessionId, this.maxPerSession);
    this.open.set(sessionId, count + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const left = (this.open.get(sessionId) ?? 1) - 1;
      if (left <= 0) this.open.delete(sessionId);
      else this.open.set(sessionId, left);
    };
  }

  count(sessionId: string): number {
    return this.open.get(sessionId) ?? 0;
  }
}
