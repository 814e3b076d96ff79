import { setTimeout as sleep } from 'node:timers/promises';
import type { ComputerAction, RunnableActionName } from './actions.js';
import type { RawFrame } from './capture-channel.js';
import type { Capture, Desktop } from './desktop.js';
import { EncodeCache } from './encode-cache.js';
import { encodeFrame, encodeFrameRegion, sameFrame, type Region } from './frame-image.js';
import { cropPng, encodePng } from './image.js';
import type { Point, Scaler, Size } from './scaling.js';
import { inputPlan, isPointerOrKeyAction } from './input-requests.js';
import { BandedPngEncoder } from './png/banded-png.js';
import { PNG_FORMAT, type EncodedImage, type ScreenshotFormat } from './screenshot-format.js';
import { SerialQueue } from '../util/serial-queue.js';

export interface SettleOptions {
  /** Give up waiting for the screen to settle after this long, and return what is there. */
  maxMs: number;
  /** No damage for this long (or two scrot captures this far apart that are identical) means the screen has settled. */
  intervalMs: number;
}

export interface ComputerOutcome {
  action: RunnableActionName;
  /** Text for the model, e.g. "X=10,Y=20" for cursor_position. */
  output?: string;
  /** The pointer position in the model's space (cursor_position). */
  cursor?: Point;
  /** A screenshot in the model's space (or, for zoom, the region at full resolution). */
  image?: EncodedImage;
  /** How long the screen took to settle before the screenshot that follows an action. */
  settleMs?: number;
}

/** Actions whose result is their own output, not a screenshot taken afterwards. */
const NO_SCREENSHOT_AFTER: ReadonlySet<RunnableActionName> = new Set(['screenshot', 'cursor_position', 'zoom']);

/**
 * The computer tool of one session: performs validated actions on its desktop, in the
 * model's coordinate space, and takes the screenshot that follows them once the screen
 * has stopped changing (instead of the reference's fixed 2 s sleep).
 */
export class ComputerTool {
  /** The last images encoded: a screen that has not changed is not encoded again. */
  private readonly encoded = new EncodeCache();
  /**
   * Full-size PNGs re-encode only the bands of rows that changed since the last one. It keeps
   * the last such frame and views into its PNG: while full-size PNGs are what the session asks
   * for (the default), the very objects `encoded` holds.
   */
  private readonly pngBands = new BandedPngEncoder();
  /**
   * One encoding at a time per session: libvips runs on libuv's small thread pool (4 threads,
   * shared with file I/O), and a client asking for many costly images at once (lossless WebP of
   * a large screen) must queue behind itself, not take the pool from every other session.
   */
  private readonly encoding = new SerialQueue();

  constructor(
    private readonly desktop: Desktop,
    /** Replaced when a display the session's programs start turns out to have another size (Desktop.onScreenResize). */
    public scaler: Scaler,
    private readonly settle: SettleOptions,
  ) {}

  /** Throws unless the display answers within the time given. */
  async probeDisplay(timeoutMs: number): Promise<void> {
    await this.desktop.cursorPosition(timeoutMs);
  }

  /**
   * The screen as the capture channel holds it (the same object while nothing changed), at
   * most `maxAgeMs` old unless a capture is under way, or undefined when only scrot works: for
   * the recorder and the screen stream, which share the session's one grabber with screenshots
   * rather than start another, and never make a screenshot wait in its queue (Desktop.watchFrame).
   */
  watchFrame(maxAgeMs: number): Promise<RawFrame | undefined> {
    return this.desktop.watchFrame(maxAgeMs);
  }

  /** The recorder's way to watch: the screen copied into its own buffer, no frame allocated (Desktop.copyFrameInto). */
  copyFrameInto(maxAgeMs: number, target: Buffer, have: number | undefined): Promise<number | undefined> {
    return this.desktop.copyFrameInto(maxAgeMs, target, have);
  }

