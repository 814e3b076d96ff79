import type { GuestConnection } from '../transport/ssh-connection.js';
import { GuestProcessChannel } from './guest-process-channel.js';

/** One screen frame as the X server holds it: 32 bits per pixel, BGRX, rows `stride` apart. */
export interface RawFrame {
  width: number;
  height: number;
  stride: number;
  pixels: Buffer;
}

export class CaptureChannelError extends Error {}

const HEADER_BYTES = 20;
/** A whole frame, or only the rows changed since the previous one (see sbx-capture). */
const FULL = 'SBXF';
const DELTA = 'SBXD';
/** Where the image installs the grabber (src/guest/files/sbx-capture). */
export const CAPTURE_COMMAND = '/usr/local/bin/sbx-capture';

/**
 * The session's long-lived screen grabber (sbx-capture in the guest) on a channel of its
 * SSH connection: a newline asks for a frame, raw pixels come back. No process starts and
 * nothing is encoded in the guest per screenshot; the host encodes (see frame-image.ts).
 */
export class CaptureChannel extends GuestProcessChannel<RawFrame> {
  private chunks: Buffer[] = [];
  private buffered = 0;
  /** The message being received: its header, and its total length with the header. */
  private header: { kind: string; width: number; height: number; stride: number } | undefined;
  private expected: number | undefined;
  /** The last frame, which a delta patches (the grabber keeps the same one). */
  private last: RawFrame | undefined;

  private constructor() {
    super((message) => new CaptureChannelError(message));
  }

  static async open(connection: GuestConnection, display: number): Promise<CaptureChannel> {
    const capture = new CaptureChannel();
    capture.attach(await connection.spawn(`DISPLAY=:${display} exec ${CAPTURE_COMMAND}`), 'capture');
    return capture;
  }

  /** One frame. One request at a time (the caller serialises). */
  grab(timeoutMs: number): Promise<RawFrame> {
    return this.request('\n', timeoutMs);
  }

  protected onData(chunk: Buffer): void {
    this.chunks.push(chunk);
    this.buffered += chunk.length;
    // Chunks are only gathered until the frame is complete, then joined once: joining on
    // every chunk would copy a 3 MB frame dozens of times.
    if (this.expected === undefined) {
      if (this.buffered < HEADER_BYTES) return;
      const head = Buffer.concat(this.chunks, this.buffered);
      this.chunks = [head];
      const kind = head.toString('latin1', 0, 4);
      if (kind !== FULL && kind !== DELTA) return this.fail(new CaptureChannelError('the capture stream is out of step'));
      this.header = { kind, width: head.readUInt32LE(4), height: head.readUInt32LE(8), stride: head.readUInt32LE(12) };
      this.expected = HEADER_BYTES + head.readUInt32LE(16);
    }
    if (this.buffered < this.expected || !this.header) return;
    const all = Buffer.concat(this.chunks, this.buffered);
    const payload = all.subarray(HEADER_BYTES, this.expected);
    const rest = all.subarray(this.expected);
    const { kind, width, height, stride } = this.header;
    let frame: RawFrame;
    if (kind === FULL) frame = { width, height, stride, pixels: payload };
    else if (this.last) frame = applyDelta(this.last, payload);
    else return this.fail(new CaptureChannelError('a changed-rows frame came before any whole frame'));
    this.last = frame;
    this.chunks = rest.length ? [rest] : [];
    this.buffered = rest.length;
    this.expected = undefined;
    this.header = undefined;
    this.settle(frame);
  }
}

/**
 * The previous frame with the changed rows put in. A new buffer when anything changed (a
 * frame handed out is never modified); the same frame when nothing did.
 */
export function applyDelta(previous: RawFrame, payload: Buffer): RawFrame {
  const count = payload.readUInt32LE(0);
  if (count === 0) return previous;
  const pixels = Buffer.from(previous.pixels);
  let offset = 4 + count * 8;
  for (let i = 0; i < count; i++) {
    const first = payload.readUInt32LE(4 + i * 8);
    const rows = payload.readUInt32LE(8 + i * 8);
    const length = rows * previous.stride;
    payload.copy(pixels, first * previous.stride, offset, offset + length);
    offset += length;
  }
  return { ...previous, pixels };
}
