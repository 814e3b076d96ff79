import { GuestProtocolError } from '../errors.js';
import type { Size } from './scaling.js';

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
/** A delta's count of row ranges, then (first row, row count) per range. */
const DELTA_COUNT_BYTES = 4;
const DELTA_RANGE_BYTES = 8;

export type FrameKind = 'full' | 'delta';

export interface FrameHeader {
  kind: FrameKind;
  width: number;
  height: number;
  stride: number;
  /** Payload bytes after the header. */
  length: number;
}

/** A run of changed rows in a delta. */
export interface RowRange {
  first: number;
  rows: number;
}

const TAGS: Readonly<Record<string, FrameKind>> = { SBXF: 'full', SBXD: 'delta' };

function badFrame(reason: string, detail: string): GuestProtocolError {
  return new GuestProtocolError('capture', reason, `the guest sent a bad frame: ${detail}`);
}

/** The most payload a delta of this screen may carry: every row changed, one range per row. */
export function maxDeltaLength(height: number, stride: number): number {
  return DELTA_COUNT_BYTES + height * DELTA_RANGE_BYTES + height * stride;
}

/**
 * Reads and checks a header (HEADER_BYTES bytes): its size must be the screen's, its row
 * stride 4 bytes a pixel plus at most MAX_ROW_PADDING (a multiple of 4, as X pads rows), a
 * full frame exactly stride*height bytes, a delta at most maxDeltaLength. Throws a
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
  if (kind === 'delta' && (length < DELTA_COUNT_BYTES || length > maxDeltaLength(height, stride))) {
    throw badFrame('bad_length', `a changed-rows frame of ${length} bytes (at most ${maxDeltaLength(height, stride)} for this screen)`);
  }
  return { kind, width, height, stride, length };
}

/**
 * The row ranges of a delta's payload, checked: within the screen, in order, not
 * overlapping, none empty, and exactly as many pixel bytes after the table as they cover.
 */
export function parseDeltaRanges(payload: Buffer, header: Pick<FrameHeader, 'height' | 'stride'>): RowRange[] {
  if (payload.length < DELTA_COUNT_BYTES) throw badFrame('bad_delta', `a changed-rows payload of ${payload.length} bytes`);
  const count = payload.readUInt32LE(0);
  const tableEnd = DELTA_COUNT_BYTES + count * DELTA_RANGE_BYTES;
  if (count > header.height || tableEnd > payload.length) {
    throw badFrame('bad_delta', `${count} row ranges in a payload of ${payload.length} bytes`);
  }
  const ranges: RowRange[] = [];
  let nextFree = 0;
  let covered = 0;
  for (let i = 0; i < count; i++) {
    const first = payload.readUInt32LE(DELTA_COUNT_BYTES + i * DELTA_RANGE_BYTES);
    const rows = payload.readUInt32LE(DELTA_COUNT_BYTES + i * DELTA_RANGE_BYTES + 4);
    if (rows === 0 || first < nextFree || first + rows > header.height) {
      throw badFrame('bad_delta', `row range ${i} (rows ${first}..${first + rows}) is empty, out of order or off the screen`);
    }
    nextFree = first + rows;
    covered += rows;
    ranges.push({ first, rows });
  }
  if (payload.length !== tableEnd + covered * header.stride) {
    throw badFrame('bad_delta', `${covered} changed rows need ${tableEnd + covered * header.stride} bytes, the payload has ${payload.length}`);
  }
  return ranges;
}
