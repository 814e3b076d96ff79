import { endianness } from 'node:os';
import type { RawFrame } from '../capture-channel.js';
import { ADLER_BASE, ADLER_EMPTY, adler32Combine } from './adler32.js';

/**
 * The X server's BGRX pixels as a PNG's rows: a filter byte 0 (no filter), then R, G, B per
 * pixel; the fourth byte, the X server's padding, is dropped. One 32-bit read per pixel
 * (little-endian: B | G << 8 | R << 16) rather than four byte reads.
 */

// The 32-bit reads assume a little-endian host (x86-64, arm64: every host we run on).
if (endianness() !== 'LE') throw new Error('rgb-rows: a big-endian host is not supported');

/** A buffer of pixels as 32-bit words (copied first if it does not start on a 4-byte boundary). */
function bufferWords(bytes: Buffer): Uint32Array {
  const pixels = bytes.byteOffset % 4 === 0 ? bytes : new Uint8Array(bytes);
  return new Uint32Array(pixels.buffer, pixels.byteOffset, pixels.length >>> 2);
}

/** Rows `first` to `end - 1` of a frame, held by `words` from row `first` on. */
export interface RowRun {
  words: Uint32Array;
  first: number;
  end: number;
}

/**
 * A frame's rows as 32-bit words, for one encode: a frame in bands (frame-bands.ts) band by
 * band, never joined into one buffer (a whole frame's copy for the few bands that changed),
 * any other as one run. Each buffer's words are made once (an unaligned one is copied once).
 */
export class FrameWords {
  private readonly runs = new Map<number, RowRun>();

  constructor(private readonly frame: RawFrame) {}

  /** The run that holds row y. */
  at(y: number): RowRun {
    const { bands, height } = this.frame;
    const index = bands ? Math.floor(y / bands.rows) : 0;
    let run = this.runs.get(index);
    if (!run) {
      run = bands
        ? { words: bufferWords(bands.buffers[index]!), first: index * bands.rows, end: Math.min(height, (index + 1) * bands.rows) }
        : { words: bufferWords(this.frame.pixels), first: 0, end: height };
      this.runs.set(index, run);
    }
    return run;
  }
}

/**
 * Rows y0 to y1 of the frame as PNG rows in `out` (see writePngRowsWithAdler), and their
 * Adler-32, combined over the runs of rows that `words` holds them in.
 */
export function writeFrameRowsWithAdler(frame: RawFrame, words: FrameWords, y0: number, y1: number, out: Uint8Array): number {
  const rowBytes = pngRowBytes(frame.width);
  const wordsPerRow = frame.stride >>> 2;
  let adler = ADLER_EMPTY;
  for (let y = y0; y < y1;) {
    const run = words.at(y);
    const end = Math.min(y1, run.end);
    const part = writePngRowsWithAdler(run.words, wordsPerRow, frame.width, y - run.first, end - run.first, out.subarray((y - y0) * rowBytes));
    adler = adler32Combine(adler, part, (end - y) * rowBytes);
    y = end;
  }
  return adler;
}

/** Bytes of one PNG row of `width` RGB pixels: the filter byte and 3 per pixel. */
export function pngRowBytes(width: number): number {
  return width * 3 + 1;
}

/**
 * Pixels between two reductions of the Adler-32 sums: 512 pixels (1,536 bytes) keep `b`
 * below 2^30, so V8 keeps both sums in small integers (zlib's own bound is 5,552 bytes, for
 * 32-bit sums).
 */
const PIXELS_PER_REDUCTION = 512;

/** R, G, B of a pixel word (B | G << 8 | R << 16 | X << 24) as bytes 0, 1, 2 of a word. */
function rgbWord(pixel: number): number {
  return ((pixel & 0xff) << 16) | (pixel & 0xff00) | ((pixel >>> 16) & 0xff);
}

