import { promisify } from 'node:util';
import { inflate } from 'node:zlib';
import { GuestProtocolError } from '../errors.js';

/**
 * The payload of a changed-rectangles frame ("SBXR", see src/guest/files/sbx-capture): u32
 * flags, u32 count, `count` entries of five u32 (x, y, width, height, compressed length),
 * then each rectangle's pixels (width*4 bytes a row, no padding) as one zlib stream.
 *
 * Every number is the guest's claim. The table is checked whole, against the screen and the
 * payload's length, before a byte of the streams is kept (the capture channel reads the table
 * first: a count of 0xFFFFFFFF fails on its 8th byte, not after megabytes), and before a byte
 * is decompressed; each stream is inflated with a hard cap of its rectangle's size (no zip
 * bomb makes the host allocate more) and must give exactly that.
 */

/** Flags and count. */
export const RECTS_PREFIX_BYTES = 8;
/** x, y, width, height, compressed length. */
export const RECT_ENTRY_BYTES = 20;
/** Rectangles a frame may carry: the grabber sends one bounding box rather than more. */
export const MAX_RECTS = 64;
const BYTES_PER_PIXEL = 4;
/** Flag bits: how the grabber read the pixels and knew what changed. */
export const FLAG_SHM = 1;
export const FLAG_DAMAGE = 2;

export interface DamageRect {
  x: number;
  y: number;
  width: number;
  height: number;
  /** Where its zlib stream lies in the payload. */
  offset: number;
  length: number;
}

export interface RectTable {
  /** Pixels read through MIT-SHM (else XGetImage through the X socket). */
  shm: boolean;
  /** Changes known from XDamage (else the whole screen every time). */
  damage: boolean;
  rects: DamageRect[];
}

/** zlib's compressBound: the most a stream of n bytes can take, stored uncompressed. */
export function maxCompressedLength(n: number): number {
  return n + Math.floor(n / 4096) + Math.floor(n / 16384) + Math.floor(n / 33554432) + 13;
}

function badRects(detail: string): GuestProtocolError {
  return new GuestProtocolError('capture', 'bad_rects', `the guest sent a bad frame: ${detail}`);
}

/**
 * The length of the table (flags, count and entries) that starts `payload`, whose first
 * RECTS_PREFIX_BYTES at least have arrived: the flags known, the count at most MAX_RECTS and
 * the table within the `payloadLength` the header announced. Nothing after the prefix is read.
 */
export function rectTableLength(payload: Buffer, payloadLength: number): number {
  if (payloadLength < RECTS_PREFIX_BYTES) throw badRects(`a changed-rectangles payload of ${payloadLength} bytes`);
  if (payload.length < RECTS_PREFIX_BYTES) throw new RangeError(`the table's prefix is ${RECTS_PREFIX_BYTES} bytes, got ${payload.length}`);
  const flags = payload.readUInt32LE(0);
  const count = payload.readUInt32LE(4);
  if (flags > (FLAG_SHM | FLAG_DAMAGE)) throw badRects(`unknown flags ${flags}`);
  const tableEnd = RECTS_PREFIX_BYTES + count * RECT_ENTRY_BYTES;
  if (count > MAX_RECTS || tableEnd > payloadLength) throw badRects(`${count} rectangles in a payload of ${payloadLength} bytes (at most ${MAX_RECTS})`);
  return tableEnd;
}

/**
 * The rectangle table, checked: at most MAX_RECTS, each non-empty and within the screen,
 * no two overlapping, each stream no longer than its rectangle could need, and the streams
 * filling the rest of the payload exactly. `payload` needs to hold the table only (its
 * streams may not have arrived yet) when `payloadLength` says how long the whole is.
 */
export function parseRectTable(payload: Buffer, screen: { width: number; height: number }, payloadLength = payload.length): RectTable {
  const tableEnd = rectTableLength(payload, payloadLength);
  if (payload.length < tableEnd) throw new RangeError(`the table is ${tableEnd} bytes, got ${payload.length}`);
  const flags = payload.readUInt32LE(0);
  const count = (tableEnd - RECTS_PREFIX_BYTES) / RECT_ENTRY_BYTES;
  const rects: DamageRect[] = [];
  let offset = tableEnd;
  for (let i = 0; i < count; i++) {
    const at = RECTS_PREFIX_BYTES + i * RECT_ENTRY_BYTES;
    const [x, y, width, height, length] = [0, 4, 8, 12, 16].map((field) => payload.readUInt32LE(at + field)) as [number, number, number, number, number];
    // u32 sums cannot wrap in JavaScript numbers.
    if (width === 0 || height === 0 || x + width > screen.width || y + height > screen.height) {
      throw badRects(`rectangle ${i} (${width}x${height} at ${x},${y}) is empty or off the ${screen.width}x${screen.height} screen`);
    }
    if (length === 0 || length > maxCompressedLength(width * height * BYTES_PER_PIXEL)) {
      throw badRects(`rectangle ${i} claims ${length} compressed bytes for ${width}x${height} pixels`);
    }
    const rect = { x, y, width, height, offset, length };
    const other = rects.findIndex((r) => overlaps(r, rect));
    if (other >= 0) throw badRects(`rectangles ${other} and ${i} overlap`);
    rects.push(rect);
    offset += length;
  }
  if (offset !== payloadLength) throw badRects(`the rectangles' streams take ${offset} bytes, the payload has ${payloadLength}`);
  return { shm: (flags & FLAG_SHM) !== 0, damage: (flags & FLAG_DAMAGE) !== 0, rects };
}

function overlaps(a: DamageRect, b: DamageRect): boolean {
  return a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height;
}

const inflateAsync = promisify(inflate);

/**
 * A rectangle's pixels, inflated on the thread pool (never on the event loop) with a cap of
 * exactly its size: a stream that would give more is stopped there, one that gives less (or
 * is not zlib at all) is refused. `payload` holds the payload from its byte `base` on (the
 * capture channel keeps the streams apart from the table).
 */
export async function inflateRect(payload: Buffer, rect: DamageRect, base = 0): Promise<Buffer> {
  const expected = rect.width * rect.height * BYTES_PER_PIXEL;
  let pixels: Buffer;
  try {
    // One byte more than the rectangle: zlib then ends with room to spare in its one output
    // buffer. With exactly its size, Node allocates a second buffer of that size to look for
    // more output (a wasted 2 MiB for a terminal's worth of pixels, each frame); maxOutputLength
    // still stops a stream that would give more.
    pixels = await inflateAsync(payload.subarray(rect.offset - base, rect.offset - base + rect.length), {
      maxOutputLength: expected,
      chunkSize: Math.max(64, expected + 1),
    });
  } catch (err) {
    throw badRects(`rectangle ${rect.width}x${rect.height} at ${rect.x},${rect.y} does not inflate to its ${expected} bytes (${(err as Error).message})`);
  }
  if (pixels.length !== expected) {
    throw badRects(`rectangle ${rect.width}x${rect.height} at ${rect.x},${rect.y} inflates to ${pixels.length} bytes, not ${expected}`);
  }
  return pixels;
}
