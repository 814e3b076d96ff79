/**
 * The host's own PNG of a BGRX frame (bgrx-png.ts): decoded by an independent decoder
 * (libvips), it holds exactly the frame's RGB values, for a padded stride, a region, and a
 * frame whose bytes start off a 4-byte boundary; and it agrees with the libvips path.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import sharp from 'sharp';
import { bgrxToPng, rgbBytes } from '../../src/computer/bgrx-png.js';
import type { RawFrame } from '../../src/computer/capture-channel.js';
import { encodeFrame } from '../../src/computer/frame-image.js';

/** A frame of distinct colours, rows `stride` apart, the padding column and byte filled with junk. */
function testFrame(width: number, height: number, padPixels: number, offset = 0): RawFrame {
  const stride = (width + padPixels) * 4;
  const backing = Buffer.alloc(offset + stride * height);
  const pixels = backing.subarray(offset);
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width + padPixels; x++) {
      const at = y * stride + x * 4;
      pixels[at] = (x * 7 + y) & 0xff; // B
      pixels[at + 1] = (x * 3 + y * 11) & 0xff; // G
      pixels[at + 2] = (x + y * 5 + 40) & 0xff; // R
      pixels[at + 3] = 0xa5; // the X server's padding byte: must never show
    }
  }
  return { width, height, stride, pixels };
}

/** The RGB values of `frame` in `area`, byte by byte, as the reference. */
function expectedRgb(frame: RawFrame, x0: number, y0: number, x1: number, y1: number): Buffer {
  const out: number[] = [];
  for (let y = y0; y < y1; y++) {
    for (let x = x0; x < x1; x++) {
      const at = y * frame.stride + x * 4;
      out.push(frame.pixels[at + 2]!, frame.pixels[at + 1]!, frame.pixels[at]!);
    }
  }
  return Buffer.from(out);
}

async function decoded(png: Buffer): Promise<{ width: number; height: number; channels: number; data: Buffer }> {
  const { data, info } = await sharp(png).raw().toBuffer({ resolveWithObject: true });
  return { width: info.width, height: info.height, channels: info.channels, data };
}

describe('the host PNG of a BGRX frame', () => {
  it('holds exactly the RGB values of the whole frame, stride padding cut off', async () => {
    const frame = testFrame(37, 23, 3);
    const image = await decoded(await bgrxToPng(frame));
    assert.deepEqual([image.width, image.height, image.channels], [37, 23, 3]);
    assert.ok(image.data.equals(expectedRgb(frame, 0, 0, 37, 23)));
  });

  it('holds exactly a region of the frame (zoom)', async () => {
    const frame = testFrame(40, 30, 0);
    const image = await decoded(await bgrxToPng(frame, { x0: 5, y0: 7, x1: 33, y1: 19 }));
    assert.deepEqual([image.width, image.height], [28, 12]);
    assert.ok(image.data.equals(expectedRgb(frame, 5, 7, 33, 19)));
  });

  it('reads a frame whose bytes start off a 4-byte boundary', async () => {
    const frame = testFrame(16, 9, 1, 3);
    assert.notEqual(frame.pixels.byteOffset % 4, 0);
    assert.ok((await rgbBytes(frame)).equals(expectedRgb(frame, 0, 0, 16, 9)));
    assert.ok((await decoded(await bgrxToPng(frame))).data.equals(expectedRgb(frame, 0, 0, 16, 9)));
  });

  it('converts a frame taller than one band (it yields between bands) exactly', async () => {
    const frame = testFrame(600, 900, 1);
    const image = await decoded(await bgrxToPng(frame));
    assert.ok(image.data.equals(expectedRgb(frame, 0, 0, 600, 900)));
    assert.ok((await rgbBytes(frame, { x0: 1, y0: 450, x1: 599, y1: 899 })).equals(expectedRgb(frame, 1, 450, 599, 899)));
  });

  it('gives the same pixels as the libvips path (lossless WebP) of the same frame', async () => {
    const frame = testFrame(64, 48, 2);
    const png = await decoded((await encodeFrame(frame, { format: 'png' })).data);
    const webp = await decoded((await encodeFrame(frame, { format: 'webp', quality: 100 })).data);
    assert.ok(png.data.equals(webp.data));
  });
});