/**
 * Writes rows y0 to y1 of the frame (full width) into `out` as PNG rows, and returns their
 * Adler-32 (as if they were the whole stream), computed in the same pass. Measured at
 * 1024x768: ~1.4 ms, the cost of the swap alone written byte by byte (~2.1 ms with the
 * checksum added that way), because:
 * - four pixels are written as three 32-bit stores (a DataView: the rows are not aligned);
 * - the checksum takes four pixels at a time, from sums of their bytes two lanes at once.
 *   For each byte x, a += x and b += a; over pixels k = 0..3 with s_k = r+g+b that is
 *   a += s_0+s_1+s_2+s_3 and b += 12a + 3(3s_0 + 2s_1 + s_2) + (3R + 2G + B), R, G, B the
 *   sums of the four pixels' reds, greens, blues. `pixel & 0xff00ff` holds red and blue in
 *   two 16-bit lanes that four or six pixels' sums cannot overflow.
 *
 * A plain function with no await inside: V8 does not optimise a loop in a function that
 * awaits (measured: 10x the CPU). The caller yields between calls.
 */
export function writePngRowsWithAdler(words: Uint32Array, wordsPerRow: number, width: number, y0: number, y1: number, out: Uint8Array): number {
  const view = new DataView(out.buffer, out.byteOffset, out.byteLength);
  const rowBytes = pngRowBytes(width);
  let a = 1;
  let b = 0;
  for (let y = y0; y < y1; y++) {
    let o = (y - y0) * rowBytes;
    out[o++] = 0; // filter: none (adds 0 to a, a to b)
    b += a;
    const rowEnd = y * wordsPerRow + width;
    for (let i = y * wordsPerRow; i < rowEnd;) {
      const end = Math.min(rowEnd, i + PIXELS_PER_REDUCTION);
      const endOfFours = end - ((end - i) & 3);
      for (; i < endOfFours; i += 4) {
        const p0 = words[i]!;
        const p1 = words[i + 1]!;
        const p2 = words[i + 2]!;
        const p3 = words[i + 3]!;
        const c0 = rgbWord(p0);
        const c1 = rgbWord(p1);
        const c2 = rgbWord(p2);
        const c3 = rgbWord(p3);
        view.setUint32(o, c0 | (c1 << 24), true);
        view.setUint32(o + 4, (c1 >>> 8) | (c2 << 16), true);
        view.setUint32(o + 8, (c2 >>> 16) | (c3 << 8), true);
        o += 12;
        // Red (high lane) and blue (low lane) of p0, p0+p1, p0+p1+p2, all four; greens apart.
        const rb0 = p0 & 0xff00ff;
        const rb01 = rb0 + (p1 & 0xff00ff);
        const rb012 = rb01 + (p2 & 0xff00ff);
        const rbAll = rb012 + (p3 & 0xff00ff);
        const g0 = (p0 >>> 8) & 0xff;
        const g01 = g0 + ((p1 >>> 8) & 0xff);
        const g012 = g01 + ((p2 >>> 8) & 0xff);
        const greens = g012 + ((p3 >>> 8) & 0xff);
        const rbPrefixes = rb0 + rb01 + rb012; // lanes: 3x0 + 2x1 + x2, at most 1,530
        const prefixes = (rbPrefixes >>> 16) + (rbPrefixes & 0xffff) + g0 + g01 + g012;
        const reds = rbAll >>> 16;
        const blues = rbAll & 0xffff;
        b += 12 * a + 3 * prefixes + 3 * reds + 2 * greens + blues;
        a += reds + greens + blues;
      }
      for (; i < end; i++) {
        const pixel = words[i]!;
        const red = (pixel >>> 16) & 0xff;
        const green = (pixel >>> 8) & 0xff;
        const blue = pixel & 0xff;
        out[o] = red;
        out[o + 1] = green;
        out[o + 2] = blue;
        o += 3;
        b += 3 * a + 3 * red + 2 * green + blue;
        a += red + green + blue;
      }
      a %= ADLER_BASE;
      b %= ADLER_BASE;
    }
  }
  return (a + b * 0x10000) >>> 0;
}
