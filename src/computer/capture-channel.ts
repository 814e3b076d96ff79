import type { GuestChannel, GuestTransport } from '../transport/index.js';
import { GuestProtocolError } from '../errors.js';
import { inflateRect, MAX_RECTS, parseRectTable, RECT_ENTRY_BYTES, RECTS_PREFIX_BYTES, rectTableLength, type RectTable } from './damage-rects.js';
import { BandedScreen, type RawFrame } from './frame-bands.js';
import { HEADER_BYTES, parseFrameHeader, type FrameHeader } from './frame-header.js';
import { GuestProcessChannel } from './guest-process-channel.js';
import type { Size } from './scaling.js';

export type { RawFrame } from './frame-bands.js';

export class CaptureChannelError extends Error {}

/**
 * A message being received, after its checked header: a whole frame's pixels; or a
 * changed-rectangles frame's table (its 8-byte prefix first, then as many entries as the
 * prefix counts: `wanted` bytes), then its compressed streams (the payload from byte `base` on).
 */
type Incoming =
  | { stage: 'pixels'; header: FrameHeader; payload: Buffer; filled: number }
  | { stage: 'table'; header: FrameHeader; payload: Buffer; filled: number; wanted: number }
  | { stage: 'streams'; header: FrameHeader; table: RectTable; base: number; payload: Buffer; filled: number };

/**
 * What a session's grabbers hand on to the next one (the desktop keeps it): the last screen
 * and a buffer for receiving a whole frame. A grabber started again (one died, or lied: see
 * desktop.ts) begins with a whole frame, usually the screen as it was: received into the
 * spare buffer and compared band by band with the last screen, it costs no new memory unless
 * the screen changed (BandedScreen.successor). A new 3 MiB buffer per start is what made V8
 * run a full collection per restart when a lying grabber was restarted every second.
 */
export interface ScreenMemory {
  screen?: BandedScreen;
  spare?: Buffer;
}

/** Screen versions, unique in the process: a grabber opened anew never repeats an old channel's number. */
let lastVersion = 0;

/** Where the image installs the grabber (src/guest/files/sbx-capture). */
export const CAPTURE_COMMAND = '/usr/local/bin/sbx-capture';

/** How the grabber reads the screen, as its last frame said (see sbx-capture). */
export interface GrabberMethod {
  /** Pixels through MIT-SHM (else XGetImage through the X socket). */
  shm: boolean;
  /** Only what XDamage reported changed is read and sent (else the whole screen). */
  damage: boolean;
}

/**
 * The session's long-lived screen grabber (sbx-capture in the guest) on a channel of its
 * SSH connection: a request line asks for a frame; the first answer is the whole screen,
 * raw, and every later one only the rectangles that changed, compressed. No process starts
 * and nothing is encoded in the guest per screenshot; the host encodes (see frame-image.ts).
 *
 * The grabber is the guest's, so its answers are checked as they arrive (frame-header.ts,
 * damage-rects.ts): a header that does not fit the session's screen fails the request before
 * its payload is read, the payload goes into one buffer of the checked length, and the
 * rectangles are checked whole before any is inflated, each capped at its own size.
 *
 * A frame handed out is never modified: an unchanged screen gives the very same RawFrame
 * object again (callers may key caches on it), a changed one a new object.
 *
 * Copy on write (frame-bands.ts): the channel keeps the screen in bands of rows and patches
 * them in place while no RawFrame holds them; once one does (grab, frame()), a change copies
 * only the bands it touches. A watcher that copies the screen out instead (copyInto: the
 * recorder, 5 times a second) costs no allocation per frame. (A whole new frame per change is
 * what made V8 run full collections several times a second under load or while recording.)
 */
export class CaptureChannel extends GuestProcessChannel<void> {
  /** The header being received (at most HEADER_BYTES). */
  private head = Buffer.alloc(0);
  /** The message being received, once its header has passed (see Incoming). */
  private message: Incoming | undefined;
  /** The screen as the grabber last sent it, which changed rectangles patch (its previous frame too). */
  private screenNow: BandedScreen | undefined;
  /** Names the screen as it is now: a new number whenever it changes (0: no frame yet). */
  private screenVersion = 0;
  /** A complete message is being decoded (inflated on the thread pool): the grabber must be silent. */
  private decoding = false;
  /** What the last changed-rectangles frame said about the grabber. */
  method: GrabberMethod | undefined;

