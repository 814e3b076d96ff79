import type { GuestConnection } from '../transport/ssh-connection.js';
import { GuestProtocolError } from '../errors.js';
import { HEADER_BYTES, parseDeltaRanges, parseFrameHeader, type FrameHeader } from './frame-header.js';
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

/**
 * The session's long-lived screen grabber (sbx-capture in the guest) on a channel of its
 * SSH connection: a newline asks for a frame, raw pixels come back. No process starts and
 * nothing is encoded in the guest per screenshot; the host encodes (see frame-image.ts).
 *
 * The grabber is the guest's, so its answers are checked as they arrive (frame-header.ts):
 * a header that does not fit the session's screen fails the request before its payload is
 * read, and the payload goes into one buffer of the checked length, never more.
 */
export class CaptureChannel extends GuestProcessChannel<RawFrame> {
  /** The header being received (at most HEADER_BYTES). */
  private head = Buffer.alloc(0);
  /** The message being received, once its header has passed: its payload, filled up to `filled`. */
  private message: { header: FrameHeader; payload: Buffer; filled: number } | undefined;
  /** The last frame, which a delta patches (the grabber keeps the same one). */
  private last: RawFrame | undefined;

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
    return this.request('\n', timeoutMs);
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
      if (!this.busy) throw new GuestProtocolError('capture', 'unrequested_output', 'the guest sent frame data nobody asked for');
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
      this.settle(this.frameOf(message.header, message.payload));
    }
  }

  private frameOf(header: FrameHeader, payload: Buffer): RawFrame {
    const { width, height, stride } = header;
    if (header.kind === 'full') return (this.last = { width, height, stride, pixels: payload });
    const last = this.last;
    if (!last) throw new GuestProtocolError('capture', 'bad_delta', 'the guest sent a changed-rows frame before any whole frame');
    if (last.stride !== stride) throw new GuestProtocolError('capture', 'bad_delta', 'the guest changed the row stride in a changed-rows frame');
    return (this.last = applyDelta(last, payload));
  }
}

/**
 * The previous frame with the changed rows put in. A new buffer when anything changed (a
 * frame handed out is never modified); the same frame when nothing did.
 */
export function applyDelta(previous: RawFrame, payload: Buffer): RawFrame {
  // Checked against the screen and this payload before anything is copied.
  const ranges = parseDeltaRanges(payload, previous);
  if (ranges.length === 0) return previous;
  const pixels = Buffer.from(previous.pixels);
  let offset = 4 + ranges.length * 8;
  for (const { first, rows } of ranges) {
    const length = rows * previous.stride;
    payload.copy(pixels, first * previous.stride, offset, offset + length);
    offset += length;
  }
  return { ...previous, pixels };
}
