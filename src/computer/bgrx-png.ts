import { promisify } from 'node:util';
import { deflate } from 'node:zlib';
import { setImmediate as nextTurn } from 'node:timers/promises';
import type { RawFrame } from './capture-channel.js';
import { PNG_ZLIB_LEVEL, writePng } from './png/png-file.js';
import { FrameWords } from './png/rgb-rows.js';

/**
 * The X server's BGRX frames as RGB, and as a PNG, without libvips.
 *
 * Why by hand: libvips cannot reorder bands cheaply (recomb computes in floating point; three
 * extract_band pipelines and a join cost ~6 ms of CPU per 1024x768 frame, three quarters of
 * the whole PNG encoding, measured in docs/benchmarks.md), while one loop over 32-bit words
 * does it in ~1.5 ms. And a PNG with no row filter is just the RGB rows, each after a 0 byte,
 * zlib-compressed, in three chunks: so the rows are written straight into that layout and
 * handed to Node's zlib (on the libuv pool, off the event loop). The pixels are the same RGB
 * values as scrot's PNG and as the libvips path: only the compressor differs.
 *
 * The loop runs on the event loop, so it yields between bands of rows (~0.5 ms each): a
 * 3840x2160 frame (~15 ms of loop) never holds up other sessions' requests for longer than a band.
 *
 * A session's full-size screenshots take png/banded-png.ts instead, which re-encodes only the
 * rows that changed since its last one; this is the path for zoomed regions and for frames
 * encoded once (the screen stream).
 */

const deflateAsync = promisify(deflate);

/** Pixels converted between two yields to the event loop (~0.5 ms of loop here). */
const PIXELS_PER_TURN = 256 * 1024;

export interface PixelArea {
  x0: number;
  y0: number;
  x1: number;
  y1: number;
}

function wholeFrame(frame: RawFrame): PixelArea {
  return { x0: 0, y0: 0, x1: frame.width, y1: frame.height };
}

/**
 * Copies `area` of a BGRX frame into `out` as RGB rows of `rowBytes` bytes starting `lead`
 * bytes into each row (1 for a PNG row's filter byte, left 0 = no filter; 0 for raw RGB).
 * The fourth byte of each pixel, the X server's padding, is dropped. A band of rows at a
 * time, yielding to the event loop in between.
 */
async function writeRgbRows(frame: RawFrame, area: PixelArea, out: Buffer, lead: 0 | 1): Promise<void> {
  const rowsPerTurn = Math.max(1, Math.floor(PIXELS_PER_TURN / (area.x1 - area.x0)));
  // One 32-bit read per pixel (little-endian: B | G << 8 | R << 16) rather than four byte
  // reads; a frame in bands (the capture channel's) band by band, never joined first.
  const words = new FrameWords(frame);
  for (let y = area.y0; y < area.y1;) {
    if (y > area.y0) await nextTurn();
    const run = words.at(y);
    const end = Math.min(y + rowsPerTurn, area.y1, run.end);
    writeBand(run.words, frame.stride >>> 2, run.first, area, y, end, out, lead);
    y = end;
  }
}

/**
 * Rows y0 to y1 of `area` (see writeRgbRows), from `words`, which start at row `wordsRow0`. A
 * plain function, not inlined into the async one above: V8 does not optimise a loop inside a
 * function that awaits (measured: 10x the CPU).
 */
function writeBand(words: Uint32Array, wordsPerRow: number, wordsRow0: number, area: PixelArea, y0: number, y1: number, out: Buffer, lead: 0 | 1): void {
  const rowBytes = (area.x1 - area.x0) * 3 + lead;
  for (let y = y0; y < y1; y++) {
    let o = (y - area.y0) * rowBytes;
    if (lead === 1) out[o++] = 0;
    const row = (y - wordsRow0) * wordsPerRow;
    const end = row + area.x1;
    for (let i = row + area.x0; i < end; i++) {
      const pixel = words[i]!;
      out[o] = pixel >>> 16;
      out[o + 1] = pixel >>> 8;
      out[o + 2] = pixel;
      o += 3;
    }
  }
}

/** `area` (the whole frame by default) as packed RGB bytes, 3 per pixel. */
export async function rgbBytes(frame: RawFrame, area: PixelArea = wholeFrame(frame)): Promise<Buffer> {
  const out = Buffer.allocUnsafe((area.x1 - area.x0) * (area.y1 - area.y0) * 3);
  await writeRgbRows(frame, area, out, 0);
  return out;
}

/** `area` of the frame (the whole frame by default) as an RGB PNG. */
export async function bgrxToPng(frame: RawFrame, area: PixelArea = wholeFrame(frame)): Promise<Buffer> {
  const width = area.x1 - area.x0;
  const height = area.y1 - area.y0;
  const rows = Buffer.allocUnsafe(height * (width * 3 + 1));
  await writeRgbRows(frame, area, rows, 1);
  return writePng(width, height, [await deflateAsync(rows, { level: PNG_ZLIB_LEVEL })]);
}
