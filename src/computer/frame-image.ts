import sharp, { type Sharp } from 'sharp';
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

/**
 * The frame's BGRX pixels as an RGB image, converted by libvips on its own threads, never in
 * a loop on the event loop. The rows are read `stride` apart (the padding, a multiple of 4
 * bytes, see frame-header.ts, is an extra column of pixels cut off), and the fourth byte, the X
 * server's padding, is dropped: the same RGB values as scrot's PNG.
 *
 * The channels are taken one by one (three extract_band pipelines, in parallel on libvips'
 * threads) and joined as R, G, B: half the CPU of a 3x3 recomb matrix, which libvips computes
 * in floating point (13 against 26 ms of CPU at 1920x1080, measured; docs/benchmarks.md),
 * and the same bytes.
 */
async function rgbOf(frame: RawFrame, region?: Region): Promise<Sharp> {
  const { width, height, stride, pixels } = frame;
  const area = region ?? { x0: 0, y0: 0, x1: width, y1: height };
  const whole = area.x0 === 0 && area.y0 === 0 && area.x1 === stride / 4 && area.y1 === height;
  const size = { width: area.x1 - area.x0, height: area.y1 - area.y0 };
  const channel = (index: 0 | 1 | 2): Promise<Buffer> => {
    let image = sharp(pixels, { raw: { width: stride / 4, height, channels: 4 } });
    if (!whole) image = image.extract({ left: area.x0, top: area.y0, ...size });
    return image.extractChannel(index).raw().toBuffer();
  };
  const [red, green, blue] = await Promise.all([channel(2), channel(1), channel(0)]);
  const band = { raw: { ...size, channels: 1 as const } };
  // joinChannel tags the result sRGB: three colour bands, as the encoders expect.
  return sharp(red, band).joinChannel([green, blue], band);
}

export interface Region {
  x0: number;
  y0: number;
  x1: number;
  y1: number;
}

/** The frame in the chosen format, scaled to `size` when given and different. */
export async function encodeFrame(frame: RawFrame, choice: ScreenshotFormat, size?: Size): Promise<EncodedImage> {
  if (!size || (size.width === frame.width && size.height === frame.height)) return encodeAs(await rgbOf(frame), choice);
  // Two passes, and it cannot be one with sharp: joinChannel runs after resize in its pipeline
  // (pipeline.cc), and on the 4-band frame itself sharp would premultiply the bands by the 4th
  // (taken for alpha) before a resize, while removeAlpha runs last. The X server's padding
  // byte is 0, so that gives black; it would agree only if the byte were 255.
  const rgb = await (await rgbOf(frame)).raw().toBuffer();
  const scaled = sharp(rgb, { raw: { width: frame.width, height: frame.height, channels: 3 } }).resize(size.width, size.height, { fit: 'fill' });
  return encodeAs(scaled, choice);
}

/** A region of the frame at full resolution (zoom), in the chosen format. */
export async function encodeFrameRegion(frame: RawFrame, region: Region, choice: ScreenshotFormat): Promise<EncodedImage> {
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

/** Whether two frames show the same pixels. */
export function sameFrame(a: RawFrame, b: RawFrame): boolean {
  if (a.pixels === b.pixels) return true;
  return a.width === b.width && a.height === b.height && a.stride === b.stride && a.pixels.equals(b.pixels);
}
