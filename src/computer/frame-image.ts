import sharp, { type Sharp } from 'sharp';
import type { RawFrame } from './capture-channel.js';
import type { Size } from './scaling.js';

/**
 * Raw frames (BGRX from the X server) to PNG on the host. The PNG holds exactly the
 * screen's pixels, as scrot's would: same RGB values, only the encoder differs. Compression
 * is kept low: the model pays per pixel, not per byte, and this is the agent loop's hot path.
 */
const PNG_OPTIONS = { compressionLevel: 1, adaptiveFiltering: false } as const;

/**
 * BGRX pixels to tight RGB, reading a 32-bit word per pixel, into a new buffer: frames are
 * shared (a delta patches a copy), never modified. Three channels encode faster than four
 * with the padding dropped by sharp.
 */
export function frameToRgb(frame: RawFrame): Buffer {
  const { width, height, stride, pixels } = frame;
  const rgb = Buffer.allocUnsafe(width * height * 3);
  const aligned = pixels.byteOffset % 4 === 0 ? pixels : Buffer.from(pixels);
  let o = 0;
  for (let y = 0; y < height; y++) {
    const src = new Uint32Array(aligned.buffer, aligned.byteOffset + y * stride, width);
    for (let x = 0; x < width; x++) {
      const v = src[x] as number;
      rgb[o++] = (v >>> 16) & 0xff;
      rgb[o++] = (v >>> 8) & 0xff;
      rgb[o++] = v & 0xff;
    }
  }
  return rgb;
}

function fromFrame(frame: RawFrame): Sharp {
  return sharp(frameToRgb(frame), { raw: { width: frame.width, height: frame.height, channels: 3 } });
}

/** The frame as a PNG, scaled to `size` when given and different. */
export async function framePng(frame: RawFrame, size?: Size): Promise<Buffer> {
  let image = fromFrame(frame);
  if (size && (size.width !== frame.width || size.height !== frame.height)) {
    image = image.resize(size.width, size.height, { fit: 'fill' });
  }
  return image.png(PNG_OPTIONS).toBuffer();
}

/** A region of the frame at full resolution (zoom). */
export async function framePngRegion(frame: RawFrame, region: { x0: number; y0: number; x1: number; y1: number }): Promise<Buffer> {
  return fromFrame(frame)
    .extract({ left: region.x0, top: region.y0, width: region.x1 - region.x0, height: region.y1 - region.y0 })
    .png(PNG_OPTIONS)
    .toBuffer();
}

/** Whether two frames show the same pixels. */
export function sameFrame(a: RawFrame, b: RawFrame): boolean {
  if (a.pixels === b.pixels) return true;
  return a.width === b.width && a.height === b.height && a.stride === b.stride && a.pixels.equals(b.pixels);
}
