import { InvalidRequestError } from '../errors.js';

/**
 * The screenshot formats a client may ask for: the three image types the Messages API takes.
 * PNG is the default and always lossless; JPEG and WebP trade exact pixels for fewer bytes
 * (what a client pays for in bandwidth and storage, not in model tokens: those are per pixel).
 */
export const IMAGE_FORMATS = ['png', 'jpeg', 'webp'] as const;
export type ImageFormat = (typeof IMAGE_FORMATS)[number];

export const MEDIA_TYPES: Readonly<Record<ImageFormat, ImageMediaType>> = {
  png: 'image/png',
  jpeg: 'image/jpeg',
  webp: 'image/webp',
};
export type ImageMediaType = 'image/png' | 'image/jpeg' | 'image/webp';

/**
 * WebP at quality 100 is encoded lossless: the model then sees exactly the screen's pixels,
 * as with PNG, in fewer bytes. (Lossy WebP at 100 would still not be exact.)
 */
export const LOSSLESS_WEBP_QUALITY = 100;
/**
 * The quality when none is asked for (docs/benchmarks.md has the measurements). JPEG: the usual
 * 80, where text stays legible with 4:4:4 chroma. WebP: lossless, because on screens it beats
 * lossy WebP at 80 on every count: a quarter of the bytes (26 against 97 KiB for an xterm at
 * 1024x768), about the same CPU, and exact pixels instead of ~30 dB of smeared text.
 */
export const DEFAULT_QUALITY: Readonly<Record<Exclude<ImageFormat, 'png'>, number>> = { jpeg: 80, webp: LOSSLESS_WEBP_QUALITY };

/** A resolved choice: the format, and the quality for jpeg and webp (undefined for png). */
export interface ScreenshotFormat {
  format: ImageFormat;
  quality?: number;
}

export const PNG_FORMAT: ScreenshotFormat = { format: 'png' };

/** An encoded screenshot and the media type to send it with. */
export interface EncodedImage {
  data: Buffer;
  mediaType: ImageMediaType;
}

/** What a request may say: raw values from a query string or JSON body, not yet trusted. */
export interface ScreenshotFormatRequest {
  format?: unknown;
  quality?: unknown;
}

/**
 * Checks a requested format and quality and fills in the rest: what is not given comes from
 * `fallback` (the session's default) when the format is the same, else the format's own
 * default. `fields` names the fields in the error message, as the client sent them (e.g.
 * "format" for a query parameter, "screenshot.format" in a create body). A quality for PNG is
 * refused rather than ignored: the client believes it asked for something.
 */
export function resolveScreenshotFormat(
  request: ScreenshotFormatRequest,
  fallback: ScreenshotFormat = PNG_FORMAT,
  fields: { format: string; quality: string } = { format: 'format', quality: 'quality' },
): ScreenshotFormat {
  const format = request.format === undefined ? fallback.format : parseFormat(request.format, fields.format);
  if (request.quality === undefined) {
    if (format === 'png') return PNG_FORMAT;
    return { format, quality: format === fallback.format ? (fallback.quality ?? DEFAULT_QUALITY[format]) : DEFAULT_QUALITY[format] };
  }
  const quality = parseQuality(request.quality, fields.quality);
  if (format === 'png') {
    throw new InvalidRequestError(`${fields.quality} applies to jpeg and webp only; png is always lossless (leave ${fields.quality} out)`);
  }
  return { format, quality };
}

function parseFormat(value: unknown, field: string): ImageFormat {
  const known = (IMAGE_FORMATS as readonly unknown[]).includes(value);
  if (!known) throw new InvalidRequestError(`${field} must be one of ${IMAGE_FORMATS.join(', ')}, got ${describe(value)}`);
  return value as ImageFormat;
}

/** An integer 1..100, as a number (JSON) or as decimal digits (a query string). */
function parseQuality(value: unknown, field: string): number {
  const number = typeof value === 'string' && /^[0-9]{1,3}$/.test(value) ? Number(value) : value;
  if (typeof number !== 'number' || !Number.isInteger(number) || number < 1 || number > 100) {
    throw new InvalidRequestError(`${field} must be an integer from 1 to 100 (100 is lossless for webp), got ${describe(value)}`);
  }
  return number;
}

/** A short, safe rendering of a bad value for an error message (never the whole of a long one). */
function describe(value: unknown): string {
  const text = typeof value === 'string' ? JSON.stringify(value) : String(JSON.stringify(value) ?? typeof value);
  return text.length > 40 ? `${text.slice(0, 40)}…` : text;
}
