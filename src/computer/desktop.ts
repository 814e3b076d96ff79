import { setTimeout as sleep } from 'node:timers/promises';
import { GuestProtocolError, InvalidRequestError, OrchestratorError } from '../errors.js';
import { commandLine } from '../transport/quote.js';
import type { GuestChannel, GuestTransport } from '../transport/index.js';
import { openWarmHelper, type WarmHelperName, type WarmHelpers } from './warm-helpers.js';
import type { Point, Size } from './scaling.js';
import { SerialQueue } from '../util/serial-queue.js';
import { CaptureChannel, CaptureChannelError, type RawFrame, type ScreenMemory } from './capture-channel.js';
import { displaySize } from './display-size.js';
import { InputChannel, InputChannelError, type InputAnswer } from './input-channel.js';
import { WHERE, type InputPlan, type InputRequest } from './input-requests.js';
import { KeymapBinder, spareKeycodes } from './keymap.js';

/** A display command failed inside the guest (e.g. the X server is gone). */
export class DesktopError extends OrchestratorError {
  constructor(message: string) {
    super('desktop_error', message);
  }
}

/**
 * The display of a session whose own programs start the X server (the `xfce` template: E2B
 * Desktop's Sandbox.create runs `Xvfb :0`) does not answer yet: a 409 saying what to do,
 * rather than a helper's "cannot open display" as a 502, or a wait.
 */
export class DisplayNotReadyError extends OrchestratorError {
  constructor(display: number) {
    super(
      'display_not_ready',
      `the session's display :${display} does not answer yet: in this template the session's own programs start the X server ` +
        `(E2B Desktop's Sandbox.create starts Xvfb :${display} and XFCE); start it (or wait for it), then retry`,
    );
  }
}

/** What the screen looked like: raw pixels (the fast path) or a PNG (scrot, the fallback). */
export type Capture = { frame: RawFrame; png?: undefined } | { png: Buffer; frame?: undefined };

/**
 * After the grabber broke its protocol, it is not started again for this long, and screen
 * requests meanwhile fail at once with the same error. Every start costs the host a whole
 * frame (3 MiB at 1024x768, decrypted, kept, then dropped: V8 pays for such buffers in full
 * collections, which stop the event loop) and the guest a process; a grabber that lies would
 * otherwise have every request of the client pay that, as fast as it asks (issue 21). An honest
 * grabber never lies, so nothing honest waits.
 */
export const GRABBER_RESTART_AFTER_LIE_MS = 1_000;

/** Per-keystroke delay, as in the reference implementation: some applications drop faster input. */
const TYPE_DELAY_MS = 12;
const COMMAND_TIMEOUT_MS = 15_000;
/** What a display command other than scrot may print: a keymap (xmodmap -pke) is ~10 KiB. */
const MAX_COMMAND_OUTPUT_BYTES = 256 * 1024;

/**
 * The guest's X display over the session's SSH connection: pointer and keys through the
 * persistent input helper (sbx-input, no command language), the screen through the
 * persistent grabber (scrot as the fallback), and text typed by `xdotool type --file -`
 * with the text on standard input, so model text never meets a shell or a command line.
 */
export class Desktop {
  /** Keysyms bound for non-ASCII text; created on first use (see keymap.ts). */
  private keymap: KeymapBinder | undefined;
  /** Typing changes the keymap: one text at a time per session (other sessions are not held). */
  private readonly typing = new SerialQueue();
  private inputChannel: InputChannel | undefined;
  private readonly inputQueue = new SerialQueue();
  private captureChannel: CaptureChannel | undefined;
  private readonly captureQueue = new SerialQueue();
  /** The last screen and a spare frame buffer, handed from one grabber to the next (see ScreenMemory). */
  private readonly screenMemory: ScreenMemory = {};
  /** The last time the grabber broke its protocol, and how (see GRABBER_RESTART_AFTER_LIE_MS). */
  private grabberLied: { at: number; err: GuestProtocolError } | undefined;
  /** When the grabber last answered: watchers (recording, the screen stream) reuse what it holds if that is recent. */
  private lastGrabAt = -Infinity;
  /** Aborted by close(): a hold_key in progress ends at once. */
  private readonly closing = new AbortController();
  /** Told when a display the session starts has another size than the session's (followDisplaySize). */
  onScreenResize: ((size: Size) => void) | undefined;

  constructor(
    private readonly connection: GuestTransport,
    private readonly display: number,
    /** The session's screen: every frame the guest sends is checked against it. */
    private screen: Size,
    /** 'session': the session's programs start the X server; a failure while it is down is a DisplayNotReadyError. */
    private readonly server: 'init' | 'session' = 'init',
    /** A warm launcher in the guest (warm-helpers.ts): helpers are forked from it, not started. Dropped once it fails. */
    private warm?: WarmHelpers,
  ) {}

