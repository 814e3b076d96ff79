import type { Logger } from 'pino';
import { HostCapacityError, OrchestratorError, PauseModeUnavailableError, PauseStateError, SessionPausedError, UnavailableError } from '../errors.js';
import type { Metrics } from '../metrics/metrics.js';
import type { PauseMode } from '../runtimes/runtime.js';
import type { SessionRegistry } from './registry.js';
import type { SandboxHost } from './sandbox-host.js';
import type { Session } from './session.js';
import type { SessionState } from './session-record.js';
import { flushGuestVolumes } from './session-volumes.js';
import { toView, type SessionView } from './session-view.js';
import type { SessionStore } from './store.js';
import { idleDeadline } from './timeouts.js';

/** What a client asks for: a mode, or `auto` (disk where the runtime does it, else memory). */
export const PAUSE_REQUEST_MODES = ['memory', 'disk', 'auto'] as const;
export type PauseRequestMode = (typeof PAUSE_REQUEST_MODES)[number];

/** A disk pause refused for want of disk: when to ask again. */
const DISK_RETRY_AFTER_SECONDS = 60;
/** How long the desktop kept through a pause gets to answer after the resume before a new connection is made. */
const STILL_ATTACHED_PROBE_MS = 3_000;
/** How long a resumed guest gets to let us in again and show its display. */
const RESUME_ATTACH_TIMEOUT_MS = 15_000;

export interface PauseOptions {
  registry: SessionRegistry;
  store: SessionStore;
  host: SandboxHost;
  metrics: Metrics;
  log: Logger;
  setState(session: Session, state: SessionState): void;
  /** Binds the lifecycle's handlers to the connection a resume attached. */
  watchConnection(session: Session): void;
  /** Watches the session's sandbox of the moment (a resume from disk starts a new one). */
  watchSandbox(session: Session): void;
  /** Fails a session whose resumed guest does not answer (released like a vanished sandbox). */
  fail(session: Session, reason: string): Promise<void>;
  /** The session's recording stops capturing while paused. */
  recordings?: { pause(id: string): void; resume(id: string): void };
  /** The host's disk left above its reserve and every session's promise, MiB (capacity.ts; undefined: not checked). */
  diskRoomMiB?: () => number | undefined;
  /** A session's memory, MiB: what its disk pause's state is bounded by. */
  sessionMemoryMiB?: number;
}

/**
 * Pause and resume (docs/pause.md). A pause holds the session's SSH keepalives (a frozen
 * guest cannot answer them, and a connection dropped for it would take the desktop helpers and
 * the bash shell with it), then has the runtime freeze the sandbox; the connection stays open
 * and idle. A resume lets the sandbox run again, starts the keepalives and checks the desktop
 * answers on the same connection; where it does not (the connection dropped during a long
 * pause, or an orchestrator restart adopted the session paused, without one) it attaches a new
 * connection and desktop with the session's own keys, so the next request just works. One pause or resume at a time per session (`transition`); requests in
 * between wait for it (autoResume) or are told 409. The idle timeout does not run while paused,
 * nor does the lifetime (running time only); pausedRetentionSeconds does (clocks.ts).
 */
export class SessionPauser {
  constructor(private readonly opts: PauseOptions) {}

  /**
   * The mode a request names, checked against what this host does; `auto`: disk where it works,
   * else memory. Not disk for a session with volumes where the runtime cannot (diskPauseWithVolumes).
   */
  modeFor(requested: PauseRequestMode, withVolumes = false): PauseMode {
    const { host } = this.opts;
    const modes = host.pauseModes();
    const volumesStay = withVolumes && !host.diskPauseWithVolumes();
    if (volumesStay && requested === 'disk')
      throw new PauseModeUnavailableError('mode "disk" is not available for a session with volumes on this runtime yet: pause it in memory');
    const noRoom = this.noDiskRoom();
    if (requested === 'auto') {
      if (modes.includes('disk') && !volumesStay && noRoom === undefined) return 'disk';
      if (modes.includes('memory')) return 'memory';
      throw new PauseModeUnavailableError(`this orchestrator cannot pause sessions: ${host.pauseUnavailable('memory') ?? 'no pause mode'}`);
    }
    const why = host.pauseUnavailable(requested);
    if (why !== undefined || !modes.includes(requested))
      throw new PauseModeUnavailableError(`mode "${requested}" is not available here: ${why ?? 'the runtime does not do it'}`);
    if (requested === 'disk' && noRoom !== undefined) throw new HostCapacityError(noRoom, 'host_disk_low', DISK_RETRY_AFTER_SECONDS);
    return requested;
  }

