// The client's side of the screenshot formats (the server checks them: see docs/api.md).

export type ImageMediaType = 'image/png' | 'image/jpeg' | 'image/webp';

/** A screenshot's format: PNG (the default, lossless), JPEG or WebP (WebP at quality 100 is lossless). */
export interface ScreenshotFormatOptions {
  format?: 'png' | 'jpeg' | 'webp';
  /** 1-100, jpeg and webp only (default: jpeg 80, webp 100, which is lossless). */
  quality?: number;
}

/** The query string of a screenshot's format (empty when nothing is asked). */
export function formatQuery(options: ScreenshotFormatOptions): string[] {
  const query: string[] = [];
  if (options.format !== undefined) query.push(`format=${encodeURIComponent(options.format)}`);
  if (options.quality !== undefined) query.push(`quality=${encodeURIComponent(String(options.quality))}`);
  return query;
}

export function queryString(parts: string[]): string {
  return parts.length > 0 ? `?${parts.join('&')}` : '';
}
