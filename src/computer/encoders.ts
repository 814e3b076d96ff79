import type { Sharp } from 'sharp';
import { LOSSLESS_WEBP_QUALITY, MEDIA_TYPES, type EncodedImage, type ScreenshotFormat } from './screenshot-format.js';

/**
 * The encoder settings of each format, chosen for the least CPU at a fair size on real screens
 * (measured with scripts/measure-encoders.ts; figures in docs/benchmarks.md). The model pays per
 * pixel, not per byte, and every millisecond here is on the agent loop's hot path, so where a
 * setting buys a few percent of bytes for several times the CPU, the CPU wins.
 */
// PNG: zlib level 1 with no adaptive filtering: screens are flat colour and text, which deflate
// packs well at the fastest level; higher levels and filters cost several times the CPU.
const PNG_OPTIONS = { compressionLevel: 1, adaptiveFiltering: false } as const;
// JPEG: plain libjpeg-turbo (no mozjpeg trellis, no progressive scan: both cost CPU for a few
// percent); 4:4:4 chroma keeps coloured text legible, which 4:2:0 smears.
const JPEG_OPTIONS = { mozjpeg: false, progressive: false, chromaSubsampling: '4:4:4' } as const;
// WebP: the lowest effort; the higher ones search harder for a little less size.
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
