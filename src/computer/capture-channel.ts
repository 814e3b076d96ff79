import type { GuestConnection } from '../transport/ssh-connection.js';
import { GuestProtocolError } from '../errors.js';
import { inflateRect, parseRectTable, patchFrame } from './damage-rects.js';
import { HEADER_BYTES, parseFrameHeader, type FrameHeader } from './frame-header.js';
import { GuestProcessChannel } from './guest-process-channel.js';
import type { Size } from './scaling.js';

/** One screen frame as the X server holds it: 32 bits per pixel, BGRX, rows `stride` apart. */
export interface RawFrame {
  width: number;
  height: number;
  stride: number;
  pixels: Buffer;
}

export class CaptureChannelError extends Error {}

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
 */
export class CaptureChannel extends GuestProcessChannel<RawFrame> {
  /** The header being received (at most HEADER_BYTES). */
  private head = Buffer.alloc(0);
  /** The message being received, once its header has passed: its payload, filled up to `filled`. */
  private message: { header: FrameHeader; payload: Buffer; filled: number } | undefined;
  /** The last frame, which changed rectangles patch (the grabber's previous frame too). */
  private last: RawFrame | undefined;
  /** A complete message is being decoded (inflated on the thread pool): the grabber must be silent. */
  private decoding = false;
  /** What the last changed-rectangles frame said about the grabber. */
  method: GrabberMethod | undefined;

  private constructor(private readonly screen: Size) {
    super((message) => new CaptureChannelError(message));
  }

  static async open(connection: GuestConnection, display: number, screen: Size): Promise<CaptureChannel> {
    const capture = new CaptureChannel(screen);
    const channel = await connection.spawn(`DISPLAY=:${display} exec ${CAPTURE_COMMAND}`);
    capture.attach(channel, 'capture', { label: 'capture', sink: connection });
    return capture;
  }

  /** One frame. One request at a time (the caller serialises). */
  grab(timeoutMs: number): Promise<RawFrame> {
    return this.request('grab\n', timeoutMs);
  }

  /**
   * One frame, once the X server has reported no damage for `quietMs` (or `maxMs` have
   * passed): the grabber waits on damage events instead of the host comparing captures.
   * The request is made of two integers only, formatted here.
   */
  settled(quietMs: number, maxMs: number, timeoutMs: number): Promise<RawFrame> {
    const whole = (n: number) => (Number.isFinite(n) ? Math.max(0, Math.min(Math.round(n), 2 ** 31 - 1)) : 0);
    return this.request(`settle ${whole(quietMs)} ${whole(maxMs)}\n`, timeoutMs + whole(maxMs));
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
        // Allocated only now, at a length checked against the screen.
        this.message = { header, payload: Buffer.allocUnsafe(header.length), filled: 0 };
      }
      const message = this.message;
      const copied = data.copy(message.payload, message.filled, 0, message.payload.length - message.filled);
      message.filled += copied;
      data = data.subarray(copied);
      if (message.filled < message.payload.length) return;
      this.message = undefined;
      if (message.header.kind === 'full') {
        const { width, height, stride } = message.header;
        this.settle((this.last = { width, height, stride, pixels: message.payload }));
      } else {
        // The table is checked here, synchronously, before anything is inflated.
        this.decode(message.header, message.payload);
      }
    }
  }

  /** Applies a changed-rectangles frame; its streams are inflated off the event loop. */
  private decode(header: FrameHeader, payload: Buffer): void {
    const last = this.last;
    if (!last) throw new GuestProtocolError('capture', 'bad_rects', 'the guest sent changed rectangles before any whole frame');
    if (last.stride !== header.stride) throw new GuestProtocolError('capture', 'bad_rects', 'the guest changed the row stride in a changed-rectangles frame');
    const table = parseRectTable(payload, header);
    this.method = { shm: table.shm, damage: table.damage };
    if (table.rects.length === 0) return this.settle(last);
    this.decoding = true;
    Promise.all(table.rects.map((rect) => inflateRect(payload, rect))).then(
      (pixels) => {
        this.decoding = false;
        // Closed meanwhile (a timeout, close()): the request has already failed.
        if (!this.isOpen) return;
        this.last = { ...last, pixels: patchFrame(last.pixels, last.stride, table.rects, pixels) };
        this.settle(this.last);
      },
      (err: Error) => {
        this.decoding = false;
        this.fail(err);
      },
    );
  }
}
