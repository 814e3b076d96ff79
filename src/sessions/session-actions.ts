import { parseAction, type ComputerAction } from '../computer/actions.js';
import type { Scaler } from '../computer/scaling.js';
import type { ComputerOutcome } from '../computer/computer-tool.js';
import { resolveScreenshotFormat, type EncodedImage, type ScreenshotFormat, type ScreenshotFormatRequest } from '../computer/screenshot-format.js';
import { HumanInControlError, InvalidRequestError, NotFoundError, type OrchestratorError, SessionGoneError, SessionStateError } from '../errors.js';
import type { Metrics } from '../metrics/metrics.js';
import type { AttachmentContext, SessionAccess } from '../tools/session-access.js';
import type { GuestTransport } from '../transport/index.js';
import type { SessionClocks } from './clocks.js';
import type { SessionRegistry } from './registry.js';
import { hasDesktop, type ControlHold } from './session.js';
import type { SessionRecord, SessionState } from './session-record.js';
import type { SessionStore } from './store.js';

const HEALTH_PROBE_TIMEOUT_MS = 3_000;

export interface SessionHealth {
  state: SessionState;
  healthy: boolean;
  ssh: 'ok' | 'down';
  display: 'ok' | 'down';
  detail?: string;
}

export interface ActionOutcome extends ComputerOutcome {
  durationMs: number;
}

/** A screenshot request: as the model sees the screen (`scaled`) or not, and its format. */
export interface ScreenshotOptions {
  scaled?: boolean;
  /** Format and quality as the client sent them (checked here); the session's default otherwise. */
  format?: ScreenshotFormatRequest;
}

export interface ActOptions {
  screenshotAfter: boolean;
  /** The format of any screenshot the action returns, as the client sent it. */
  format?: ScreenshotFormatRequest;
}

export interface SessionActionOptions {
  registry: SessionRegistry;
  clocks: SessionClocks;
  store: SessionStore;
  metrics: Metrics;
  /** Told of every action performed (the recording's subtitles). */
  onAction?: (id: string, action: ComputerAction, startedAt: Date, durationMs: number) => void;
}

/**
 * What a request does with a ready session: the computer's actions and screenshots, health
 * probes, and the connection and per-session state the companion tools use (SessionAccess).
 * Each counts as activity on the session's idle clock.
 */
export class SessionActions implements SessionAccess {
  constructor(private readonly opts: SessionActionOptions) {}

  /**
   * Probes a live session now: is its SSH connection up, does its display answer? A dead
   * display is reported here (and as a clear error by every action), never as a hang.
   */
  async health(id: string): Promise<SessionHealth> {
    const session = this.opts.registry.find(id);
    if (!session) {
      const stored = this.opts.store.get(id);
      if (!stored) throw new NotFoundError(`session ${id} does not exist`);
      return { state: stored.state, healthy: false, ssh: 'down', display: 'down', detail: `session is ${stored.state}` };
    }
    const { state } = session.record;
    if (state !== 'ready' || !hasDesktop(session)) {
      return { state, healthy: false, ssh: 'down', display: 'down', detail: `session is ${state}` };
    }
    try {
      await session.computer.probeDisplay(HEALTH_PROBE_TIMEOUT_MS);
      return { state, healthy: true, ssh: 'ok', display: 'ok' };
    } catch (err) {
      const ssh = session.connection.isConnected ? 'ok' : 'down';
      return { state, healthy: false, ssh, display: 'down', detail: (err as Error).message };
    }
  }

  /** The whole screen: at its real size, or as the model sees it when `scaled`. */
  async screenshot(id: string, options: ScreenshotOptions = {}): Promise<EncodedImage> {
    const session = this.opts.registry.ready(id);
    const { computer } = session;
    const choice = formatOf(options.format, session.record);
    const end = this.opts.metrics.screenshotDuration.startTimer();
    try {
      const image = options.scaled ? await computer.screenshot(choice) : await computer.fullScreenshot(choice);
      end();
      this.opts.clocks.touch(session);
      return image;
    } catch (err) {
      this.opts.metrics.errors.inc({ kind: 'screenshot' });
      throw err;
    }
  }

  /**
   * Performs one computer-use action. With `screenshotAfter`, actions other than
   * screenshot, cursor_position and zoom also return the settled screen (the tool_result).
   */
  async act(id: string, input: unknown, options: ActOptions): Promise<ActionOutcome> {
    return this.perform(id, (scaler) => [parseAction(input, scaler)], options);
  }