  private constructor(
    private readonly screen: Size,
    private readonly memory: ScreenMemory,
  ) {
    super((message) => new CaptureChannelError(message));
  }

  /** `launch`: the grabber's channel from elsewhere (a warm launcher: warm-helpers.ts) instead of a process started here. */
  static async open(
    connection: GuestTransport,
    display: number,
    screen: Size,
    memory: ScreenMemory = {},
    launch?: () => Promise<GuestChannel>,
  ): Promise<CaptureChannel> {
    const capture = new CaptureChannel(screen, memory);
    const channel = launch ? await launch() : await connection.spawn(`DISPLAY=:${display} exec ${CAPTURE_COMMAND}`);
    capture.attach(channel, 'capture', { label: 'capture', sink: connection });
    return capture;
  }

  /** One frame. One request at a time (the caller serialises). */
  async grab(timeoutMs: number): Promise<RawFrame> {
    await this.refresh(timeoutMs);
    return this.frame();
  }

  /** Brings the channel's screen up to date without handing out a frame (see copyInto). */
  refresh(timeoutMs: number): Promise<void> {
    return this.request('grab\n', timeoutMs);
  }

  /** The screen as the channel holds it now, as a frame that is never modified (the same object while it has not changed). */
  frame(): RawFrame {
    if (!this.screenNow) throw new CaptureChannelError('no frame has been received yet');
    return this.screenNow.handOut();
  }

  /** Which version of the screen the channel holds (see copyInto). */
  get version(): number {
    return this.screenVersion;
  }

  /**
   * Copies the screen as the channel holds it into `target` (rows packed, `width * 4` bytes
   * each), unless it is still version `have`; returns the version now in `target`, or undefined
   * before any frame. Synchronous, so no change lands halfway; nothing is handed out, so the
   * channel goes on patching its buffer in place.
   */
  copyInto(target: Buffer, have: number | undefined): number | undefined {
    if (!this.screenNow) return undefined;
    if (have === this.screenVersion) return have;
    try {
      this.screenNow.copyInto(target);
    } catch (err) {
      throw new CaptureChannelError((err as Error).message);
    }
    return this.screenVersion;
  }

  /**
   * One frame, once the X server has reported no damage for `quietMs` (or `maxMs` have
   * passed): the grabber waits on damage events instead of the host comparing captures.
   * The request is made of two integers only, formatted here.
   */
  async settled(quietMs: number, maxMs: number, timeoutMs: number): Promise<RawFrame> {
    const whole = (n: number) => (Number.isFinite(n) ? Math.max(0, Math.min(Math.round(n), 2 ** 31 - 1)) : 0);
    await this.request(`settle ${whole(quietMs)} ${whole(maxMs)}\n`, timeoutMs + whole(maxMs));
    return this.frame();
  }

  protected onData(chunk: Buffer): void {
    try {
      this.take(chunk);
    } catch (err) {
      this.fail(err as Error);
    }
  }

