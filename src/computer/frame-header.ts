import { GuestProtocolError } from '../errors.js';
import type { Size } from './scaling.js';
import { MAX_RECTS, RECT_ENTRY_BYTES, RECTS_PREFIX_BYTES, maxCompressedLength } from './damage-rects.js';

/**
 * The capture protocol's framing (see src/guest/files/sbx-capture), checked against the
 * session's screen before a byte of the payload is kept. The grabber runs in the guest, and
 * whoever controls the desktop can replace it: every number it sends is a claim to check, not
 * a size to allocate.
 */

/** Tag, width, height, bytes per row, payload length: a 4-byte tag and four u32 LE. */
export const HEADER_BYTES = 20;
/**
 * Bytes an X server may pad a row with beyond its 4 bytes per pixel. Xvfb pads 32-bit rows to
 * 32 bits (none at all); anything wider than a cache line is not padding.
 */
export const MAX_ROW_PADDING = 63;
const BYTES_PER_PIXEL = 4;

/**
 * The most payload a changed-rectangles frame of this screen may carry: its table with every
 * entry used, and rectangles that cover the screen once (they may not overlap), each
 * compressed no worse than zlib's own bound allows.
 */
export function maxRectsLength(width: number, height: number): number {
  return RECTS_PREFIX_BYTES + MAX_RECTS * RECT_ENTRY_BYTES + maxCompressedLength(width * height * BYTES_PER_PIXEL) + MAX_RECTS * maxCompressedLength(0);
}
export type FrameKind = 'full' | 'rects';

export interface FrameHeader {
  kind: FrameKind;
  width: number;
  height: number;
  stride: number;
  /** Payload bytes after the header. */
  length: number;
}

const TAGS: Readonly<Record<string, FrameKind>> = { SBXF: 'full', SBXR: 'rects' };

function badFrame(reason: string, detail: string): GuestProtocolError {
  return new GuestProtocolError('capture', reason, `the guest sent a bad frame: ${detail}`);
}

/**
 * Reads and checks a header (HEADER_BYTES bytes): its size must be the screen's, its row
 * stride 4 bytes a pixel plus at most MAX_ROW_PADDING (a multiple of 4, as X pads rows), a
 * full frame exactly stride*height bytes, changed rectangles at most maxRectsLength. Throws a
 * GuestProtocolError otherwise.
 */
export function parseFrameHeader(head: Buffer, screen: Size): FrameHeader {
  if (head.length < HEADER_BYTES) throw new Error(`a frame header is ${HEADER_BYTES} bytes, got ${head.length}`);
  const kind = TAGS[head.toString('latin1', 0, 4)];
  if (!kind) throw badFrame('bad_tag', 'the stream is out of step (no frame tag where one was due)');
  const width = head.readUInt32LE(4);
  const height = head.readUInt32LE(8);
  const stride = head.readUInt32LE(12);
  const length = head.readUInt32LE(16);
  if (width !== screen.width || height !== screen.height) {
    throw badFrame('bad_size', `its size ${width}x${height} is not the screen's ${screen.width}x${screen.height}`);
  }
  const rowBytes = width * BYTES_PER_PIXEL;
  if (stride < rowBytes || stride > rowBytes + MAX_ROW_PADDING || stride % BYTES_PER_PIXEL !== 0) {
    throw badFrame('bad_stride', `${stride} bytes per row for ${width} pixels of 4 bytes`);
  }
  if (kind === 'full' && length !== stride * height) {
    throw badFrame('bad_length', `a whole frame of ${width}x${height} is ${stride * height} bytes, not ${length}`);
  }
  if (kind === 'rects' && (length < RECTS_PREFIX_BYTES || length > maxRectsLength(width, height))) {
    throw badFrame('bad_length', `a changed-rectangles frame of ${length} bytes (at most ${maxRectsLength(width, height)} for this screen)`);
  }
  return { kind, width, height, stride, length };
}
