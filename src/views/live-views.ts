import type { Logger } from 'pino';
import type { WebSocket } from 'ws';
import { InvalidRequestError, NotFoundError, OrchestratorError, SessionPausedError, type ErrorCode } from '../errors.js';
import { proxyRfb, type ViewerEnd, type ViewerLimits, type ViewerLink } from './rfb-proxy.js';
import { Takeovers, type ControlHold, type ControlTarget } from './takeover.js';
import { ViewerSlots } from './viewer-slots.js';
import { openVncChannel, type TunnelSessions } from './vnc-tunnel.js';
import type { RefusedToken, ViewGrant, ViewMode, ViewTokens } from './view-tokens.js';

/** What the live views need of the session layer. */
export interface LiveViewSessions extends TunnelSessions, ControlTarget {
  /** The tenant of a session (live or ended), undefined if there is none. */
  tenantOf(id: string): string | undefined;
}

export interface LiveViewSettings {
  defaultTtlSeconds: number;
  maxTtlSeconds: number;
  /** Browsers connected to one session at once (SBX_MAX_VIEWERS_PER_SESSION). */
  maxViewersPerSession: number;
  /** Browsers connected to all of one tenant's sessions at once (SBX_MAX_VIEWERS_PER_TENANT). */
  maxViewersPerTenant: number;
  /** How long a takeover outlives its last viewer (a reload keeps it). */
  takeoverGraceMs: number;
  viewer: ViewerLimits;
}

export interface LiveViewHooks {
  viewerConnected(): void;
  viewerDisconnected(): void;
  bytes(direction: 'to_guest' | 'to_viewer', bytes: number): void;
}

/** A token that opens nothing: the page says why and what to do next. */
export class ViewTokenError extends OrchestratorError {
  constructor(readonly refused: RefusedToken | 'session_ended') {
    const text: Record<ViewTokenError['refused'], string> = {
      unknown: 'this live-view link is not valid: ask for a new one (POST /v1/sessions/:id/views, or `sbx view <id>`)',
      expired: 'this live-view link has expired: ask for a new one (POST /v1/sessions/:id/views, or `sbx view <id>`)',
      revoked: 'this live-view link was revoked: ask its owner for a new one',
      session_ended: 'the session of this live-view link has ended: there is nothing left to watch',
    };
    const code: Record<ViewTokenError['refused'], ErrorCode> = {
      unknown: 'view_unknown',
      expired: 'view_expired',
      revoked: 'view_revoked',
      session_ended: 'view_session_ended',
    };
    super(code[refused], text[refused]);
  }
}

/** A grant as the API lists it: with whether a browser is on it and whether it holds the desktop. */
export interface ViewListing extends Omit<ViewGrant, 'tenant'> {
  viewersConnected: number;
  holdsControl: boolean;
}

/**
 * Live views of sessions: grants (view-tokens.ts), the viewers connected on them
 * (rfb-proxy.ts, through vnc-tunnel.ts) and takeovers (takeover.ts). A grant dies with its
 * session: the first grant of a session registers a release on the session's cleanup stack
 * that revokes them all and cuts their viewers.
 */
export class LiveViews {
  private readonly links = new Map<string, Set<ViewerLink>>();
  private readonly slots: ViewerSlots;
  readonly takeovers: Takeovers;

  constructor(
    private readonly tokens: ViewTokens,
    private readonly sessions: LiveViewSessions,
    private readonly settings: LiveViewSettings,
    private readonly hooks: LiveViewHooks,
    private readonly log: Logger,
  ) {
    this.slots = new ViewerSlots(settings);
    this.takeovers = new Takeovers(sessions, settings.takeoverGraceMs, (sessionId, viewId, why) =>
      log.info({ sessionId, viewId, why }, 'live view handed the desktop back to the agent'),
    );
  }

  /** A new grant on a ready session; the token is in the answer only. */
  async create(sessionId: string, tenant: string, mode: ViewMode, ttlSeconds: number | undefined): Promise<{ grant: ViewGrant; token: string }> {
    const ttl = ttlSeconds ?? this.settings.defaultTtlSeconds;
    if (ttl > this.settings.maxTtlSeconds) throw new InvalidRequestError(`ttlSeconds must be at most ${this.settings.maxTtlSeconds}`);
    // Throws 404/409/410 unless the session is ready; registers the release once per session.
    await this.sessions.attachment(sessionId, 'live-views', async ({ cleanup }) => {
      await cleanup.push('live views', () => this.endSession(sessionId));
      return true;
    });
    const made = this.tokens.create({ sessionId, tenant, mode, ttlSeconds: ttl });
    this.tokens.prune();
    return made;
  }

  list(sessionId: string): ViewListing[] {
    const holder = this.takeovers.holder(sessionId);
    return this.tokens.listUsable(sessionId).map(({ tenant: _tenant, ...grant }) => ({
      ...grant,
      viewersConnected: this.links.get(grant.viewId)?.size ?? 0,
      holdsControl: holder?.heldBy === grant.viewId,
    }));
  }

  /** Revokes a grant: its viewers are cut and its takeover ends. */
  revoke(sessionId: string, viewId: string): void {
    if (!this.tokens.find(sessionId, viewId)) throw new NotFoundError(`view ${viewId} of session ${sessionId} does not exist`);
    this.tokens.revoke(viewId);
    this.cutView(viewId, 'revoked');
    this.takeovers.release(sessionId, viewId, 'revoked');
  }

