import type { Sharp } from 'sharp';
import { LOSSLESS_WEBP_QUALITY, MEDIA_TYPES, type EncodedImage, type ScreenshotFormat } from './screenshot-format.js';

/**
 * The encoder settings of each format, chosen for the least CPU at a fair size on real screens
 * (measured with scripts/measure-encoders.ts; figures in docs/benchmarks.md). The model pays per
 * pixel, not per byte, and every millisecond here is on the agent loop's hot path, so where a
 * setting buys a few percent of bytes for several times the CPU, the CPU wins.
 */
// PNG (scaled screenshots only: a full-size or zoomed PNG is written by bgrx-png.ts, without
// libvips, at Node zlib's level 2 and no filter, for the same reasons): zlib level 2, no adaptive filtering. Levels 1-3 are zlib's fast deflate: level 2 halves
// level 1's bytes on text screens (84 -> 44 KiB at 1024x768) for ~0.4 ms more; level 4 and up
// cost more for a few KiB; adaptive filtering costs 5-10x the CPU for no gain on screens, and a
// 256-colour palette 10-30x.
const PNG_OPTIONS = { compressionLevel: 2, adaptiveFiltering: false } as const;
// JPEG: plain libjpeg-turbo, 4:4:4. 4:2:0 saves ~40% of the CPU but smears coloured text
// (28.9 dB against 36.5 dB at quality 80 on a text screen); mozjpeg costs 10x the CPU.
const JPEG_OPTIONS = { mozjpeg: false, progressive: false, chromaSubsampling: '4:4:4' } as const;
// WebP: effort 0, lossy and lossless. Higher efforts cost 1.5-3x the CPU; for lossless, effort 1
// halves the bytes of effort 0 but nearly doubles its CPU.
const WEBP_EFFORT = 0;

/** Encodes the pipeline's output (RGB) in the chosen format, on libvips' threads. */
export async function encodeAs(image: Sharp, choice: ScreenshotFormat): Promise<EncodedImage> {
  const mediaType = MEDIA_TYPES[choice.format];
  switch (choice.format) {
    case 'png':
      return { data: await image.png(PNG_OPTIONS).toBuffer(), mediaType };
    case 'jpeg':
      return { data: await image.jpeg({ ...JPEG_OPTIONS, quality: choice.quality }).toBuffer(), mediaType };
    case 'webp': {
      const lossless = choice.quality === LOSSLESS_WEBP_QUALITY;
      const options = lossless ? { lossless: true, effort: WEBP_EFFORT } : { quality: choice.quality, effort: WEBP_EFFORT };
      return { data: await image.webp(options).toBuffer(), mediaType };
    }
  }
}