  /** How a helper's channel is opened: from the warm launcher while it works, else undefined (spawned). */
  private launcher(name: WarmHelperName): (() => Promise<GuestChannel>) | undefined {
    const warm = this.warm;
    return warm && (() => openWarmHelper(this.connection, warm, name));
  }

  /** A channel from the warm launcher failed: its helpers are started the usual way from now on. */
  private dropWarm(usedWarm: boolean): void {
    if (usedWarm) this.warm = undefined;
  }

  /**
   * Runs a display operation; on a display the session starts itself, a failure while that
   * display does not answer becomes a DisplayNotReadyError (probed only after a failure: the
   * helpers fail at once, "cannot open display", when there is no X server).
   */
  private async attached<T>(operation: () => Promise<T>): Promise<T> {
    if (this.server === 'init') return operation();
    try {
      return await operation();
    } catch (err) {
      if (err instanceof OrchestratorError && err.code !== 'desktop_error' && err.code !== 'guest_protocol_error') throw err;
      // A probe that cannot run (the connection is down) leaves the original error to say so.
      if (!(await this.displayAnswers().catch(() => true))) throw new DisplayNotReadyError(this.display);
      throw err;
    }
  }

  /** Whether the X server answers now (xdpyinfo, from x11-utils, is in every image). */
  async displayAnswers(): Promise<boolean> {
    if (this.closing.signal.aborted) return false;
    const result = await this.connection.exec(`DISPLAY=:${this.display} exec xdpyinfo >/dev/null 2>&1`, {
      timeoutMs: COMMAND_TIMEOUT_MS,
      maxOutputBytes: 1024,
    });
    return result.exitCode === 0;
  }

  /**
   * The screen now: a raw frame from the session's persistent grabber, or, if that cannot
   * run (an image without it, a grabber that just died), a PNG from scrot. A grabber that
   * broke the protocol (a frame that does not fit the screen) fails the request with a 502:
   * falling back would hide a guest that lies.
   */
  capture(): Promise<Capture> {
    return this.attached(() => this.grab((channel) => channel.grab(COMMAND_TIMEOUT_MS)));
  }

  /**
   * The screen once it has settled: the grabber waits until the X server has reported no
   * damage for `quietMs` (at most `maxMs`), then sends one frame. Undefined when the grabber
   * cannot run: the caller then compares scrot's captures itself.
   */
  async settledCapture(quietMs: number, maxMs: number): Promise<RawFrame | undefined> {
    const capture = await this.attached(() => this.grab((channel) => channel.settled(quietMs, maxMs, COMMAND_TIMEOUT_MS)));
    return capture.frame;
  }

  /**
   * A frame for a watcher (the recorder, the screen stream), no older than `maxAgeMs` when it
   * can be: the last frame any capture returned if it is that recent, else one grabbed now, but
   * never by queueing behind or ahead of another capture. While one is queued or running, the
   * last frame is the answer: a watcher must not make the agent's screenshots wait. Undefined
   * only when the session has no grabber (scrot: no raw frames).
   */
  async watchFrame(maxAgeMs: number): Promise<RawFrame | undefined> {
    const held = this.heldScreen(maxAgeMs);
    if (held) return held.frame();
    return (await this.capture()).frame;
  }

  /**
   * For the recorder: copies the screen into `target` (rows packed) unless it is still version
   * `have`, under the same rules as watchFrame (a recent screen is reused, a capture is never
   * queued behind), and returns the version now in `target`. Nothing is handed out, so the
   * grabber's buffer is patched in place: recording a busy screen allocates no frame per frame.
   * Undefined when the session has no working grabber (no scrot run instead: not 5 a second).
   */
  async copyFrameInto(maxAgeMs: number, target: Buffer, have: number | undefined): Promise<number | undefined> {
    if (!this.heldScreen(maxAgeMs)) {
      const refreshed = await this.useGrabber(
        async (channel) => {
          await channel.refresh(COMMAND_TIMEOUT_MS);
          return true;
        },
        async () => false,
      );
      if (!refreshed) return undefined;
    }
    // Synchronous from here: a change the grabber sends meanwhile lands before or after the copy, never during it.
    const channel = this.captureChannel;
    return channel?.isOpen ? channel.copyInto(target, have) : undefined;
  }

  /**
   * The grabber, if what it holds will do for a watcher: grabbed within `maxAgeMs`, or any
   * frame while a capture is queued or running (a watcher must not make the agent's
   * screenshots wait). The very first frame is worth a wait: undefined before it.
   */
  private heldScreen(maxAgeMs: number): CaptureChannel | undefined {
    const channel = this.captureChannel;
    if (!channel?.isOpen || channel.version === 0) return undefined;
    if (performance.now() - this.lastGrabAt < maxAgeMs || this.captureQueue.pending > 0) return channel;
    return undefined;
  }

