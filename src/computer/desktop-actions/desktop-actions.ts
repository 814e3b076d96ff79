import { setTimeout as sleep } from 'node:timers/promises';
import { GuestProtocolError, OrchestratorError } from '../../errors.js';
import type { GuestTransport } from '../../transport/index.js';
import { SerialQueue } from '../../util/serial-queue.js';
import { DesktopError, DisplayNotReadyError } from '../desktop.js';
import {
  maxAnswerBytes,
  parseAnswer,
  parseClipboard,
  parseDesktopFile,
  parseFlag,
  parseScreen,
  parseWindows,
  type DesktopWindow,
  type ScreenSize,
} from './answers.js';
import { DesktopChannel, DesktopChannelError } from './desktop-channel.js';
import { appId, clipboardText, openTarget, windowId, type DesktopRequest } from './requests.js';

/** The one-shot helper of images built before sbx-desktopd (src/guest/files/sbx-desktopd): one process per action. */
export const ONE_SHOT_COMMAND = '/usr/local/bin/sbx-desktop';
/**
 * How long the helper may take to answer, by verb: it waits at most 2 s for the window
 * manager (focus, close) and 10 s for a process it runs (xclip, gio); the rest is headroom
 * for a busy guest. A helper just started gets START_ALLOWANCE_MS more for its start-up.
 */
const ANSWER_TIMEOUT_MS: Record<DesktopRequest['verb'], number> = {
  screen: 8_000,
  windows: 8_000,
  focus: 10_000,
  close: 10_000,
  'clipboard-get': 20_000,
  'clipboard-set': 20_000,
  open: 20_000,
  launch: 20_000,
};
const START_ALLOWANCE_MS = 5_000;
/** Requests that do the same if they reach the guest twice (not open or launch: a second window; not close). */
const REPEATABLE_VERBS: ReadonlySet<DesktopRequest['verb']> = new Set(['screen', 'windows', 'focus', 'clipboard-get', 'clipboard-set']);
/** The one-shot helper's time per action, its start included. */
const ONE_SHOT_TIMEOUT_MS = 20_000;
/**
 * A session's helper is started at most once per this interval; an action that needs a new
 * one sooner waits for the rest of it. An honest helper is started once per session; one that
 * dies, hangs or lies (killed by the guest, replaced with one that floods) costs the host a
 * channel and at most one capped answer a second, however fast the client asks.
 */
export const DESKTOP_HELPER_START_INTERVAL_MS = 1_000;

/** Where the releases of a session go (the session's CleanupStack). */
interface Releases {
  push(name: string, release: () => void): Promise<void>;
}

/**
 * Desktop actions beyond raw input, for one session: open a URL or file, launch an app,
 * list, focus and close windows, the clipboard, the screen size. They go to the session's
 * long-lived desktop helper (desktop-channel.ts), started on the first action and again when
 * it has died (at most once per DESKTOP_HELPER_START_INTERVAL_MS): the command line is
 * fixed, the request travels as JSON on its stdin (client text never meets a shell), and its
 * answer is capped and checked (answers.ts). One action at a time per session, so a client
 * cannot make a session hold many helpers at once. An image without sbx-desktopd (built
 * before it: an adopted session, a user template on an old base) runs its one-shot helper
 * per action instead, as sessions did before.
 */
export class DesktopActions {
  private readonly queue = new SerialQueue();
  private helper: DesktopChannel | undefined;
  private lastStart = -Infinity;
  /** The image has no persistent helper (see ONE_SHOT_COMMAND). */
  private oneShot = false;
  /** Aborted by stop(): a wait to restart the helper ends at once. */
  private readonly closing = new AbortController();

  constructor(
    private readonly connection: GuestTransport,
    private readonly display: number,
    /** The session's programs start the X server (the xfce template): a failure while it is down is a DisplayNotReadyError. */
    private readonly displayBySession = false,
  ) {}

  /** The session's desktop actions, closed with the session (for SessionAccess.attachment). */
  static async attach(ctx: { connection: GuestTransport; cleanup: Releases }, display: number, displayBySession = false): Promise<DesktopActions> {
    const actions = new DesktopActions(ctx.connection, display, displayBySession);
    await ctx.cleanup.push('desktop helper', () => actions.stop());
    return actions;
  }

  async open(target: unknown): Promise<{ target: string }> {
    const checked = openTarget(target);
    await this.call({ verb: 'open', target: checked }, () => undefined);
    return { target: checked };
  }

  async launch(app: unknown): Promise<{ app: string; file: string }> {
    const id = appId(app);
    return { app: id, file: await this.call({ verb: 'launch', app: id }, parseDesktopFile) };
  }

  async windows(): Promise<DesktopWindow[]> {
    return this.call({ verb: 'windows' }, parseWindows);
  }

  async focus(window: unknown): Promise<{ id: number; focused: boolean }> {
    const id = windowId(window);
    return { id, focused: await this.call({ verb: 'focus', window: id }, (fields) => parseFlag(fields, 'focused')) };
  }

  async close(window: unknown): Promise<{ id: number; closed: boolean }> {
    const id = windowId(window);
    return { id, closed: await this.call({ verb: 'close', window: id }, (fields) => parseFlag(fields, 'closed')) };
  }

  async clipboard(): Promise<string> {
    return this.call({ verb: 'clipboard-get' }, parseClipboard);
  }