  /**
   * Performs a list of actions that `translate` makes for the session's scaling (another
   * vendor's call, src/vendors/), by the same code as `act`: all are checked before the first
   * runs, and only the last one takes the settled screenshot that follows.
   */
  async perform(id: string, translate: (scaler: Scaler) => ComputerAction[], options: ActOptions): Promise<ActionOutcome> {
    const session = this.opts.registry.ready(id);
    const { computer } = session;
    const actions = translate(computer.scaler);
    const last = actions.at(-1);
    if (!last) throw new InvalidRequestError('there is no action to perform');
    this.checkAgentControl(id);
    // Checked before the action runs: a bad format must not leave a click done and unreported.
    const format = formatOf(options.format, session.record);
    const started = performance.now();
    const startedAt = new Date();
    try {
      // A long action (hold_key, wait, a settle) holds the idle timeout off while it runs.
      const outcome = await this.opts.clocks.whileBusy(id, async () => {
        for (const action of actions.slice(0, -1)) await this.timed(action, () => computer.run(action, { screenshotAfter: false, format }));
        return this.timed(last, () => computer.run(last, { screenshotAfter: options.screenshotAfter, format }));
      });
      this.opts.clocks.touch(session);
      const durationMs = performance.now() - started;
      for (const action of actions) this.opts.onAction?.(id, action, startedAt, durationMs);
      return { ...outcome, durationMs };
    } catch (err) {
      this.opts.metrics.errors.inc({ kind: 'action' });
      throw err;
    }
  }

  private async timed<T>(action: ComputerAction, run: () => Promise<T>): Promise<T> {
    const started = performance.now();
    const result = await run();
    const seconds = (performance.now() - started) / 1000;
    this.opts.metrics.actionDuration.observe({ action: action.action }, seconds);
    if (action.action === 'screenshot') this.opts.metrics.screenshotDuration.observe(seconds);
    return result;
  }

  /**
   * Throws 409 human_in_control while a person holds the session through a live view
   * (takeover): every agent action on the desktop (computer actions, desktop actions) is
   * refused, with nothing done, until it is handed back.
   */
  checkAgentControl(id: string): void {
    const { control } = this.opts.registry.ready(id);
    if (control) {
      throw new HumanInControlError(
        `a person has taken over session ${id} through live view ${control.heldBy} (since ${control.since}); ` +
          'no action was performed: wait until it is handed back, then take a screenshot, as the screen may have changed',
      );
    }
  }

  /**
   * Gives the desktop to a person (a live view's takeover) or back to the agent (undefined).
   * The session must be ready to be taken; giving it back always works.
   */
  setControl(id: string, hold: ControlHold | undefined): void {
    if (hold) this.opts.registry.ready(id).control = hold;
    else {
      const session = this.opts.registry.find(id);
      if (session) session.control = undefined;
    }
  }

  /** A ready session's SSH connection, for the companion tools and files. Counts as activity. */
  connection(id: string): GuestTransport {
    const session = this.opts.registry.ready(id);
    this.opts.clocks.touch(session);
    return session.connection;
  }

  /**
   * Per-session state of a companion tool (e.g. a persistent shell), made on first use. What
   * `create` pushes onto the cleanup stack is released when the session ends, before its
   * SSH connection closes.
   */
  async attachment<T>(id: string, name: string, create: (ctx: AttachmentContext) => Promise<T> | T): Promise<T> {
    const session = this.opts.registry.ready(id);
    this.opts.clocks.touch(session);
    if (!session.attachments.has(name)) {
      // Stored as a promise at once, so two concurrent first uses make only one.
      const made = Promise.resolve().then(() => create({ connection: session.connection, cleanup: session.cleanup }));
      made.catch(() => session.attachments.delete(name)); // a failed start is retried next time
      session.attachments.set(name, made);
    }
    return (await session.attachments.get(name)) as T;
  }

  /**
   * What a request on session `id` that failed unexpectedly (not with an OrchestratorError)
   * should answer instead of a 500, if the session ended under it: 410 when its sandbox
   * vanished (looked at now, not at the next tick of the watch), 409 when it is being
   * destroyed. Undefined when the session is live and well: the error is a real one.
   */
  async endedUnderRequest(id: string): Promise<OrchestratorError | undefined> {
    const session = this.opts.registry.find(id);
    if (!session) return undefined;
    if (session.record.state === 'ready') {
      const gone = await session.watch?.check();
      if (!gone) return undefined;
      // The watch's `gone` settles with it, and the session is failed and released from there.
      return new SessionGoneError(`session ${id} is gone: sandbox vanished: ${gone.reason}`);
    }
    if (session.record.endReason === 'failed' || session.record.state === 'failed') {
      return new SessionGoneError(`session ${id} is gone${session.record.error ? `: ${session.record.error}` : ''}`);
    }
    return new SessionStateError(`session ${id} is ${session.record.state}`);
  }
}

/** The format a request asked for, checked, with the session's default filling what it left out. */
function formatOf(request: ScreenshotFormatRequest | undefined, record: SessionRecord): ScreenshotFormat {
  const fallback = { format: record.screenshotFormat, quality: record.screenshotQuality ?? undefined };
  return resolveScreenshotFormat(request ?? {}, fallback);
}
