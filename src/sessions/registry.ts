import type { RecordingStatus } from '../recording/session-recorder.js';
import { NotFoundError, SessionGoneError, SessionPausedError, SessionStateError } from '../errors.js';
import { hasDesktop, type ReadySession, type Session } from './session.js';
import { toView, type SessionView } from './session-view.js';
import type { SessionStore } from './store.js';

/**
 * The live sessions of this orchestrator, by id, and what a request may do with one: `ready`
 * hands out only a session whose desktop answers, and says in the error why not (404 unknown,
 * 410 gone, 409 not ready). A session that has ended is answered from the store.
 */
export class SessionRegistry {
  private readonly live = new Map<string, Session>();
  /** A session's recording as this run knows it, shown in its view (set by the manager). */
  recordingOf: (id: string) => RecordingStatus | undefined = () => undefined;

  constructor(private readonly store: SessionStore) {}

  add(session: Session): void {
    this.live.set(session.id, session);
  }

  remove(id: string): void {
    this.live.delete(id);
  }

  /** The live session `id`, whatever its state, or undefined. */
  find(id: string): Session | undefined {
    return this.live.get(id);
  }

  all(): Session[] {
    return [...this.live.values()];
  }

  ids(): string[] {
    return [...this.live.keys()];
  }

  /** A ready session with its desktop, or the 404/409/410 that says why there is none. */
  ready(id: string): ReadySession {
    const session = this.live.get(id);
    if (!session) {
      const stored = this.store.get(id);
      if (!stored) throw new NotFoundError(`session ${id} does not exist`);
      if (stored.state === 'failed') throw new SessionGoneError(`session ${id} is gone${stored.error ? `: ${stored.error}` : ''}`);
      throw new SessionStateError(`session ${id} is ${stored.state}${stored.error ? `: ${stored.error}` : ''}`);
    }
    const { record } = session;
    if (record.state === 'failed' || (record.state === 'destroying' && record.endReason === 'failed')) {
      throw new SessionGoneError(`session ${id} is gone${record.error ? `: ${record.error}` : ''}`);
    }
    if (record.state === 'paused') {
      throw new SessionPausedError(`session ${id} is paused (since ${record.paused?.since ?? 'unknown'}): resume it first (POST /v1/sessions/${id}/resume)`);
    }
    if (session.transition) throw new SessionStateError(`session ${id} is ${session.transition}, not ready`);
    if (record.state !== 'ready' || !hasDesktop(session)) {
      throw new SessionStateError(`session ${id} is ${record.state}, not ready`);
    }
    return session;
  }

  /** Live sessions; only `tenant`'s when given. */
  list(tenant?: string): SessionView[] {
    return this.all()
      .filter((s) => tenant === undefined || s.record.tenant === tenant)
      .map((s) => toView(s.record, this.recordingOf(s.id), s.control));
  }

  /** The tenant that owns a session (live or stored), or undefined if there is none. */
  tenantOf(id: string): string | undefined {
    return this.live.get(id)?.record.tenant ?? this.store.get(id)?.tenant;
  }

  /** A session as a client sees it, live or ended; 404 if there never was one. */
  view(id: string): SessionView {
    const live = this.live.get(id);
    if (live) return toView(live.record, this.recordingOf(id), live.control);
    const stored = this.store.get(id);
    if (!stored) throw new NotFoundError(`session ${id} does not exist`);
    return toView(stored, this.recordingOf(id));
  }
}
