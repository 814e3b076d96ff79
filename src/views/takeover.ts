import type { ControlHold } from '../sessions/session.js';
import type { ViewGrant } from './view-tokens.js';

export type { ControlHold };

/** What a takeover needs of the session layer: to mark the session held, and free. */
export interface ControlTarget {
  setControl(sessionId: string, hold: ControlHold | undefined): void;
}

interface Held {
  hold: ControlHold;
  /** Ends the hold when the view's token expires. */
  expiry: NodeJS.Timeout;
  /** Ends the hold when no viewer of the view has been connected for the grace period. */
  grace: NodeJS.Timeout | undefined;
}

/** Why a hold ended (logged; the page shows the outcome). */
export type HoldEnd = 'handback' | 'revoked' | 'expired' | 'viewer_gone' | 'session_ended';

/**
 * Human takeover: a `control` view may hold its session's desktop, and while it does the
 * agent's actions answer 409 human_in_control (sessions/session-actions.ts). A hold ends on
 * hand-back, when the view is revoked or its token expires, when the session ends, and
 * `graceMs` after its last viewer disconnected (a closed tab must not strand the agent; a
 * reload or a short network drop within the grace keeps the hold).
 */
export class Takeovers {
  private readonly held = new Map<string, Held>();

  constructor(
    private readonly target: ControlTarget,
    private readonly graceMs: number,
    private readonly onEnd: (sessionId: string, viewId: string, why: HoldEnd) => void = () => undefined,
  ) {}

  holder(sessionId: string): ControlHold | undefined {
    return this.held.get(sessionId)?.hold;
  }

  /**
   * `grant` takes its session's desktop. Idempotent for the holder; another view's hold is
   * not taken away (returns that hold so the caller can say who has it).
   */
  take(grant: ViewGrant, viewersConnected: number, now = Date.now()): { taken: true; hold: ControlHold } | { taken: false; hold: ControlHold } {
    const current = this.held.get(grant.sessionId);
    if (current && current.hold.heldBy !== grant.viewId) return { taken: false, hold: current.hold };
    if (current) return { taken: true, hold: current.hold };
    const hold: ControlHold = { heldBy: grant.viewId, since: new Date(now).toISOString() };
    this.target.setControl(grant.sessionId, hold);
    const expiry = setTimeout(() => this.release(grant.sessionId, grant.viewId, 'expired'), Math.max(0, Date.parse(grant.expiresAt) - now));
    expiry.unref();
    const held: Held = { hold, expiry, grace: undefined };
    this.held.set(grant.sessionId, held);
    // Taken through the API with no page open: the same grace as a closed page.
    if (viewersConnected === 0) this.startGrace(grant.sessionId, held);
    return { taken: true, hold };
  }

  /** Ends `viewId`'s hold of the session, if it has one; true if it had. */
  release(sessionId: string, viewId: string | undefined, why: HoldEnd): boolean {
    const held = this.held.get(sessionId);
    if (!held || (viewId !== undefined && held.hold.heldBy !== viewId)) return false;
    clearTimeout(held.expiry);
    clearTimeout(held.grace);
    this.held.delete(sessionId);
    if (why !== 'session_ended') this.target.setControl(sessionId, undefined);
    this.onEnd(sessionId, held.hold.heldBy, why);
    return true;
  }

  /** A viewer of `viewId` connected: a pending grace is called off. */
  viewerConnected(sessionId: string, viewId: string): void {
    const held = this.held.get(sessionId);
    if (!held || held.hold.heldBy !== viewId) return;
    clearTimeout(held.grace);
    held.grace = undefined;
  }

  /** The last viewer of `viewId` disconnected: the hold ends unless one is back within the grace. */
  lastViewerGone(sessionId: string, viewId: string): void {
    const held = this.held.get(sessionId);
    if (!held || held.hold.heldBy !== viewId) return;
    this.startGrace(sessionId, held);
  }

  private startGrace(sessionId: string, held: Held): void {
    clearTimeout(held.grace);
    held.grace = setTimeout(() => this.release(sessionId, held.hold.heldBy, 'viewer_gone'), this.graceMs);
    held.grace.unref();
  }
}