  /**
   * Why a pause to disk would not fit (undefined: it does). Its state is checked against the
   * room no session is promised, so that a paused desktop never takes the disk a running one
   * was promised (nor the reserve).
   */
  private noDiskRoom(): string | undefined {
    const room = this.opts.diskRoomMiB?.();
    const need = this.opts.sessionMemoryMiB === undefined ? undefined : this.opts.host.pauseStateMaxMiB(this.opts.sessionMemoryMiB);
    if (room === undefined || need === undefined || room >= need) return undefined;
    return (
      `not enough disk to pause to disk: a paused desktop's state may take ${need} MiB and the host has ${Math.max(0, Math.floor(room))} MiB ` +
      'left above its reserve and what its sessions are promised; pause in memory (mode "memory"), or retry later'
    );
  }

  async pause(id: string, requested: PauseRequestMode = 'auto'): Promise<SessionView> {
    const session = await this.settled(id);
    if (session?.record.state === 'paused')
      throw new PauseStateError(`session ${id} is paused already (since ${session.record.paused?.since})`, 'session_already_paused');
    const ready = this.opts.registry.ready(id); // 404 / 409 / 410 for every other state
    if (ready.inFlight > 0) throw new PauseStateError(`session ${id} is running a long action; pause it once that has finished`, 'session_busy');
    const mode = this.modeFor(requested, ready.record.volumes.length > 0);
    return this.transition(ready, 'pausing', () => this.doPause(ready, mode));
  }

  async resume(id: string): Promise<SessionView> {
    const session = await this.settled(id);
    if (!session || session.record.state !== 'paused') {
      this.opts.registry.ready(id); // 404 / 409 / 410 unless it is running
      throw new PauseStateError(`session ${id} is not paused`, 'session_not_paused');
    }
    return this.transition(session, 'resuming', () => this.doResume(session));
  }

  /**
   * Before a request that needs the desktop: a paused session is resumed (autoResume) or the
   * request is refused with 409 session_paused. A pause or resume under way is waited for.
   */
  async ensureRunning(id: string): Promise<void> {
    const session = await this.settled(id);
    if (!session || session.record.state !== 'paused') return;
    if (!session.record.autoResume) {
      throw new SessionPausedError(
        `session ${id} is paused (since ${session.record.paused?.since}) and autoResume is off: resume it first (POST /v1/sessions/${id}/resume)`,
      );
    }
    await this.resume(id).catch((err: unknown) => {
      // Another request resumed it first: as good.
      if (err instanceof PauseStateError && err.code === 'session_not_paused') return;
      throw err;
    });
  }

  /** The live session once any pause or resume under way has finished. */
  private async settled(id: string): Promise<Session | undefined> {
    for (let session = this.opts.registry.find(id); session; session = this.opts.registry.find(id)) {
      if (!session.transition) return session;
      await session.transitionDone;
    }
    return undefined;
  }

  private async transition(session: Session, kind: 'pausing' | 'resuming', work: () => Promise<void>): Promise<SessionView> {
    // Set before the first await: the reaper and other requests see it at once.
    session.transition = kind;
    const done = work().finally(() => {
      session.transition = undefined;
      session.transitionDone = undefined;
    });
    session.transitionDone = done.catch(() => undefined);
    await done;
    return toView(session.record);
  }

