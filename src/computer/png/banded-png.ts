import { setImmediate as nextTurn } from 'node:timers/promises';
import { promisify } from 'node:util';
import { constants, deflateRaw } from 'node:zlib';
import type { RawFrame } from '../capture-channel.js';
import { ADLER_EMPTY, adler32Combine } from './adler32.js';
import { IDAT_DATA_OFFSET, PNG_ZLIB_LEVEL, writePng } from './png-file.js';
import { frameWords, pngRowBytes, writePngRowsWithAdler } from './rgb-rows.js';

/**
 * A session's full-size PNG screenshots, re-encoding only the rows that changed since its
 * last one. A real agent's screen changes a little between steps (a button, a line of text),
 * while the whole-frame encoder (bgrx-png.ts) swaps and deflates every row of every changed
 * frame.
 *
 * The image is cut into bands of full-width rows. Each band's PNG rows are deflated on their
 * own (raw deflate, ending with a sync flush: byte-aligned and not final), so the bands'
 * compressed bytes concatenate into one valid zlib stream: a 2-byte header, the bands, an
 * empty final block, and the Adler-32 of all rows, combined from the bands' own (computed
 * while their rows are written: Node's zlib does not give it). A band's bytes never refer to
 * another band's rows, so a band whose pixels did not change keeps its bytes.
 *
 * State, per session: the last frame encoded (a reference: frames are never modified once
 * handed out, capture-channel.ts) and each band's compressed bytes and Adler-32. The bytes
 * are views into the last PNG, not copies: the state holds no more than that PNG and that
 * frame, which the session's EncodeCache holds anyway. So the PNG returned must not be
 * modified (EncodeCache's images are shared already).
 *
 * The event loop does only the comparisons (memcmp, ~0.1 ms per 1024x768 frame) and the
 * swaps of changed bands, yielding every ~0.5 ms; the deflates run on the libuv pool, a few
 * at a time (each would otherwise hold its own zlib state and output buffer at once).
 * Concurrent encodes on one encoder are correct (each works from the reference it started
 * with), merely less useful; a session's encodes are serialised anyway (computer-tool.ts).
 */

/**
 * Rows per band. Each band is one deflate call, ~25 us of fixed cost on top of the
 * compression (measured, docs/benchmarks.md): 32 rows (24 bands at 1024x768) cost ~0.6 ms
 * more than one deflate when every row changed, and re-encode ~1/24 of the frame when a
 * button or a line changed.
 */
export const BAND_ROWS = 32;
/** Deflates of one encode on the libuv pool at once (it has 4 threads, shared by all sessions). */
const DEFLATES_IN_FLIGHT = 2;
/** Work between two yields to the event loop, in pixels swapped (~0.5 ms of loop). */
const WORK_PER_TURN = 192 * 1024;
/** Comparing a pixel costs about this fraction of swapping it (memcmp against the swap loop). */
const COMPARE_COST = 1 / 16;

/** zlib header: deflate, 32 KiB window, fast level (CMF 0x78, FLG 0x5e: what Node's zlib writes at level 2). */
const ZLIB_HEADER = Uint8Array.of(0x78, 0x5e);
/** An empty final deflate block: BFINAL 1, fixed Huffman codes, end-of-block code; byte-aligned. */
const FINAL_EMPTY_BLOCK = Uint8Array.of(0x03, 0x00);
const DEFLATE_OPTIONS = { level: PNG_ZLIB_LEVEL, finishFlush: constants.Z_SYNC_FLUSH };

const deflateRawAsync = promisify(deflateRaw);

interface Band {
  /** The band's rows, raw-deflated on their own and sync-flushed. */
  deflated: Uint8Array;
  /** Adler-32 of the band's rows (filter bytes included) and their length. */
  adler: number;
  length: number;
}

interface Reference {
  frame: RawFrame;
  bands: readonly Band[];
}

/** What the last encode did: bands in the frame, and how many were deflated again. */
export interface BandStats {
  bands: number;
  deflated: number;
}

export class BandedPngEncoder {
  private reference: Reference | undefined;
  /** What the last finished encode did (for tests and measurements). */
  lastStats: BandStats | undefined;

  constructor(private readonly bandRows: number = BAND_ROWS) {
    if (!Number.isInteger(bandRows) || bandRows < 1) throw new RangeError(`bandRows must be a positive integer, not ${bandRows}`);
  }