  async setClipboard(text: unknown): Promise<{ bytes: number }> {
    const checked = clipboardText(text);
    await this.call({ verb: 'clipboard-set', text: checked }, () => undefined);
    return { bytes: Buffer.byteLength(checked, 'utf8') };
  }

  async screen(): Promise<ScreenSize> {
    return this.call({ verb: 'screen' }, parseScreen);
  }

  /** Stops the helper (the session ends); an action in flight or queued fails. */
  stop(): void {
    this.closing.abort();
    this.helper?.close();
    this.helper = undefined;
  }

  /** Asks the helper and reads its answer with `read` (which throws on a broken one). */
  private async call<T>(request: DesktopRequest, read: (fields: Record<string, unknown>) => T): Promise<T> {
    try {
      return await this.callOnce(request, read);
    } catch (err) {
      throw await this.notReadyInstead(err);
    }
  }

  /** A helper's failure on a display the session starts, while that display does not answer: 409 display_not_ready, as the computer tool says. */
  private async notReadyInstead(err: unknown): Promise<unknown> {
    if (!this.displayBySession || (err instanceof OrchestratorError && err.code !== 'desktop_error' && err.code !== 'guest_protocol_error')) return err;
    const probe = await this.connection
      .exec(`DISPLAY=:${this.display} exec xdpyinfo >/dev/null 2>&1`, { timeoutMs: 5_000, maxOutputBytes: 1024 })
      .catch(() => undefined);
    return probe && probe.exitCode !== 0 ? new DisplayNotReadyError(this.display) : err;
  }

  private callOnce<T>(request: DesktopRequest, read: (fields: Record<string, unknown>) => T): Promise<T> {
    return this.queue.run(async () => {
      if (this.closing.signal.aborted) throw new DesktopError("the session's desktop was closed");
      const answer = this.oneShot ? await this.runOnce(request) : await this.ask(request);
      try {
        return read(parseAnswer(answer, request));
      } catch (err) {
        if (err instanceof GuestProtocolError) {
          this.connection.reportProtocolError(err);
          // A helper that answers what no helper of ours would is not ours any more.
          this.helper?.close();
          this.helper = undefined;
        }
        throw err;
      }
    });
  }

  /** One request on the session's helper, started if need be; the caller holds the queue. */
  private async ask(request: DesktopRequest): Promise<Buffer> {
    let helper = this.helper;
    const fresh = !helper?.isOpen;
    if (!helper || fresh) helper = await this.start();
    const timeoutMs = ANSWER_TIMEOUT_MS[request.verb] + (fresh ? START_ALLOWANCE_MS : 0);
    try {
      return await helper.ask(`${JSON.stringify(request)}\n`, maxAnswerBytes(request), timeoutMs);
    } catch (err) {
      // Failed once, dropped for good: the next action starts another (a request that failed
      // is not repeated, part of it may have run). The channel's close ends the process: its
      // stdin ends and its next write fails.
      helper.close();
      if (this.helper === helper) this.helper = undefined;
      if (fresh && helper.helperMissing) {
        this.oneShot = true;
        return this.runOnce(request);
      }
      // A helper that died while idle (a `pkill python3` in the guest, the OOM killer) is seen
      // only as the request meets its closed channel: a request that is the same done twice
      // goes once more to a new helper (which must answer: it is not asked a third time).
      if (!fresh && helper.endedUnanswered && REPEATABLE_VERBS.has(request.verb)) return this.ask(request);
      if (err instanceof DesktopChannelError) {
        throw new DesktopError(`the desktop helper failed in the guest (${request.verb}): ${err.message}; the next action starts it again`);
      }
      throw err;
    }
  }

  /** A new helper, at most once per DESKTOP_HELPER_START_INTERVAL_MS (see there). */
  private async start(): Promise<DesktopChannel> {
    const wait = this.lastStart + DESKTOP_HELPER_START_INTERVAL_MS - performance.now();
    if (wait > 0) await sleep(wait, undefined, { signal: this.closing.signal }).catch(() => undefined);
    if (this.closing.signal.aborted) throw new DesktopError("the session's desktop was closed");
    this.lastStart = performance.now();
    // A connection that cannot open a channel throws as an exec would (the session may be
    // ending: the routes tell the client so).
    const helper = await DesktopChannel.open(this.connection, this.display);
    if (this.closing.signal.aborted) {
      helper.close(); // stopped while it was being started
      throw new DesktopError("the session's desktop was closed");
    }
    this.helper = helper;
    return helper;
  }

  /** The one-shot helper of an older image: one process per action, its output capped by the exec. */
  private async runOnce(request: DesktopRequest): Promise<Buffer> {
    // The display number is our configuration, a number: the only variable in the line.
    const command = `LC_ALL=C.UTF-8 DISPLAY=:${this.display} exec /usr/bin/python3 -I ${ONE_SHOT_COMMAND}`;
    const result = await this.connection.exec(command, {
      stdin: JSON.stringify(request),
      timeoutMs: ONE_SHOT_TIMEOUT_MS,
      maxOutputBytes: maxAnswerBytes(request),
    });
    if (result.exitCode !== 0 || result.stdout.length === 0) {
      const said = result.stderr
        .toString('utf8')
        .replace(/[\p{Cc}\p{Cf}]/gu, ' ')
        .trim()
        .slice(0, 300);
      throw new DesktopError(`the desktop helper failed in the guest (${said || `exit ${result.exitCode ?? result.signal}`})`);
    }
    return result.stdout;
  }
}
