import type { Logger } from 'pino';
import type { SessionRegistry } from './registry.js';
import type { Session } from './session.js';
import type { EndReason } from './session-record.js';
import { toView, type SessionView } from './session-view.js';
import type { SessionStore } from './store.js';
import type { TenantLimits } from './tenant-limits.js';
import { changedLifetime, expiry, idleDeadline, pausedUntil } from './timeouts.js';

/** Persist a moving expiry at most this often: an action must not pay a disk write. */
const EXPIRY_PERSIST_INTERVAL_MS = 30_000;
const REAPER_INTERVAL_MS = 1_000;
/** A transfer's flowing bytes touch the session at most this often. */
const TRANSFER_TOUCH_INTERVAL_MS = 1_000;

/** What a client may change on a live session (PATCH /v1/sessions/:id). */
export interface SessionTimeoutUpdate {
  timeoutSeconds?: number;
  maxLifetimeSeconds?: number;
}

export interface ClockOptions {
  registry: SessionRegistry;
  store: SessionStore;
  /** Each tenant's longest lifetime (a PATCH may not go past it; tenant-limits.ts). */
  limits: TenantLimits;
  /** Ends a session whose idle timeout or lifetime has run out. */
  expire: (id: string, reason: EndReason) => void;
  log: Logger;
  /** How often the reaper looks (default 1 s; unit tests pass less). */
  reaperIntervalMs?: number;
  /** Pauses a session whose idle timeout ran out and whose onIdle is "pause" (pause.ts). */
  idlePause?: (id: string) => void;
}

/**
 * A session's two clocks: the idle timeout, which activity moves, and the lifetime, which
 * nothing but a PATCH does. The reaper ends sessions whose clock has run out; a session
 * running a long action (inFlight) is not idle.
 */
export class SessionClocks {
  private reaper: NodeJS.Timeout | undefined;

  constructor(private readonly opts: ClockOptions) {}

  start(): void {
    this.reaper = setInterval(() => this.reapExpired(), this.opts.reaperIntervalMs ?? REAPER_INTERVAL_MS);
    this.reaper.unref();
  }

  stop(): void {
    if (this.reaper) clearInterval(this.reaper);
  }

  /** Activity moves the idle deadline; it reaches the store at most every 30 s. */
  touch(session: Session): void {
    const now = Date.now();
    session.record.expiresAt = idleDeadline(session.record, now);
    if (now - session.expiryPersistedAt > EXPIRY_PERSIST_INTERVAL_MS) {
      session.expiryPersistedAt = now;
      this.opts.store.update(session.record);
    }
  }

  /**
   * "Still here": moves the idle deadline to now + the idle timeout (first set to
   * `timeoutSeconds` when given), never past the lifetime's end.
   */
  keepalive(id: string, timeoutSeconds?: number): SessionView {
    return this.updateTimeouts(id, timeoutSeconds === undefined ? {} : { timeoutSeconds });
  }

  /**
   * Changes a live session's idle timeout and/or lifetime (within the orchestrator's
   * maximum); counts as activity. Stored at once: the client was told its new deadline.
   */
  updateTimeouts(id: string, update: SessionTimeoutUpdate): SessionView {
    const session = this.opts.registry.ready(id);
    const record = session.record;
    const now = Date.now();
    // Checked before anything changes: a rejected update changes nothing.
    const lifetime =
      update.maxLifetimeSeconds === undefined
        ? record.maxLifetimeSeconds
        : changedLifetime(
            record,
            update.maxLifetimeSeconds,
            this.opts.limits.of(record.tenant).maxLifetimeSeconds,
            now,
            this.opts.limits.lifetimeOf(record.tenant),
          );
    record.maxLifetimeSeconds = lifetime;
    if (update.timeoutSeconds !== undefined) record.timeoutSeconds = update.timeoutSeconds;
    record.expiresAt = idleDeadline(record, now);
    session.expiryPersistedAt = now;
    record.updatedAt = new Date(now).toISOString();
    this.opts.store.update(record);
    return toView(record);
  }

  /**
   * For a transfer in progress: a function to call as its bytes flow, which counts as
   * activity (at most once a second). A stalled transfer stops calling it, and the idle
   * timeout runs again: a client that stops reading does not keep a sandbox forever.
   */
  transferActivity(id: string): () => void {
    const session = this.opts.registry.find(id);
    let last = 0;
    return () => {
      const now = Date.now();
      if (!session || now - last < TRANSFER_TOUCH_INTERVAL_MS || session.record.state !== 'ready') return;
      last = now;
      this.touch(session);
    };
  }

  /**
   * Runs a request's work with the session marked busy: a long action or tool call (a bash
   * command, hold_key, wait) is not cut by the idle timeout while it runs, and its end
   * counts as activity. The lifetime still applies. An unknown session just runs the work,
   * which reports it.
   */
  async whileBusy<T>(id: string, work: () => Promise<T>): Promise<T> {
    const session = this.opts.registry.find(id);
    if (!session) return work();
    session.inFlight++;
    try {
      return await work();
    } finally {
      session.inFlight--;
      if (session.record.state === 'ready') this.touch(session);
    }
  }

  /** One sweep of the reaper (the interval calls it; so may a test). */
  reapExpired(): void {
    const now = Date.now();
    for (const session of this.opts.registry.all()) {
      // A pause or resume under way is left to finish; the next sweep looks again.
      if (session.transition) continue;
      if (session.record.state === 'paused') {
        this.reapPaused(session, now);
        continue;
      }
      if (session.record.state !== 'ready' && session.record.state !== 'failed') continue;
      const reason = expiry(session.record, now, session.inFlight > 0);
      if (!reason) continue;
      if (reason === 'idle_timeout' && session.record.onIdle === 'pause' && session.record.state === 'ready' && this.opts.idlePause) {
        this.opts.log.child({ sessionId: session.id, tenant: session.record.tenant }).info('session idle timeout reached; pausing (onIdle: pause)');
        this.opts.idlePause(session.id);
        continue;
      }
      this.opts.log
        .child({ sessionId: session.id, tenant: session.record.tenant })
        .info({ reason }, `session ${reason === 'max_lifetime' ? 'maximum lifetime' : 'idle timeout'} reached; destroying`);
      this.opts.expire(session.id, reason);
    }
  }

  /**
   * A paused session is kept its pausedRetentionSeconds (its tenant's, fixed at its create as
   * its lifetime is: a changed setting does not cut short a pause a client was told), then destroyed.
   */
  private reapPaused(session: Session, now: number): void {
    const { record } = session;
    const until = pausedUntil(record) ?? Date.parse(record.updatedAt) + record.pausedRetentionSeconds * 1000;
    if (now < until) return;
    this.opts.log
      .child({ sessionId: session.id, tenant: record.tenant })
      .info({ retentionSeconds: record.pausedRetentionSeconds }, 'paused session kept for its retention; destroying');
    this.opts.expire(session.id, 'paused_retention');
  }
}
