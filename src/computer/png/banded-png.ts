import { setImmediate as nextTurn } from 'node:timers/promises';
import { promisify } from 'node:util';
import { constants, deflateRaw } from 'node:zlib';
import type { RawFrame } from '../capture-channel.js';
import { FRAME_BAND_ROWS } from '../frame-bands.js';
import { ADLER_EMPTY, adler32Combine } from './adler32.js';
import { planPieces, type BandSpan, type PlannedPiece } from './band-plan.js';
import { IDAT_DATA_OFFSET, PNG_ZLIB_LEVEL, writePng } from './png-file.js';
import { FrameWords, pngRowBytes, writeFrameRowsWithAdler } from './rgb-rows.js';
import { giveRows, PIECE_BYTES, takeRows } from './row-buffers.js';

/**
 * A session's full-size PNG screenshots, re-encoding only the rows that changed since its
 * last one. A real agent's screen changes a little between steps (a button, a line of text),
 * while the whole-frame encoder (bgrx-png.ts) swaps and deflates every row of every changed
 * frame.
 *
 * The image is cut into bands of full-width rows, and runs of bands into pieces (band-plan.ts).
 * Each piece's PNG rows are deflated on their own (raw deflate, ending with a sync flush:
 * byte-aligned and not final), so the pieces' compressed bytes concatenate into one valid
 * zlib stream: a 2-byte header, the pieces, an empty final block, and the Adler-32 of all
 * rows, combined from the pieces' own (computed while their rows are written: Node's zlib
 * does not give it). A piece's bytes never refer to another's rows, so a piece whose bands'
 * pixels did not change keeps its bytes.
 *
 * State, per session: the last frame encoded (a reference: frames are never modified once
 * handed out, capture-channel.ts) and each piece's compressed bytes and Adler-32. The bytes
 * are views into the last PNG, not copies: the state holds no more than that PNG and that
 * frame, which the session's EncodeCache holds too while the PNG is its latest image. So the
 * PNG returned must not be modified (EncodeCache's images are shared already).
 *
 * The event loop does only the comparisons (memcmp, ~0.1 ms per 1024x768 frame) and the
 * swaps of the pieces to deflate, yielding every ~0.5 ms; the deflates run on the libuv pool,
 * a few at a time (each holds a zlib state, an output buffer and a rows buffer meanwhile).
 * Concurrent encodes on one encoder are correct (each works from the reference it started
 * with), merely less useful; a session's encodes are serialised anyway (computer-tool.ts).
 */

/**
 * Rows per band: the unit of comparison, and of re-encoding when little changed. 32 rows (24
 * bands at 1024x768) re-encode ~1/24 of the frame when a button or a line changed; pieces of
 * several bands (band-plan.ts) keep a frame where every row changed at about the cost of one
 * deflate (measured with scripts/measure-banded-png.ts, docs/benchmarks.md). The capture
 * channel's bands (frame-bands.ts): a band it shared between two frames is known unchanged.
 */
export const BAND_ROWS = FRAME_BAND_ROWS;
/** Deflates of one encode on the libuv pool at once (it has 4 threads, shared by all sessions). */
export const DEFLATES_IN_FLIGHT = 2;
/** Work between two yields to the event loop, in pixels swapped (~0.25 ms of loop; a piece of 512 KiB of rows is ~0.3 ms). */
const WORK_PER_TURN = 128 * 1024;
/** Comparing a pixel costs about this fraction of swapping it (memcmp against the swap loop). */
const COMPARE_COST = 1 / 16;

/** zlib header: deflate, 32 KiB window, fast level (CMF 0x78, FLG 0x5e: what Node's zlib writes at level 2). */
const ZLIB_HEADER = Uint8Array.of(0x78, 0x5e);
/** An empty final deflate block: BFINAL 1, fixed Huffman codes, end-of-block code; byte-aligned. */
const FINAL_EMPTY_BLOCK = Uint8Array.of(0x03, 0x00);
const DEFLATE_OPTIONS = { level: PNG_ZLIB_LEVEL, finishFlush: constants.Z_SYNC_FLUSH };

const deflateRawAsync = promisify(deflateRaw);

/** Bands deflated together: their rows raw-deflated on their own and sync-flushed. */
interface Piece extends BandSpan {
  deflated: Uint8Array;
  /** Adler-32 of the piece's rows (filter bytes included) and their length. */
  adler: number;
  length: number;
}

interface Reference {
  frame: RawFrame;
  pieces: readonly Piece[];
}

/** What the last encode did: bands in the frame, how many were deflated again, in how many calls. */
export interface BandStats {
  bands: number;
  deflated: number;
  deflates: number;
}

export interface BandedPngOptions {
  /** Rows per band (default BAND_ROWS). */
  bandRows?: number;
  /** Deflates at once (default DEFLATES_IN_FLIGHT). */
  deflatesInFlight?: number;
  /** Most bytes of rows deflated in one call (default PIECE_BYTES; at least one band). */
  pieceBytes?: number;
}

export class BandedPngEncoder {
  private reference: Reference | undefined;
  /** What the last finished encode did (for tests and measurements). */
  lastStats: BandStats | undefined;
  private readonly bandRows: number;
  private readonly inFlight: number;
  private readonly pieceBytes: number;

  constructor(options: BandedPngOptions = {}) {
    this.bandRows = options.bandRows ?? BAND_ROWS;
    this.inFlight = options.deflatesInFlight ?? DEFLATES_IN_FLIGHT;
    this.pieceBytes = options.pieceBytes ?? PIECE_BYTES;
    for (const [name, value] of [
      ['bandRows', this.bandRows],
      ['deflatesInFlight', this.inFlight],
      ['pieceBytes', this.pieceBytes],
    ] as const) {
      if (!Number.isInteger(value) || value < 1) throw new RangeError(`${name} must be a positive integer, not ${value}`);
    }
  }

