import { endianness } from 'node:os';
import type { RawFrame } from '../capture-channel.js';
import { ADLER_BASE } from './adler32.js';

/**
 * The X server's BGRX pixels as a PNG's rows: a filter byte 0 (no filter), then R, G, B per
 * pixel; the fourth byte, the X server's padding, is dropped. One 32-bit read per pixel
 * (little-endian: B | G << 8 | R << 16) rather than four byte reads.
 */

// The 32-bit reads assume a little-endian host (x86-64, arm64: every host we run on).
if (endianness() !== 'LE') throw new Error('rgb-rows: a big-endian host is not supported');

/** The frame's pixels as 32-bit words; a frame whose bytes do not start on a 4-byte boundary is copied to one that does. */
export function frameWords(frame: RawFrame): Uint32Array {
  const pixels = frame.pixels.byteOffset % 4 === 0 ? frame.pixels : new Uint8Array(frame.pixels);
  return new Uint32Array(pixels.buffer, pixels.byteOffset, pixels.length >>> 2);
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

/**
 * Writes rows y0 to y1 of the frame (full width) into `out` as PNG rows, and returns their
 * Adler-32 (as if they were the whole stream), computed in the same pass: for each byte
 * x, a += x and b += a; per pixel that is a += r + g + b and b += 3a + 3r + 2g + b.
 *
 * A plain function with no await inside: V8 does not optimise a loop in a function that
 * awaits (measured: 10x the CPU). The caller yields between calls.
 */
export function writePngRowsWithAdler(words: Uint32Array, wordsPerRow: number, width: number, y0: number, y1: number, out: Uint8Array): number {
  const rowBytes = pngRowBytes(width);
  let a = 1;
  let b = 0;
  for (let y = y0; y < y1; y++) {
    let o = (y - y0) * rowBytes;
    out[o++] = 0; // filter: none (adds 0 to a, a to b)
    b += a;
    const rowStart = y * wordsPerRow;
    const rowEnd = rowStart + width;
    for (let i = rowStart; i < rowEnd; ) {
      const end = Math.min(rowEnd, i + PIXELS_PER_REDUCTION);
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