  private grab(ask: (channel: CaptureChannel) => Promise<RawFrame>): Promise<Capture> {
    return this.useGrabber<Capture>(
      async (channel) => ({ frame: await ask(channel) }),
      async () => ({ png: await this.screenshot() }),
    );
  }

  /**
   * Runs `ask` on the grabber (opened if need be) in the capture queue. A grabber that cannot
   * run is dropped (a new one is tried next time) and `instead` answers.
   */
  private useGrabber<T>(ask: (channel: CaptureChannel) => Promise<T>, instead: () => Promise<T>): Promise<T> {
    return this.captureQueue.run(async () => {
      if (!this.captureChannel?.isOpen && this.server === 'session') await this.followDisplaySize();
      if (!this.captureChannel?.isOpen) this.refuseWhileLying();
      let usedWarm = false;
      try {
        if (!this.captureChannel?.isOpen) {
          usedWarm = this.warm !== undefined;
          this.captureChannel = await CaptureChannel.open(this.connection, this.display, this.screen, this.screenMemory, this.launcher('capture'));
        }
        const answer = await ask(this.captureChannel);
        this.lastGrabAt = performance.now();
        return answer;
      } catch (err) {
        this.dropWarm(usedWarm);
        this.captureChannel?.close();
        this.captureChannel = undefined;
        if (err instanceof GuestProtocolError) this.grabberLied = { at: performance.now(), err };
        if (!(err instanceof CaptureChannelError)) throw err;
        return instead();
      }
    });
  }

  /** Before a grabber starts on a display the session's programs started: the screen is the size it reports (display-size.ts). */
  private async followDisplaySize(): Promise<void> {
    const size = await displaySize(this.connection, this.display, COMMAND_TIMEOUT_MS).catch(() => undefined);
    if (!size || (size.width === this.screen.width && size.height === this.screen.height)) return;
    this.screen = size;
    this.screenMemory.screen = undefined;
    this.screenMemory.spare = undefined;
    this.grabberLied = undefined;
    this.onScreenResize?.(size);
  }

  /** Throws the grabber's last protocol error again if it is recent (see GRABBER_RESTART_AFTER_LIE_MS). */
  private refuseWhileLying(): void {
    const lied = this.grabberLied;
    if (!lied) return;
    const wait = lied.at + GRABBER_RESTART_AFTER_LIE_MS - performance.now();
    if (wait <= 0) return;
    const { channel, reason, message } = lied.err;
    throw new GuestProtocolError(channel, reason, `${message} (the grabber is started again in ${Math.ceil(wait)} ms)`);
  }

  /** A PNG from scrot: one process per capture (the fallback, and the benchmark's floor). */
  async screenshot(): Promise<Buffer> {
    // `scrot -` writes the PNG to standard output: no file in the guest, one round trip. A
    // PNG of the screen is never much larger than its raw RGB pixels.
    const maxPngBytes = this.screen.width * this.screen.height * 4 + 64 * 1024;
    const { stdout } = await this.run(['scrot', '--silent', '-'], undefined, COMMAND_TIMEOUT_MS, maxPngBytes);
    if (stdout.length < 8 || stdout.readUInt32BE(0) !== 0x89504e47) {
      throw new DesktopError('scrot did not return a PNG image');
    }
    return stdout;
  }

  async cursorPosition(timeoutMs = COMMAND_TIMEOUT_MS): Promise<Point> {
    const [answer] = await this.attached(() => this.input([WHERE], timeoutMs));
    if (!answer?.ok || !answer.position) throw new DesktopError('the input helper did not say where the pointer is');
    return answer.position;
  }

  /**
   * Performs the requests of one pointer or key action (see input-requests.ts). For
   * hold_key the keys stay down for a wait on the host, which close() cuts short, and are
   * released whatever happens; a helper that goes away releases what it held itself.
   */
  async perform(plan: InputPlan, timeoutMs = COMMAND_TIMEOUT_MS): Promise<void> {
    const hold = plan.hold;
    await this.attached(() => this.performPlan(plan, hold, timeoutMs));
  }

  private performPlan(plan: InputPlan, hold: InputPlan['hold'], timeoutMs: number): Promise<void> {
    return this.inputQueue.run(async () => {
      // If this fails the helper is gone, and it released whatever it had pressed.
      const answers = await this.sendInput(plan.requests, timeoutMs);
      if (!hold) return checkAnswers(plan.requests, answers);
      try {
        checkAnswers(plan.requests, answers);
        await sleep(hold.ms, undefined, { signal: this.closing.signal });
      } catch (err) {
        if (this.closing.signal.aborted) throw new DesktopError('the session was closed while keys were held');
        throw err;
      } finally {
        if (!this.closing.signal.aborted) await this.sendInput(hold.release, timeoutMs);
      }
    });
  }

