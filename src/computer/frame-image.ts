import sharp, { type Matrix3x3, type Sharp } from 'sharp';
import type { RawFrame } from './capture-channel.js';
import { encodeAs } from './encoders.js';
import type { Size } from './scaling.js';
import { PNG_FORMAT, type EncodedImage, type ScreenshotFormat } from './screenshot-format.js';

/**
 * Raw frames (BGRX from the X server) to an image on the host. A PNG (or a lossless WebP)
 * holds exactly the screen's pixels, as scrot's would: same RGB values, only the encoder
 * differs. The encoder settings are in encoders.ts.
 */

// Every frame is a new buffer, so libvips' operation cache (50 MB by default, per process)
// can never hit: it would only hold memory that the sessions' frames already take.
sharp.cache(false);

/** Swaps the first and third channel: B,G,R to R,G,B. */
const BGR_TO_RGB: Matrix3x3 = [
  [0, 0, 1],
  [0, 1, 0],
  [1, 0, 0],
];

/**
 * The frame's BGRX pixels as an RGB image, converted by libvips on its own threads, never in
 * a loop on the event loop (a 3 MB frame took ~4 ms of it in JavaScript, ~40 ms at 4K; here
 * under 1 ms). The rows are read `stride` apart (the padding, a multiple of 4 bytes, see
 * frame-header.ts, is an extra column of pixels cut off), and the fourth byte, the X server's
 * padding, is dropped: the same RGB values as scrot's PNG.
 */
function rgbOf(frame: RawFrame, region?: Region): Sharp {
  const { width, height, stride, pixels } = frame;
  const area = region ?? { x0: 0, y0: 0, x1: width, y1: height };
  let image = sharp(pixels, { raw: { width: stride / 4, height, channels: 4 } });
  if (area.x0 !== 0 || area.y0 !== 0 || area.x1 !== stride / 4 || area.y1 !== height) {
    image = image.extract({ left: area.x0, top: area.y0, width: area.x1 - area.x0, height: area.y1 - area.y0 });
  }
  return image.removeAlpha().recomb(BGR_TO_RGB);
}

export interface Region {
  x0: number;
  y0: number;
  x1: number;
  y1: number;
}

/** The frame in the chosen format, scaled to `size` when given and different. */
export async function encodeFrame(frame: RawFrame, choice: ScreenshotFormat, size?: Size): Promise<EncodedImage> {
  if (!size || (size.width === frame.width && size.height === frame.height)) return encodeAs(rgbOf(frame), choice);
  // Two passes, and it cannot be one with sharp: a 4-band input counts as having alpha, sharp
  // premultiplies the bands by it before a resize, and removeAlpha runs last in its pipeline
  // (pipeline.cc). The X server's padding byte is 0, so one pass gives black; it would agree
  // only if that byte were 255. The intermediate RGB buffer stays on libvips' side of the work.
  const rgb = await rgbOf(frame).raw().toBuffer();
  const scaled = sharp(rgb, { raw: { width: frame.width, height: frame.height, channels: 3 } }).resize(size.width, size.height, { fit: 'fill' });
  return encodeAs(scaled, choice);
}

/** A region of the frame at full resolution (zoom), in the chosen format. */
export function encodeFrameRegion(frame: RawFrame, region: Region, choice: ScreenshotFormat): Promise<EncodedImage> {
  return encodeAs(rgbOf(frame, region), choice);
}

/** The frame as a PNG (the default format), scaled to `size` when given and different. */
export async function framePng(frame: RawFrame, size?: Size): Promise<Buffer> {
  return (await encodeFrame(frame, PNG_FORMAT, size)).data;
}

/** A region of the frame at full resolution, as a PNG. */
export async function framePngRegion(frame: RawFrame, region: Region): Promise<Buffer> {
  return (await encodeFrameRegion(frame, region, PNG_FORMAT)).data;
}

/** Whether two frames show the same pixels. */
export function sameFrame(a: RawFrame, b: RawFrame): boolean {
  if (a.pixels === b.pixels) return true;
  return a.width === b.width && a.height === b.height && a.stride === b.stride && a.pixels.equals(b.pixels);
}
