import { InvalidRequestError } from '../errors.js';
import type { EndReason, SessionRecord } from './session-record.js';

/**
 * A session's two clocks, as pure functions of its record:
 * - the idle timeout (`timeoutSeconds`): destroyed that long after its last activity;
 *   activity and keepalives move `expiresAt`;
 * - the maximum lifetime (`maxLifetimeSeconds`, counted from `createdAt`): a hard end that
 *   nothing moves past its tenant's maximum (tenant-limits.ts), so a client cannot keep a
 *   sandbox forever.
 * `expiresAt` never lies beyond the lifetime's end: it is when the session ends unless used.
 */

/** What the lifetime is counted from: its start, its length, and the time it spent paused (not counted). */
export type LifetimeFields = Pick<SessionRecord, 'createdAt' | 'maxLifetimeSeconds'> & { pausedMs?: number };

/**
 * When the session's lifetime ends, in ms since the epoch, as of its last resume: the time it
 * spent paused is added (the lifetime counts running time only; a paused session's own limit
 * is pausedRetentionSeconds).
 */
export function lifetimeEnd(record: LifetimeFields): number {
  return Date.parse(record.createdAt) + record.maxLifetimeSeconds * 1000 + (record.pausedMs ?? 0);
}

/** The idle deadline after activity at `now`, capped by the lifetime's end. */
export function idleDeadline(record: LifetimeFields & Pick<SessionRecord, 'timeoutSeconds'>, now: number): string {
  return new Date(Math.min(now + record.timeoutSeconds * 1000, lifetimeEnd(record))).toISOString();
}

/**
 * The lifetime a client asks for, checked against its tenant's maximum (which is also the
 * default; `whose` says where that maximum comes from). Beyond it is a 400 that says the limit,
 * never a silent clamp: a client that asked for 2 h must not discover at minute 61 that it got 1 h.
 */
export function resolveLifetime(requested: number | undefined, maximum: number, whose = "this orchestrator's maximum lifetime"): number {
  if (requested === undefined) return maximum;
  if (requested > maximum) throw new InvalidRequestError(`maxLifetimeSeconds must be at most ${maximum} (${whose}), got ${requested}`);
  return requested;
}

/** The paused retention a client asks for: at most its tenant's (the default), as the lifetime is. */
export function resolveRetention(requested: number | undefined, maximum: number, whose = "this orchestrator's paused retention"): number {
  if (requested === undefined) return maximum;
  if (requested > maximum) throw new InvalidRequestError(`pausedRetentionSeconds must be at most ${maximum} (${whose}), got ${requested}`);
  return requested;
}

/**
 * A new lifetime for a live session: within the maximum, and still ahead of its age, so a
 * change never ends a session by surprise (DELETE does that).
 */
export function changedLifetime(
  record: Pick<SessionRecord, 'createdAt'> & { pausedMs?: number },
  requested: number,
  maximum: number,
  now: number,
  whose?: string,
): number {
  const seconds = resolveLifetime(requested, maximum, whose);
  // Its age in running time: paused time is not counted against the lifetime.
  const ageSeconds = Math.ceil((now - Date.parse(record.createdAt) - (record.pausedMs ?? 0)) / 1000);
  if (seconds <= ageSeconds) {
    throw new InvalidRequestError(`maxLifetimeSeconds must be more than the session's age (${ageSeconds} s), got ${seconds}`);
  }
  return seconds;
}

/**
 * Whether the reaper ends the session now, and why. The lifetime ends it whatever it is
 * doing; the idle timeout only when no long action or transfer is in progress (`busy`).
 */
export function expiry(record: LifetimeFields & Pick<SessionRecord, 'expiresAt'>, now: number, busy: boolean): EndReason | undefined {
  if (now >= lifetimeEnd(record)) return 'max_lifetime';
  if (!busy && now >= Date.parse(record.expiresAt)) return 'idle_timeout';
  return undefined;
}

/** When a paused session is destroyed if it is not resumed (ms since the epoch); undefined while it runs. */
export function pausedUntil(record: Pick<SessionRecord, 'paused' | 'pausedRetentionSeconds'>): number | undefined {
  return record.paused ? Date.parse(record.paused.since) + record.pausedRetentionSeconds * 1000 : undefined;
}
