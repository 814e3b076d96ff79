import { setTimeout as sleep } from 'node:timers/promises';
import type { ActionName, ComputerAction } from './actions.js';
import type { Capture, Desktop } from './desktop.js';
import { framePng, framePngRegion, sameFrame } from './frame-image.js';
import { cropPng, scalePng } from './image.js';
import type { Point, Scaler, Size } from './scaling.js';
import { inputPlan, isPointerOrKeyAction } from './input-requests.js';

export interface SettleOptions {
  /** Give up waiting for the screen to settle after this long, and return what is there. */
  maxMs: number;
  /** No damage for this long (or two scrot captures this far apart that are identical) means the screen has settled. */
  intervalMs: number;
}

export interface ComputerOutcome {
  action: ActionName;
  /** Text for the model, e.g. "X=10,Y=20" for cursor_position. */
  output?: string;
  /** The pointer position in the model's space (cursor_position). */
  cursor?: Point;
  /** A PNG in the model's space (or, for zoom, the region at full resolution). */
  image?: Buffer;
  /** How long the screen took to settle before the screenshot that follows an action. */
  settleMs?: number;
}

/** Actions whose result is their own output, not a screenshot taken afterwards. */
const NO_SCREENSHOT_AFTER: ReadonlySet<ActionName> = new Set(['screenshot', 'cursor_position', 'zoom']);

/**
 * The computer tool of one session: performs validated actions on its desktop, in the
 * model's coordinate space, and takes the screenshot that follows them once the screen
 * has stopped changing (instead of the reference's fixed 2 s sleep).
 */
export class ComputerTool {
  constructor(
    private readonly desktop: Desktop,
    readonly scaler: Scaler,
    private readonly settle: SettleOptions,
  ) {}

  /** Throws unless the display answers within the time given. */
  async probeDisplay(timeoutMs: number): Promise<void> {
    await this.desktop.cursorPosition(timeoutMs);
  }

  /** A screenshot of the real screen, unscaled. */
  async fullScreenshot(): Promise<Buffer> {
    return this.encode(await this.desktop.capture(), this.scaler.screen);
  }

  /** A screenshot in the model's space. */
  async screenshot(): Promise<Buffer> {
    return this.encode(await this.desktop.capture(), this.scaler.model);
  }

  async run(action: ComputerAction, options: { screenshotAfter: boolean }): Promise<ComputerOutcome> {
    const outcome: ComputerOutcome = { action: action.action };
    switch (action.action) {
      case 'screenshot':
        outcome.image = await this.screenshot();
        return outcome;
      case 'cursor_position': {
        const cursor = this.scaler.toModel(await this.desktop.cursorPosition());
        outcome.cursor = cursor;
        outcome.output = `X=${cursor.x},Y=${cursor.y}`;
        return outcome;
      }
      case 'zoom': {
        const capture = await this.desktop.capture();
        outcome.image = capture.frame ? await framePngRegion(capture.frame, action.region) : await cropPng(capture.png, action.region);
        return outcome;
      }
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
      outcome.image = await this.encode(capture, this.scaler.model);
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

  private encode(capture: Capture, size: Size): Promise<Buffer> {
    return capture.frame ? framePng(capture.frame, size) : scalePng(capture.png, this.scaler.screen, size);
  }
}

/** Same screen? Raw frames by their pixels; scrot's PNGs by their bytes (its encoder is deterministic). */
function sameCapture(a: Capture, b: Capture): boolean {
  if (a.frame && b.frame) return sameFrame(a.frame, b.frame);
  if (a.png && b.png) return a.png.equals(b.png);
  return false;
}
