import sharp from 'sharp';
import { encodeAs } from './encoders.js';
import type { Region } from './frame-image.js';
import type { Size } from './scaling.js';
import type { EncodedImage, ScreenshotFormat } from './screenshot-format.js';

/**
 * The fallback path's image work (scrot's PNG, when the persistent grabber cannot run), on the
 * host with sharp (libvips), never in the guest: the guest only captures.
 */

/** scrot's PNG in the chosen format, scaled to the model's size when that differs. */
export async function encodePng(png: Buffer, from: Size, to: Size, choice: ScreenshotFormat): Promise<EncodedImage> {
  const same = from.width === to.width && from.height === to.height;
  // scrot's own bytes are already the PNG asked for: nothing to redo.
  if (same && choice.format === 'png') return { data: png, mediaType: 'image/png' };
  // removeAlpha: scrot may write RGBA; the other path (and the model) sees RGB.
  const image = sharp(png).removeAlpha();
  return encodeAs(same ? image : image.resize(to.width, to.height, { fit: 'fill' }), choice);
}

/** Cuts a region out of scrot's PNG at the screen's full resolution (for zoom). */
export function cropPng(png: Buffer, region: Region, choice: ScreenshotFormat): Promise<EncodedImage> {
  const image = sharp(png).extract({ left: region.x0, top: region.y0, width: region.x1 - region.x0, height: region.y1 - region.y0 });
  return encodeAs(image.removeAlpha(), choice);
}