  /** A screenshot of the real screen, unscaled. */
  async fullScreenshot(choice: ScreenshotFormat = PNG_FORMAT): Promise<EncodedImage> {
    return this.encode(await this.desktop.capture(), this.scaler.screen, choice);
  }

  /** A screenshot in the model's space. */
  async screenshot(choice: ScreenshotFormat = PNG_FORMAT): Promise<EncodedImage> {
    return this.encode(await this.desktop.capture(), this.scaler.model, choice);
  }

  /**
   * Performs an action; `format` is the image format of any screenshot it returns (the
   * screenshot and zoom actions, and the settled screen with `screenshotAfter`).
   */
  async run(action: ComputerAction, options: { screenshotAfter: boolean; format?: ScreenshotFormat }): Promise<ComputerOutcome> {
    const outcome: ComputerOutcome = { action: action.action };
    const choice = options.format ?? PNG_FORMAT;
    switch (action.action) {
      case 'screenshot':
        outcome.image = await this.screenshot(choice);
        return outcome;
      case 'cursor_position': {
        const cursor = this.scaler.toModel(await this.desktop.cursorPosition());
        outcome.cursor = cursor;
        outcome.output = `X=${cursor.x},Y=${cursor.y}`;
        return outcome;
      }
      case 'zoom':
        outcome.image = await this.encodeRegion(await this.desktop.capture(), action.region, choice);
        return outcome;
      case 'type':
        await this.desktop.type(action.text);
        break;
      case 'wait':
        await sleep(action.seconds * 1000);
        break;
      default:
        if (isPointerOrKeyAction(action)) await this.desktop.perform(inputPlan(action));
    }
    if (options.screenshotAfter && !NO_SCREENSHOT_AFTER.has(action.action)) {
      const { capture, settleMs } = await this.settledCapture();
      outcome.image = await this.encode(capture, this.scaler.model, choice);
      outcome.settleMs = settleMs;
    }
    return outcome;
  }

  /**
   * The screen once it has stopped changing, or when the time is up. With the grabber, the
   * guest waits for `intervalMs` without damage from the X server and sends one frame
   * (settleMs: from the request until that frame arrived). Without it (scrot), captures are
   * taken until two consecutive ones are identical.
   */
  private async settledCapture(): Promise<{ capture: Capture; settleMs: number }> {
    const started = performance.now();
    const frame = await this.desktop.settledCapture(this.settle.intervalMs, this.settle.maxMs);
    if (frame) return { capture: { frame }, settleMs: Math.round(performance.now() - started) };
    let previous = await this.desktop.capture();
    while (performance.now() - started < this.settle.maxMs) {
      await sleep(this.settle.intervalMs);
      const next = await this.desktop.capture();
      if (sameCapture(next, previous)) break;
      previous = next;
    }
    return { capture: previous, settleMs: Math.round(performance.now() - started) };
  }

  /** A raw frame is encoded once per (frame, format, size); scrot's PNGs are new every time. */
  private encode(capture: Capture, size: Size, choice: ScreenshotFormat): Promise<EncodedImage> {
    const { frame } = capture;
    if (!frame) return this.encoding.run(() => encodePng(capture.png, this.scaler.screen, size, choice));
    return this.encoded.get(frame, { choice, size }, () => this.encoding.run(() => encodeFrame(frame, choice, size, this.pngBands)));
  }

  private encodeRegion(capture: Capture, region: Region, choice: ScreenshotFormat): Promise<EncodedImage> {
    const { frame } = capture;
    if (!frame) return this.encoding.run(() => cropPng(capture.png, region, choice));
    return this.encoded.get(frame, { choice, region }, () => this.encoding.run(() => encodeFrameRegion(frame, region, choice)));
  }
}

/** Same screen? Raw frames by their pixels; scrot's PNGs by their bytes (its encoder is deterministic). */
function sameCapture(a: Capture, b: Capture): boolean {
  if (a.frame && b.frame) return sameFrame(a.frame, b.frame);
  if (a.png && b.png) return a.png.equals(b.png);
  return false;
}
