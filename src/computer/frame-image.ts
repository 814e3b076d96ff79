import sharp, { type Sharp } from 'sharp';
import type { RawFrame } from './capture-channel.js';
import { bgrxToPng, rgbBytes } from './bgrx-png.js';
import { encodeAs } from './encoders.js';
import type { BandedPngEncoder } from './png/banded-png.js';
import type { Size } from './scaling.js';
import { MEDIA_TYPES, PNG_FORMAT, type EncodedImage, type ScreenshotFormat } from './screenshot-format.js';

/**
 * Raw frames (BGRX from the X server) to an image on the host. A PNG (or a lossless WebP)
 * holds exactly the screen's pixels, as scrot's would: same RGB values, only the encoder
 * differs. The encoder settings are in encoders.ts.
 */

// Every frame is a new buffer, so libvips' operation cache (50 MB by default, per process)
// can never hit: it would only hold memory that the sessions' frames already take.
sharp.cache(false);

/**
 * The frame's BGRX pixels (or a region of them) as an RGB image for libvips: the bands are
 * reordered by one loop over 32-bit words (bgrx-png.ts), ~1.5 ms at 1024x768, where libvips
 * took ~6 ms of CPU (three extract_band pipelines and a join; recomb, in floating point, twice
 * that), yielding to the event loop between bands of rows. The fourth byte, the X server's
 * padding, is dropped: the same RGB values as scrot's.
 */
async function rgbOf(frame: RawFrame, region?: Region): Promise<Sharp> {
  const area = region ?? { x0: 0, y0: 0, x1: frame.width, y1: frame.height };
  return sharp(await rgbBytes(frame, area), { raw: { width: area.x1 - area.x0, height: area.y1 - area.y0, channels: 3 } });
}

export interface Region {
  x0: number;
  y0: number;
  x1: number;
  y1: number;
}

/**
 * The frame in the chosen format, scaled to `size` when given and different. A session's
 * `bands` encoder, when given, makes a full-size PNG re-encode only the rows that changed
 * since its last one.
 */
export async function encodeFrame(frame: RawFrame, choice: ScreenshotFormat, size?: Size, bands?: BandedPngEncoder): Promise<EncodedImage> {
  const full = !size || (size.width === frame.width && size.height === frame.height);
  // A full-size PNG, the default and most frequent, needs no libvips at all (bgrx-png.ts, png/).
  if (full && choice.format === 'png') return { data: await (bands ? bands.encode(frame) : bgrxToPng(frame)), mediaType: MEDIA_TYPES.png };
  if (full) return encodeAs(await rgbOf(frame), choice);
  // RGB first (never the 4-band frame itself: sharp would take the 4th band, the X server's
  // padding byte 0, for alpha and premultiply by it before resizing: black).
  return encodeAs((await rgbOf(frame)).resize(size.width, size.height, { fit: 'fill' }), choice);
}

/** A region of the frame at full resolution (zoom), in the chosen format. */
export async function encodeFrameRegion(frame: RawFrame, region: Region, choice: ScreenshotFormat): Promise<EncodedImage> {
  if (choice.format === 'png') return { data: await bgrxToPng(frame, region), mediaType: MEDIA_TYPES.png };
  return encodeAs(await rgbOf(frame, region), choice);
}

/** The frame as a PNG (the default format), scaled to `size` when given and different. */
export async function framePng(frame: RawFrame, size?: Size): Promise<Buffer> {
  return (await encodeFrame(frame, PNG_FORMAT, size)).data;
}

/** A region of the frame at full resolution, as a PNG. */
export async function framePngRegion(frame: RawFrame, region: Region): Promise<Buffer> {
  return (await encodeFrameRegion(frame, region, PNG_FORMAT)).data;
}

/** Whether two frames show the same pixels (bands a capture channel shares are equal without a look). */
export function sameFrame(a: RawFrame, b: RawFrame): boolean {
  if (a === b) return true;
  if (a.width !== b.width || a.height !== b.height || a.stride !== b.stride) return false;
  const [x, y] = [a.bands, b.bands];
  if (x && y && x.rows === y.rows && x.buffers.length === y.buffers.length)
    return x.buffers.every((band, i) => band === y.buffers[i] || band.equals(y.buffers[i]!));
  return a.pixels === b.pixels || a.pixels.equals(b.pixels);
}