  private take(chunk: Buffer): void {
    let data = chunk;
    while (data.length > 0) {
      if (!this.isOpen) return;
      // The grabber speaks only when asked: anything else is not our grabber.
      if (!this.busy || this.decoding) throw new GuestProtocolError('capture', 'unrequested_output', 'the guest sent frame data nobody asked for');
      if (!this.message) {
        const wanted = HEADER_BYTES - this.head.length;
        this.head = Buffer.concat([this.head, data.subarray(0, wanted)]);
        data = data.subarray(wanted);
        if (this.head.length < HEADER_BYTES) return;
        const header = parseFrameHeader(this.head, this.screen);
        this.head = Buffer.alloc(0);
        if (header.kind === 'rects') this.changes(header);
        // Allocated only now, at a length checked against the screen. A changed-rectangles
        // frame's table comes first, in a buffer of its own (at most 1288 bytes).
        this.message =
          header.kind === 'full'
            ? { stage: 'pixels', header, payload: this.wholeFrameBuffer(header), filled: 0 }
            : { stage: 'table', header, payload: Buffer.allocUnsafe(RECTS_PREFIX_BYTES + MAX_RECTS * RECT_ENTRY_BYTES), filled: 0, wanted: RECTS_PREFIX_BYTES };
      }
      const message = this.message;
      const end = message.stage === 'table' ? message.wanted : message.payload.length;
      const copied = data.copy(message.payload, message.filled, 0, end - message.filled);
      message.filled += copied;
      data = data.subarray(copied);
      if (message.filled < end) return;
      this.message = this.next(message);
    }
  }

  /** Where a whole frame is received: the spare buffer when the last screen will take it (see ScreenMemory). */
  private wholeFrameBuffer(header: FrameHeader): Buffer {
    const { spare, screen } = this.memory;
    if (spare?.length === header.length && screen?.fits(header.width, header.height, header.stride)) return spare;
    return Buffer.allocUnsafe(header.length);
  }

  /** What follows a complete stage of a message: the next stage, or the frame applied (undefined). */
  private next(message: Incoming): Incoming | undefined {
    const { header } = message;
    if (message.stage === 'table' && message.wanted === RECTS_PREFIX_BYTES) {
      // Flags and count: checked before a byte of the entries is read.
      const wanted = rectTableLength(message.payload, header.length);
      if (wanted > RECTS_PREFIX_BYTES) return { ...message, wanted };
    }
    if (message.stage === 'table') {
      // The whole table, checked against the screen and the header's length before the
      // streams are kept: they get one buffer of exactly the length the table accounts for.
      const table = parseRectTable(message.payload, header, header.length);
      if (message.wanted === header.length) return void this.decode(header, table, Buffer.alloc(0), message.wanted);
      return { stage: 'streams', header, table, base: message.wanted, payload: Buffer.allocUnsafe(header.length - message.wanted), filled: 0 };
    }
    if (message.stage === 'streams') return void this.decode(header, message.table, message.payload, message.base);
    const { width, height, stride } = header;
    const last = this.memory.screen;
    if (last?.fits(width, height, stride)) {
      // The bands are the last screen's or copies: the payload is free again.
      this.screenNow = last.successor(message.payload);
      this.memory.spare = message.payload;
    } else {
      this.screenNow = new BandedScreen(width, height, stride, message.payload);
    }
    this.memory.screen = this.screenNow;
    this.screenVersion = ++lastVersion;
    this.settle();
    return undefined;
  }

  /** The screen a changed-rectangles frame changes: checked before a byte of its payload is read. */
  private changes(header: FrameHeader): BandedScreen {
    const now = this.screenNow;
    if (!now) throw new GuestProtocolError('capture', 'bad_rects', 'the guest sent changed rectangles before any whole frame');
    if (now.stride !== header.stride) throw new GuestProtocolError('capture', 'bad_rects', 'the guest changed the row stride in a changed-rectangles frame');
    return now;
  }

  /** Applies a changed-rectangles frame (its table checked, `streams` the payload from byte `base` on); its streams are inflated off the event loop. */
  private decode(header: FrameHeader, table: RectTable, streams: Buffer, base: number): void {
    const now = this.changes(header);
    this.method = { shm: table.shm, damage: table.damage };
    if (table.rects.length === 0) return this.settle();
    this.decoding = true;
    Promise.all(table.rects.map((rect) => inflateRect(streams, rect, base))).then(
      (pixels) => {
        this.decoding = false;
        // Closed meanwhile (a timeout, close()): the request has already failed.
        if (!this.isOpen) return;
        // Bands a frame handed out holds are never written: the change goes to copies of them.
        now.patch(table.rects, pixels);
        this.screenVersion = ++lastVersion;
        this.settle();
      },
      (err: Error) => {
        this.decoding = false;
        this.fail(err);
      },
    );
  }
}