  /** The frame as an RGB PNG (the same pixels as bgrxToPng's). */
  async encode(frame: RawFrame): Promise<Buffer> {
    const { width, height, stride } = frame;
    const reference = this.reference && sameGeometry(this.reference.frame, frame) ? this.reference : undefined;
    const words = frameWords(frame);
    const bandBytes = this.bandRows * pngRowBytes(width);
    const bands: Band[] = new Array<Band>(Math.ceil(height / this.bandRows));
    // Deflate i writes into buffers[i % DEFLATES_IN_FLIGHT], once deflate i - DEFLATES_IN_FLIGHT is done with it.
    const buffers: Buffer[] = [];
    const deflates: Promise<void>[] = [];
    let work = 0;
    try {
      for (let i = 0; i < bands.length; i++) {
        const y0 = i * this.bandRows;
        const y1 = Math.min(height, y0 + this.bandRows);
        const kept = reference?.bands[i];
        if (kept && sameRows(reference.frame, frame, y0, y1)) {
          bands[i] = kept;
          work += (y1 - y0) * width * COMPARE_COST;
        } else {
          const n = deflates.length;
          if (n >= DEFLATES_IN_FLIGHT) await deflates[n - DEFLATES_IN_FLIGHT];
          const slot = n % DEFLATES_IN_FLIGHT;
          const rows = (buffers[slot] ??= Buffer.allocUnsafe(bandBytes)).subarray(0, (y1 - y0) * pngRowBytes(width));
          const adler = writePngRowsWithAdler(words, stride >>> 2, width, y0, y1, rows);
          const deflate = deflateRawAsync(rows, DEFLATE_OPTIONS).then((deflated) => {
            bands[i] = { deflated, adler, length: rows.length };
          });
          // Handled now (awaited below): a failure while the loop is yielding is not "unhandled".
          deflate.catch(() => undefined);
          deflates.push(deflate);
          work += (y1 - y0) * width;
        }
        if (work >= WORK_PER_TURN) {
          await nextTurn();
          work = 0;
        }
      }
    } catch (err) {
      // The deflates already started still run on the pool: the encode ends when they have,
      // so that a session's next encode (serialised behind this one) does not overlap them.
      await Promise.allSettled(deflates);
      throw err;
    }
    await Promise.all(deflates);
    const png = writePng(width, height, zlibStream(bands));
    this.reference = { frame, bands: viewsInto(png, bands) };
    this.lastStats = { bands: bands.length, deflated: deflates.length };
    return png;
  }

  /** Drops the reference frame and the bands: the next encode deflates every band. */
  forget(): void {
    this.reference = undefined;
  }
}

/** The zlib stream of the bands' rows, in parts: header, bands, empty final block, Adler-32. */
function zlibStream(bands: readonly Band[]): Uint8Array[] {
  let adler = ADLER_EMPTY;
  const parts: Uint8Array[] = [ZLIB_HEADER];
  for (const band of bands) {
    parts.push(band.deflated);
    adler = adler32Combine(adler, band.adler, band.length);
  }
  const trailer = Buffer.allocUnsafe(4);
  trailer.writeUInt32BE(adler, 0);
  parts.push(FINAL_EMPTY_BLOCK, trailer);
  return parts;
}

/** The bands with their bytes as views into `png` (written by zlibStream's order), so the previous PNG can go. */
function viewsInto(png: Buffer, bands: readonly Band[]): Band[] {
  let at = IDAT_DATA_OFFSET + ZLIB_HEADER.length;
  return bands.map((band) => {
    const deflated = png.subarray(at, at + band.deflated.length);
    at += band.deflated.length;
    return { ...band, deflated };
  });
}

function sameGeometry(a: RawFrame, b: RawFrame): boolean {
  return a.width === b.width && a.height === b.height && a.stride === b.stride && a.pixels.length === b.pixels.length;
}

/** Whether rows y0 to y1 hold the same bytes in both frames (padding included: a difference there only costs a deflate). */
function sameRows(a: RawFrame, b: RawFrame, y0: number, y1: number): boolean {
  if (a.pixels === b.pixels) return true;
  const start = y0 * a.stride;
  const end = Math.min(y1 * a.stride, a.pixels.length);
  return a.pixels.subarray(start, end).equals(b.pixels.subarray(start, end));
}
