import sharp from 'sharp';
import type { Size } from './scaling.js';

/**
 * Image work on the host with sharp (libvips), never in the guest: the guest only captures.
 * PNG compression is kept low: the model's cost is per pixel, not per byte, and every
 * millisecond here is on the agent loop's hot path.
 */
const PNG_OPTIONS = { compressionLevel: 1, adaptiveFiltering: false } as const;

/** Scales a screenshot to the model's size (a no-op when the sizes agree). */
export async function scalePng(png: Buffer, from: Size, to: Size): Promise<Buffer> {
  if (from.width === to.width && from.height === to.height) return png;
  return sharp(png).resize(to.width, to.height, { fit: 'fill' }).png(PNG_OPTIONS).toBuffer();
}

/** Cuts a region out of a screenshot at the screen's full resolution (for zoom). */
export async function cropPng(png: Buffer, region: { x0: number; y0: number; x1: number; y1: number }): Promise<Buffer> {
  return sharp(png)
    .extract({ left: region.x0, top: region.y0, width: region.x1 - region.x0, height: region.y1 - region.y0 })
    .png(PNG_OPTIONS)
    .toBuffer();
}