  /** The grant a token opens, on a session that is still live, or the error that says why not. */
  resolve(token: string): ViewGrant {
    const found = this.tokens.resolve(token);
    if (typeof found === 'string') throw new ViewTokenError(found);
    // The session's tenant is looked up again: a grant opens only its own tenant's session.
    if (this.sessions.tenantOf(found.sessionId) !== found.tenant) throw new ViewTokenError('unknown');
    try {
      this.sessions.connection(found.sessionId);
    } catch (err) {
      // A paused desktop's view stays valid: opening its socket resumes it (autoResume) or
      // is refused 409 there, never "ended".
      if (err instanceof SessionPausedError) return found;
      throw new ViewTokenError('session_ended');
    }
    return found;
  }

  /** A grant of `sessionId` by its id (the API's takeover and hand-back). */
  grantOf(sessionId: string, viewId: string): ViewGrant {
    const grant = this.tokens.listUsable(sessionId).find((g) => g.viewId === viewId);
    if (!grant) throw new NotFoundError(`view ${viewId} of session ${sessionId} does not exist (or has expired or been revoked)`);
    return grant;
  }

  takeover(grant: ViewGrant): ControlHold {
    if (grant.mode !== 'control') throw new InvalidRequestError(`view ${grant.viewId} is view-only: only a control view can take over`);
    const outcome = this.takeovers.take(grant, this.links.get(grant.viewId)?.size ?? 0);
    if (!outcome.taken) throw new OrchestratorError('control_held', `view ${outcome.hold.heldBy} holds the session since ${outcome.hold.since}`);
    return outcome.hold;
  }

  handback(grant: ViewGrant): void {
    this.takeovers.release(grant.sessionId, grant.viewId, 'handback');
  }

  /**
   * A viewer slot for a browser about to connect on `grant` (per session and per tenant), or
   * a 429: called before the WebSocket upgrade, synchronously, so the check and the taking
   * are one step. The caller releases it when the browser's socket closes (and `connect`
   * releases it on its own way out: the release counts once).
   */
  admit(grant: ViewGrant): () => void {
    return this.slots.take(grant.sessionId, grant.tenant);
  }

  /** Browsers holding a viewer slot on the session (connected, or connecting). */
  viewersOf(sessionId: string): number {
    return this.slots.ofSession(sessionId);
  }

  /**
   * Joins a browser to its grant's session: the tunnel is opened (x11vnc started if need
   * be) and the RFB proxied. The grant was checked before the upgrade and is checked again
   * here; nothing flows before both passed. `release` is the viewer slot `admit` gave.
   */
  async connect(grant: ViewGrant, ws: WebSocket, release: () => void): Promise<void> {
    try {
      await this.proxy(grant, ws);
    } finally {
      release();
    }
  }

  private async proxy(grant: ViewGrant, ws: WebSocket): Promise<void> {
    const log = this.log.child({ sessionId: grant.sessionId, viewId: grant.viewId, mode: grant.mode });
    // Bytes sent before the tunnel is up would be lost: the browser waits for the guest's version anyway.
    let channel;
    try {
      channel = await openVncChannel(this.sessions, grant.sessionId);
    } catch (err) {
      log.warn({ err }, 'live view could not reach the guest VNC server');
      // A display the session starts itself (xfce) that is not up yet: say so (a close reason is at most 123 bytes).
      const notReady = err instanceof OrchestratorError && err.code === 'display_not_ready';
      ws.close(1011, notReady ? "the session's display does not answer yet: reload once it is started" : 'the desktop could not be reached');
      return;
    }
    if (ws.readyState !== ws.OPEN) {
      channel.close();
      return;
    }
    // Revoked, expired (or its session ended) while the tunnel opened: the revoke cut the
    // viewers it knew of, and this one was not among them yet.
    if (!this.tokens.listUsable(grant.sessionId).some((usable) => usable.viewId === grant.viewId)) {
      channel.close();
      ws.close(1008, Date.parse(grant.expiresAt) <= Date.now() ? 'this live-view link has expired: ask for a new one' : 'this live view was revoked');
      return;
    }
    this.hooks.viewerConnected();
    const link = proxyRfb(ws, channel, grant.mode, this.settings.viewer, {
      onBytes: (direction, bytes) => this.hooks.bytes(direction, bytes),
      onEnd: (reason: ViewerEnd, detail) => {
        const level = reason === 'viewer_closed' || reason === 'revoked' || reason === 'session_ended' || reason === 'expired' ? 'info' : 'warn';
        log[level]({ reason, detail }, 'live viewer disconnected');
      },
    });
    const set = this.links.get(grant.viewId) ?? new Set<ViewerLink>();
    set.add(link);
    this.links.set(grant.viewId, set);
    this.takeovers.viewerConnected(grant.sessionId, grant.viewId);
    const expiry = setTimeout(() => link.cut('expired'), Math.max(0, Date.parse(grant.expiresAt) - Date.now()));
    expiry.unref();
    log.info('live viewer connected');
    await link.ended;
    clearTimeout(expiry);
    this.hooks.viewerDisconnected();
    set.delete(link);
    if (set.size === 0) {
      this.links.delete(grant.viewId);
      this.takeovers.lastViewerGone(grant.sessionId, grant.viewId);
    }
  }

  private cutView(viewId: string, reason: ViewerEnd): void {
    for (const link of this.links.get(viewId) ?? []) link.cut(reason);
  }

  /** The session ended: its grants are revoked, their viewers cut, any takeover forgotten. */
  private endSession(sessionId: string): void {
    const grants = this.tokens.listUsable(sessionId);
    this.tokens.revokeSession(sessionId);
    for (const grant of grants) this.cutView(grant.viewId, 'session_ended');
    this.takeovers.release(sessionId, undefined, 'session_ended');
  }
}