  private async doPause(session: Session, mode: PauseMode): Promise<void> {
    const { host, metrics, recordings } = this.opts;
    const log = this.log(session);
    const started = performance.now();
    // To disk, the guest's unwritten volume data first: a destroy while paused does not run it again to flush.
    if (mode === 'disk') await flushGuestVolumes(session, (err) => log.warn({ err }, "could not sync the guest's volumes before pausing it to disk"));
    recordings?.pause(session.id);
    session.keepalivesHeld = session.connection?.holdKeepalives();
    // To disk, the sandbox's process ends: not a crash (session-watch.ts).
    const disk = mode === 'disk';
    // Its connection would be closed by the guest's end: let go of it first (a new one on the resume).
    const letGo = disk && host.diskPauseEndsConnection();
    if (disk) {
      session.processAway = true;
      session.watch?.stop();
      session.watch = undefined;
    }
    if (letGo) this.detach(session);
    let bytes: number;
    try {
      ({ bytes } = await host.pause(session, mode));
    } catch (err) {
      // Left running: carry on as if nothing was asked.
      log.warn({ err, mode }, 'pause failed; the session goes on running');
      if (disk) {
        session.processAway = false;
        this.opts.watchSandbox(session); // one that died meanwhile is reported now
      }
      if (letGo) await this.attach(session).catch((attachErr: unknown) => log.warn({ err: attachErr }, 'could not attach again after a failed pause'));
      metrics.errors.inc({ kind: 'pause' });
      this.releaseKeepalives(session);
      recordings?.resume(session.id);
      if (err instanceof OrchestratorError) throw err;
      throw new UnavailableError(`session ${session.id} could not be paused (${mode}): ${(err as Error).message}`);
    }
    if (session.record.state !== 'ready') return; // destroyed meanwhile: the destroy owns the rest
    session.record.paused = { mode, since: new Date().toISOString(), bytes };
    this.opts.setState(session, 'paused');
    const ms = performance.now() - started;
    metrics.pauseDuration.observe({ mode, step: 'pause' }, ms / 1000);
    log.info({ mode, bytes, ms: Math.round(ms) }, 'session paused');
  }

  private async doResume(session: Session): Promise<void> {
    const { host, metrics, recordings } = this.opts;
    const log = this.log(session);
    const started = performance.now();
    const paused = session.record.paused;
    const mode = paused?.mode ?? 'memory';
    try {
      await host.resume(session, mode);
    } catch (err) {
      log.warn({ err, mode }, 'resume failed; the session stays paused');
      metrics.errors.inc({ kind: 'resume' });
      throw new UnavailableError(`session ${session.id} could not be resumed: ${(err as Error).message}`);
    }
    if (session.processAway) {
      // From disk: a new sandbox process (host.resume set it), watched from now.
      session.processAway = false;
      this.opts.watchSandbox(session);
    }
    const thawedMs = performance.now() - started;
    this.releaseKeepalives(session);
    const kept = await this.stillAttached(session);
    if (!kept) {
      this.detach(session);
      await this.attach(session);
    }
    if (session.record.state !== 'paused') return; // failed or destroyed meanwhile
    const now = Date.now();
    const { record } = session;
    if (paused) record.pausedMs += Math.max(0, now - Date.parse(paused.since));
    record.paused = null;
    // Idle from now: the time it spent paused was not the client's.
    record.expiresAt = idleDeadline(record, now);
    session.expiryPersistedAt = now;
    this.opts.setState(session, 'ready');
    recordings?.resume(session.id);
    const ms = performance.now() - started;
    metrics.pauseDuration.observe({ mode, step: 'resume' }, ms / 1000);
    log.info({ mode, ms: Math.round(ms), thawedMs: Math.round(thawedMs), connection: kept ? 'kept' : 'new' }, 'session resumed');
  }

  private releaseKeepalives(session: Session): void {
    session.keepalivesHeld?.();
    session.keepalivesHeld = undefined;
  }

  /** The connection kept through the pause is up and the desktop answers on it (a cursor query). */
  private async stillAttached(session: Session): Promise<boolean> {
    if (!session.connection?.isConnected || !session.computer) return false;
    try {
      await session.computer.probeDisplay(STILL_ATTACHED_PROBE_MS);
      return true;
    } catch (err) {
      this.log(session).info({ err }, 'the connection kept through the pause does not answer; attaching a new one');
      return false;
    }
  }

  /** The connection and desktop go; so do the companion tools' states, which lived on them. */
  private detach(session: Session): void {
    session.detach?.();
    session.detach = undefined;
    session.connection = undefined;
    session.computer = undefined;
    session.attachments.clear();
  }

  /** A new connection and desktop on the running sandbox; a guest that does not answer fails the session. */
  private async attach(session: Session): Promise<void> {
    try {
      await this.opts.host.attach(session, RESUME_ATTACH_TIMEOUT_MS);
    } catch (err) {
      const reason = `the guest did not answer after it was resumed: ${(err as Error).message}`;
      await this.opts.fail(session, reason);
      throw new UnavailableError(`session ${session.id} failed: ${reason}`);
    }
    this.opts.watchConnection(session);
  }

  private log(session: Session): Logger {
    return this.opts.log.child({ sessionId: session.id, tenant: session.record.tenant });
  }
}
