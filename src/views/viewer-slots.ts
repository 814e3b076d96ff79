import { LimitError } from '../errors.js';
import { KeyedSlots, takeAll } from '../util/slots.js';

/** Too many browsers on a session or a tenant: answered before the WebSocket upgrade. */
export class ViewerLimitError extends LimitError {
  constructor(message: string, code: 'session_viewer_limit' | 'tenant_viewer_limit') {
    super(message, code, 5);
  }
}

/**
 * The live-view caps: browsers connected per session and per tenant. A slot is taken when the
 * upgrade request is admitted, in the same synchronous step as the check (before the tunnel
 * to the guest is awaited), and held until that browser's socket closes, so a burst of
 * connections with one token cannot get past the cap, and every way out releases it.
 */
export class ViewerSlots {
  private readonly perSession: KeyedSlots;
  private readonly perTenant: KeyedSlots;

  constructor(limits: { maxViewersPerSession: number; maxViewersPerTenant: number }) {
    this.perSession = new KeyedSlots(() => limits.maxViewersPerSession);
    this.perTenant = new KeyedSlots(() => limits.maxViewersPerTenant);
  }

  /** A slot for one browser on `sessionId` of `tenant`, or a 429 naming the cap. */
  take(sessionId: string, tenant: string): () => void {
    const taken = takeAll([
      [this.perSession, sessionId],
      [this.perTenant, tenant],
    ]);
    if ('release' in taken) return taken.release;
    if (taken.full === 0) {
      throw new ViewerLimitError(
        `too many viewers on session ${sessionId}: ${this.perSession.limit(sessionId)} browsers are connected (SBX_MAX_VIEWERS_PER_SESSION); close one, then retry`,
        'session_viewer_limit',
      );
    }
    throw new ViewerLimitError(
      `too many viewers for tenant "${tenant}": ${this.perTenant.limit(tenant)} browsers are connected to its sessions (SBX_MAX_VIEWERS_PER_TENANT); close one, then retry`,
      'tenant_viewer_limit',
    );
  }

  /** Browsers holding a slot on the session (for tests and listings). */
  ofSession(sessionId: string): number {
    return this.perSession.count(sessionId);
  }
}
