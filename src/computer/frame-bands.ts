import type { DamageRect } from './damage-rects.js';

/**
 * The screen as the capture channel holds it: bands of full-width rows, each its own buffer,
 * shared between the frames handed out while they do not change (copy on write, per band).
 *
 * Why bands: a frame handed out is never modified, so a change after one was handed out used
 * to copy the whole screen (3 MiB at 1024x768) even when a click changed one button. Under the
 * 16-session load that is several hundred MiB a second of short-lived buffers, which V8 can
 * only free with full collections (several a second, each pausing the event loop). Now only
 * the bands a change touches are copied (128 KiB each), and a consumer can tell an unchanged
 * band by identity (the PNG encoder re-encodes only the bands that changed).
 */

/** Rows per band: 32 rows are 128 KiB at 1024 pixels wide, 24 bands at 768 rows. */
export const FRAME_BAND_ROWS = 32;
const BYTES_PER_PIXEL = 4;

/** One screen frame as the X server holds it: 32 bits per pixel, BGRX, rows `stride` apart. */
export interface RawFrame {
  width: number;
  height: number;
  stride: number;
  /** All rows in one buffer (a banded frame makes it on first use and keeps it). */
  readonly pixels: Buffer;
  /** The rows in bands, when the frame came from a capture channel: equal buffers mean equal rows. */
  readonly bands?: FrameBands;
}

export interface FrameBands {
  /** Rows per band (the last band may have fewer). */
  rows: number;
  buffers: readonly Buffer[];
}

/** A frame handed out by the capture channel: its bands are never written again. */
class BandedFrame implements RawFrame {
  private joined: Buffer | undefined;

  constructor(
    readonly width: number,
    readonly height: number,
    readonly stride: number,
    readonly bands: FrameBands,
  ) {}

  get pixels(): Buffer {
    const { buffers } = this.bands;
    this.joined ??= buffers.length === 1 ? buffers[0]! : Buffer.concat(buffers);
    return this.joined;
  }
}

/**
 * The screen's current bands, patched in place where no frame handed out holds them. The
 * rectangles it is given have been checked against the screen (damage-rects.ts).
 */
export class BandedScreen {
  private bands: Buffer[];
  /** Bands some handed-out frame holds: a change to one goes to a copy. */
  private readonly shared = new WeakSet<Buffer>();
  /** The frame handed out for the bands as they are now, if any. */
  private frame: RawFrame | undefined;

  /** `pixels`: a whole frame as the grabber sent it (it is not copied: the bands are views of it). */
  constructor(
    readonly width: number,
    readonly height: number,
    readonly stride: number,
    pixels: Buffer,
  ) {
    this.bands = [];
    for (let y = 0; y < height; y += FRAME_BAND_ROWS) {
      this.bands.push(pixels.subarray(y * stride, Math.min(height, y + FRAME_BAND_ROWS) * stride));
    }
  }

  /** Whether a whole frame of this geometry can follow this screen (see successor). */
  fits(width: number, height: number, stride: number): boolean {
    return width === this.width && height === this.height && stride === this.stride;
  }

  /**
   * A new screen for a whole frame in `pixels` (of this geometry) that keeps this screen's
   * bands where the frame has the same bytes and copies the others (one block), so `pixels`
   * is not kept and may be reused. For a grabber started again (after one died or lied): its
   * first frame is usually the screen as it was, and then costs no memory at all. Bands a
   * frame handed out holds stay copy on write in the new screen.
   */
  successor(pixels: Buffer): BandedScreen {
    const next = new BandedScreen(this.width, this.height, this.stride, pixels);
    const changed = next.bands.map((band, i) => !band.equals(this.bands[i]!));
    next.bands = next.bands.map((band, i) => (changed[i] ? band : this.bands[i]!));
    for (const band of next.bands) if (this.shared.has(band)) next.shared.add(band);
    // The changed ones are still views of `pixels`: copied out, as if shared.
    next.copyBands(changed.flatMap((c, i) => (c ? [i] : [])));
    return next;
  }

  /** The screen as it is now, as a frame that is never modified: the same object until a change. */
  handOut(): RawFrame {
    if (!this.frame) {
      for (const band of this.bands) this.shared.add(band);
      this.frame = new BandedFrame(this.width, this.height, this.stride, { rows: FRAME_BAND_ROWS, buffers: [...this.bands] });
    }
    return this.frame;
  }

  /** Puts each rectangle's pixels (`width * 4` bytes a row) in place, copying first the shared bands they touch. */
  patch(rects: readonly DamageRect[], pixels: readonly Buffer[]): void {
    this.frame = undefined;
    this.unshare(rects);
    rects.forEach((rect, i) => {
      const source = pixels[i];
      if (!source) return;
      const rowBytes = rect.width * BYTES_PER_PIXEL;
      for (let row = 0; row < rect.height; row++) {
        const y = rect.y + row;
        const band = this.bands[Math.floor(y / FRAME_BAND_ROWS)]!;
        source.copy(band, (y % FRAME_BAND_ROWS) * this.stride + rect.x * BYTES_PER_PIXEL, row * rowBytes, (row + 1) * rowBytes);
      }
    });
  }

  /** Copies the screen into `target`, rows packed (`width * 4` bytes each); its length must be that of such a frame. */
  copyInto(target: Buffer): void {
    const row = this.width * BYTES_PER_PIXEL;
    if (target.length !== row * this.height) throw new RangeError(`a copy of the screen needs ${row * this.height} bytes, not ${target.length}`);
    this.bands.forEach((band, index) => {
      const y0 = index * FRAME_BAND_ROWS;
      if (this.stride === row) return void band.copy(target, y0 * row);
      const rows = band.length / this.stride;
      for (let r = 0; r < rows; r++) band.copy(target, (y0 + r) * row, r * this.stride, r * this.stride + row);
    });
  }

  /**
   * Replaces the shared bands the rectangles touch by copies, all in one new buffer (the
   * bands are views of it): one allocation per change, not one per band. V8 frees a buffer
   * that outlived a young collection only in a full one, and the more such buffers, the more
   * often it runs one (measured: a terminal scrolling, ~20 bands a frame, one buffer each, made
   * screenshots cost twice the CPU in full collections).
   */
  private unshare(rects: readonly DamageRect[]): void {
    const touched = new Set<number>();
    for (const rect of rects) {
      for (let band = Math.floor(rect.y / FRAME_BAND_ROWS); band * FRAME_BAND_ROWS < rect.y + rect.height; band++) {
        if (this.shared.has(this.bands[band]!)) touched.add(band);
      }
    }
    this.copyBands([...touched].sort((a, b) => a - b));
  }

  /** Replaces the bands at `indexes` (ascending) by copies, all in one new buffer. */
  private copyBands(indexes: number[]): void {
    if (indexes.length === 0) return;
    const block = Buffer.allocUnsafe(indexes.reduce((sum, i) => sum + this.bands[i]!.length, 0));
    let at = 0;
    for (const i of indexes) {
      const band = this.bands[i]!;
      band.copy(block, at);
      this.bands[i] = block.subarray(at, at + band.length);
      at += band.length;
    }
  }
}