  /** The frame as an RGB PNG (the same pixels as bgrxToPng's). */
  async encode(frame: RawFrame): Promise<Buffer> {
    const reference = this.reference && sameGeometry(this.reference.frame, frame) ? this.reference : undefined;
    const changed = await this.changedBands(frame, reference);
    const maxBands = Math.max(1, Math.floor(this.pieceBytes / (this.bandRows * pngRowBytes(frame.width))));
    const plan = planPieces(changed, reference?.pieces, maxBands);
    const pieces = await this.deflatePieces(frame, plan, reference);
    const png = writePng(frame.width, frame.height, zlibStream(pieces));
    this.reference = { frame, pieces: viewsInto(png, pieces) };
    const redone = plan.filter((piece) => piece.kept === undefined);
    this.lastStats = { bands: changed.length, deflated: redone.reduce((sum, { span }) => sum + span.end - span.first, 0), deflates: redone.length };
    return png;
  }

  /** Drops the reference frame and the pieces: the next encode deflates every band. */
  forget(): void {
    this.reference = undefined;
  }

  /** Per band, whether its bytes differ from the reference's (all true without one); yields now and then. */
  private async changedBands(frame: RawFrame, reference: Reference | undefined): Promise<boolean[]> {
    const changed = new Array<boolean>(Math.ceil(frame.height / this.bandRows)).fill(true);
    if (!reference) return changed;
    let work = 0;
    for (let band = 0; band < changed.length; band++) {
      const y0 = band * this.bandRows;
      const y1 = Math.min(frame.height, y0 + this.bandRows);
      changed[band] = !sameRows(reference.frame, frame, y0, y1);
      work += (y1 - y0) * frame.width * COMPARE_COST;
      if (work >= WORK_PER_TURN) {
        await nextTurn();
        work = 0;
      }
    }
    return changed;
  }

  /**
   * The planned pieces: kept ones from the reference, the others swapped (on the event loop,
   * yielding between pieces) and deflated on the libuv pool, `inFlight` at a time.
   */
  private async deflatePieces(frame: RawFrame, plan: readonly PlannedPiece[], reference: Reference | undefined): Promise<Piece[]> {
    const { width, height } = frame;
    const words = new FrameWords(frame);
    const pieces = new Array<Piece>(plan.length);
    const deflates: Promise<void>[] = [];
    let work = 0;
    try {
      for (const [index, planned] of plan.entries()) {
        if (planned.kept !== undefined) {
          pieces[index] = reference!.pieces[planned.kept]!;
          continue;
        }
        if (deflates.length >= this.inFlight) await deflates[deflates.length - this.inFlight];
        const { first, end } = planned.span;
        const y0 = first * this.bandRows;
        const y1 = Math.min(height, end * this.bandRows);
        const rows = takeRows((y1 - y0) * pngRowBytes(width));
        const adler = writeFrameRowsWithAdler(frame, words, y0, y1, rows);
        const deflate = deflateRawAsync(rows, DEFLATE_OPTIONS)
          .then((deflated) => {
            pieces[index] = { first, end, deflated, adler, length: rows.length };
          })
          .finally(() => giveRows(rows));
        // Handled now (awaited below): a failure while the loop is yielding is not "unhandled".
        deflate.catch(() => undefined);
        deflates.push(deflate);
        work += (y1 - y0) * width;
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
    return pieces;
  }
}

/** The zlib stream of the pieces' rows, in parts: header, pieces, empty final block, Adler-32. */
function zlibStream(pieces: readonly Piece[]): Uint8Array[] {
  let adler = ADLER_EMPTY;
  const parts: Uint8Array[] = [ZLIB_HEADER];
  for (const piece of pieces) {
    parts.push(piece.deflated);
    adler = adler32Combine(adler, piece.adler, piece.length);
  }
  const trailer = Buffer.allocUnsafe(4);
  trailer.writeUInt32BE(adler, 0);
  parts.push(FINAL_EMPTY_BLOCK, trailer);
  return parts;
}

/** The pieces with their bytes as views into `png` (in zlibStream's order), so the previous PNG can go. */
function viewsInto(png: Buffer, pieces: readonly Piece[]): Piece[] {
  let at = IDAT_DATA_OFFSET + ZLIB_HEADER.length;
  return pieces.map((piece) => {
    const deflated = png.subarray(at, at + piece.deflated.length);
    at += piece.deflated.length;
    return { ...piece, deflated };
  });
}

function sameGeometry(a: RawFrame, b: RawFrame): boolean {
  return a.width === b.width && a.height === b.height && a.stride === b.stride;
}

/**
 * Whether rows y0 to y1 hold the same bytes in both frames (padding included: a difference
 * there only costs a deflate). Frames from the capture channel share the bands that did not
 * change (frame-bands.ts): the same buffer is the same rows, without a look at them.
 */
function sameRows(a: RawFrame, b: RawFrame, y0: number, y1: number): boolean {
  if (a === b) return true;
  if (a.bands && b.bands && a.bands.rows === b.bands.rows && y0 % a.bands.rows === 0 && y1 - y0 <= a.bands.rows) {
    const index = y0 / a.bands.rows;
    const [x, y] = [a.bands.buffers[index], b.bands.buffers[index]];
    if (x && y) return x === y || x.equals(y);
  }
  if (a.pixels === b.pixels) return true;
  const start = y0 * a.stride;
  const end = Math.min(y1 * a.stride, a.pixels.length);
  return a.pixels.subarray(start, end).equals(b.pixels.subarray(start, end));
}