  /** Stops the session's input and capture processes (destroy). */
  close(): void {
    this.closing.abort();
    this.inputChannel?.close();
    this.inputChannel = undefined;
    this.captureChannel?.close();
    this.captureChannel = undefined;
  }

  /** Requests on the session's input helper, one batch at a time. */
  private input(requests: readonly InputRequest[], timeoutMs: number): Promise<InputAnswer[]> {
    return this.inputQueue.run(() => this.sendInput(requests, timeoutMs));
  }

  /**
   * One batch on the input helper (see input-channel.ts); the caller holds the queue. A
   * channel that cannot be opened or has died is replaced on the next batch; a batch that
   * failed on it is not repeated (part of it may have run), its error is reported.
   */
  private async sendInput(requests: readonly InputRequest[], timeoutMs: number): Promise<InputAnswer[]> {
    // An action queued behind the last one of a destroyed session must not start a helper.
    if (this.closing.signal.aborted) throw new DesktopError("the session's desktop was closed");
    let usedWarm = false;
    try {
      if (!this.inputChannel?.isOpen) {
        usedWarm = this.warm !== undefined;
        this.inputChannel = await InputChannel.open(this.connection, this.display, this.launcher('input'));
      }
      return await this.inputChannel.run(requests, timeoutMs);
    } catch (err) {
      this.dropWarm(usedWarm);
      this.inputChannel?.close();
      this.inputChannel = undefined;
      throw err instanceof InputChannelError ? new DesktopError(`the input helper failed in the guest: ${err.message}`) : err;
    }
  }

  /** Types text literally, one text at a time per session (other sessions are not held). */
  type(text: string): Promise<void> {
    return this.attached(() => this.typing.run(() => this.typeText(text)));
  }

  private async typeText(text: string): Promise<void> {
    try {
      this.keymap ??= new KeymapBinder(spareKeycodes((await this.run(['xmodmap', '-pke'])).stdout.toString('utf8')));
      // xdotool types "\n" as the Linefeed keysym, which most applications ignore: a new
      // line is pressed as Return, as a person would.
      const lines = text.replace(/\r\n?/g, '\n').split('\n');
      for (const [index, line] of lines.entries()) {
        if (index > 0) await this.run(['xdotool', 'key', 'Return']);
        for (const { chunk, bindings } of this.keymap.plan(line)) {
          // xmodmap reads the bindings on stdin; they are made from code points, not from text.
          if (bindings) await this.run(['xmodmap', '-'], bindings);
          await this.run(['xdotool', 'type', '--delay', String(TYPE_DELAY_MS), '--file', '-'], chunk, typingTimeout(chunk));
        }
      }
    } catch (err) {
      // The keymap may be other than we think (e.g. the display restarted): learn it again.
      this.keymap = undefined;
      throw err;
    }
  }

  private async run(
    argv: string[],
    stdin?: string,
    timeoutMs = COMMAND_TIMEOUT_MS,
    maxOutputBytes = MAX_COMMAND_OUTPUT_BYTES,
  ): Promise<{ stdout: Buffer; stderr: Buffer }> {
    // A UTF-8 locale, or xdotool cannot decode non-ASCII text (C.UTF-8 is built into glibc).
    const command = `LC_ALL=C.UTF-8 DISPLAY=:${this.display} ${commandLine(argv)}`;
    const result = await this.connection.exec(command, { stdin, timeoutMs, maxOutputBytes });
    if (result.exitCode !== 0) {
      const detail = result.stderr.toString('utf8').trim().slice(0, 500) || `exit ${result.exitCode ?? result.signal}`;
      throw new DesktopError(`${argv[0]} failed in the guest: ${detail}`);
    }
    return result;
  }
}

/**
 * A refused request is the client's error when it names a keysym the guest's X library
 * does not know (the host's list is X11's, the guest's Xlib may be older): a 400 naming the
 * field. Any other refusal means host and helper disagree: the guest's fault, a 502.
 */
function checkAnswers(requests: readonly InputRequest[], answers: readonly InputAnswer[]): void {
  for (const [index, answer] of answers.entries()) {
    if (answer.ok) continue;
    const request = requests[index];
    if (request?.verb === 'key' && answer.reason.startsWith('unknown keysym')) {
      throw new InvalidRequestError(`${request.field} has an unknown key name "${request.keysym}": the guest's X server does not know it`);
    }
    throw new DesktopError(`the input helper refused a request: ${answer.reason}`);
  }
}

function typingTimeout(text: string): number {
  return COMMAND_TIMEOUT_MS + [...text].length * TYPE_DELAY_MS * 3;
}
