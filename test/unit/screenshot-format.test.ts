import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import sharp from 'sharp';
import type { RawFrame } from '../../src/computer/capture-channel.js';
import { EncodeCache } from '../../src/computer/encode-cache.js';
import { encodeFrame, encodeFrameRegion, framePng } from '../../src/computer/frame-image.js';
import { cropPng, encodePng } from '../../src/computer/image.js';
import { resolveScreenshotFormat, type EncodedImage } from '../../src/computer/screenshot-format.js';
import { InvalidRequestError } from '../../src/errors.js';
import { resolveRequest } from '../../src/sessions/session-request.js';
import { screenshotDefault } from '../../src/sessions/session-view.js';

const DEFAULTS = { defaultTimeoutSeconds: 300, maxLifetimeSeconds: 3600, template: 'minimal' };

function refused(run: () => unknown, message: RegExp): void {
  assert.throws(run, (err: unknown) => err instanceof InvalidRequestError && message.test(err.message));
}

describe('screenshot format and quality', () => {
  it('is png unless asked, and fills in the quality of jpeg and webp', () => {
    assert.deepEqual(resolveScreenshotFormat({}), { format: 'png' });
    assert.deepEqual(resolveScreenshotFormat({ format: 'jpeg' }), { format: 'jpeg', quality: 80 });
    assert.deepEqual(resolveScreenshotFormat({ format: 'webp' }), { format: 'webp', quality: 100 }, 'webp is lossless unless asked');
    assert.deepEqual(resolveScreenshotFormat({ format: 'webp', quality: 100 }), { format: 'webp', quality: 100 });
    // Query strings carry digits.
    assert.deepEqual(resolveScreenshotFormat({ format: 'jpeg', quality: '35' }), { format: 'jpeg', quality: 35 });
    assert.deepEqual(resolveScreenshotFormat({ format: 'webp', quality: 1 }), { format: 'webp', quality: 1 });
  });

  it("takes what a request leaves out from the session's default", () => {
    const session = { format: 'webp', quality: 60 } as const;
    assert.deepEqual(resolveScreenshotFormat({}, session), session);
    assert.deepEqual(resolveScreenshotFormat({ quality: 90 }, session), { format: 'webp', quality: 90 });
    // Another format does not inherit the default's quality: its own default applies.
    assert.deepEqual(resolveScreenshotFormat({ format: 'jpeg' }, session), { format: 'jpeg', quality: 80 });
    assert.deepEqual(resolveScreenshotFormat({ format: 'png' }, session), { format: 'png' });
    refused(() => resolveScreenshotFormat({ quality: 50 }, { format: 'png' }), /^quality applies to jpeg and webp only/);
  });

  it('refuses anything else with a message naming the field', () => {
    for (const format of ['gif', 'PNG', 'image/png', '', 5, null, ['png'], { format: 'png' }]) {
      refused(() => resolveScreenshotFormat({ format }), /^format must be one of png, jpeg, webp/);
    }
    for (const quality of [0, 101, 50.5, -1, '0', '101', '8o', ' 80', '1e2', '0x50', '', true, null, [80], Number.NaN]) {
      refused(() => resolveScreenshotFormat({ format: 'jpeg', quality }), /^quality must be an integer from 1 to 100/);
    }
    refused(() => resolveScreenshotFormat({ format: 'png', quality: 80 }), /^quality applies to jpeg and webp only/);
    // A long bad value is cut in the message.
    refused(() => resolveScreenshotFormat({ format: 'x'.repeat(10_000) }), /^format must be .{0,120}…$/);
  });

  it('is a session default at create, named screenshot.format / screenshot.quality', () => {
    assert.equal(resolveRequest({}, DEFAULTS).screenshotFormat, 'png');
    assert.equal(resolveRequest({}, DEFAULTS).screenshotQuality, null);
    const jpeg = resolveRequest({ screenshot: { format: 'jpeg' } }, DEFAULTS);
    assert.deepEqual(screenshotDefault(jpeg), { format: 'jpeg', quality: 80 });
    assert.deepEqual(screenshotDefault(resolveRequest({ screenshot: { format: 'webp', quality: 100 } }, DEFAULTS)), { format: 'webp', quality: 100 });
    refused(() => resolveRequest({ screenshot: { format: 'bmp' } }, DEFAULTS), /^screenshot\.format must be one of/);
    refused(() => resolveRequest({ screenshot: { quality: 70 } }, DEFAULTS), /^screenshot\.quality applies to jpeg and webp only/);
    refused(() => resolveRequest({ screenshot: { format: 'jpeg', quality: 0 } }, DEFAULTS), /^screenshot\.quality must be an integer/);
  });
});

/** A 64x48 BGRX frame (stride with 8 bytes of padding) of text-like stripes. */
function testFrame(): RawFrame {
  const width = 64;
  const height = 48;
  const stride = width * 4 + 8;
  const pixels = Buffer.alloc(stride * height);
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      const o = y * stride + x * 4;
      pixels[o] = (x * 4) & 255; // B
      pixels[o + 1] = (y * 5) & 255; // G
      pixels[o + 2] = (x + y) % 7 === 0 ? 255 : 20; // R
    }
  }
  return { width, height, stride, pixels };
}

async function rgbOfImage(image: EncodedImage): Promise<Buffer> {
  return sharp(image.data).removeAlpha().raw().toBuffer();
}

describe('encoding a raw frame in each format', () => {
  it('gives each format its media type and magic bytes; png and webp at 100 hold the exact pixels', async () => {
    const frame = testFrame();
    const png = await encodeFrame(frame, { format: 'png' });
    assert.equal(png.mediaType, 'image/png');
    assert.equal(png.data.readUInt32BE(0), 0x89504e47);
    const exact = await rgbOfImage(png);
    const lossless = await encodeFrame(frame, { format: 'webp', quality: 100 });
    assert.equal(lossless.mediaType, 'image/webp');
    assert.equal(lossless.data.toString('latin1', 8, 12), 'WEBP');
    assert.ok((await rgbOfImage(lossless)).equals(exact), 'webp at quality 100 is lossless');
    const lossy = await encodeFrame(frame, { format: 'webp', quality: 50 });
    assert.ok(!(await rgbOfImage(lossy)).equals(exact), 'webp below 100 is lossy');
    const jpeg = await encodeFrame(frame, { format: 'jpeg', quality: 80 });
    assert.equal(jpeg.mediaType, 'image/jpeg');
    assert.deepEqual([...jpeg.data.subarray(0, 3)], [0xff, 0xd8, 0xff]);
    assert.equal((await sharp(jpeg.data).metadata()).chromaSubsampling, '4:4:4');
    // Scaled and zoomed images come out at their size in the format asked for.
    const scaled = await encodeFrame(frame, { format: 'jpeg', quality: 80 }, { width: 32, height: 24 });
    assert.deepEqual([(await sharp(scaled.data).metadata()).width, (await sharp(scaled.data).metadata()).format], [32, 'jpeg']);
    const region = await encodeFrameRegion(frame, { x0: 8, y0: 8, x1: 24, y1: 16 }, { format: 'webp', quality: 100 });
    const meta = await sharp(region.data).metadata();
    assert.deepEqual([meta.width, meta.height, meta.format], [16, 8, 'webp']);
  });
});

describe("the fallback path: scrot's PNG in each format", () => {
  it("keeps scrot's bytes for png, and re-encodes, scales and crops to the same pixels as the raw path", async () => {
    const frame = testFrame();
    const scrotPng = await framePng(frame); // what scrot would have sent: the same pixels
    const screen = { width: frame.width, height: frame.height };
    assert.equal((await encodePng(scrotPng, screen, screen, { format: 'png' })).data, scrotPng, 'no work when nothing changes');
    const small = { width: 32, height: 24 };
    for (const choice of [{ format: 'png' as const }, { format: 'webp' as const, quality: 100 }]) {
      const viaScrot = await encodePng(scrotPng, screen, small, choice);
      const viaFrame = await encodeFrame(frame, choice, small);
      assert.equal(viaScrot.mediaType, viaFrame.mediaType);
      assert.ok((await rgbOfImage(viaScrot)).equals(await rgbOfImage(viaFrame)), `${choice.format}: scaled alike`);
      const region = { x0: 3, y0: 5, x1: 40, y1: 30 };
      const cut = await cropPng(scrotPng, region, choice);
      assert.ok((await rgbOfImage(cut)).equals(await rgbOfImage(await encodeFrameRegion(frame, region, choice))), `${choice.format}: cropped alike`);
    }
    // scrot may write RGBA: the model gets RGB, whatever the format.
    const rgba = await sharp(scrotPng).ensureAlpha().png().toBuffer();
    const jpeg = await encodePng(rgba, screen, screen, { format: 'jpeg', quality: 80 });
    assert.equal(jpeg.mediaType, 'image/jpeg');
    assert.equal((await sharp(jpeg.data).metadata()).channels, 3);
  });
});

describe('the encode cache', () => {
  const image = (tag: string): EncodedImage => ({ data: Buffer.from(tag), mediaType: 'image/png' });

  it('encodes the same frame object once per format, quality, size and region', async () => {
    const cache = new EncodeCache(4);
    const frame = testFrame();
    let encodings = 0;
    const encode = (tag: string) => () => {
      encodings++;
      return Promise.resolve(image(tag));
    };
    const png = { choice: { format: 'png' as const }, size: { width: 64, height: 48 } };
    assert.equal((await cache.get(frame, png, encode('a'))).data.toString(), 'a');
    assert.equal((await cache.get(frame, png, encode('b'))).data.toString(), 'a', 'same frame, same key: cached');
    assert.equal(encodings, 1);
    await cache.get(frame, { ...png, choice: { format: 'jpeg', quality: 80 } }, encode('c'));
    await cache.get(frame, { ...png, choice: { format: 'jpeg', quality: 81 } }, encode('d'));
    await cache.get(frame, { ...png, size: { width: 32, height: 24 } }, encode('e'));
    await cache.get(frame, { choice: { format: 'png' }, region: { x0: 0, y0: 0, x1: 8, y1: 8 } }, encode('f'));
    assert.equal(encodings, 5, 'each other key is encoded');
    assert.equal(cache.size, 4, 'bounded');
    // An equal frame that is another object (the screen changed and changed back) is encoded again.
    const copy = { ...frame, pixels: Buffer.from(frame.pixels) };
    assert.equal((await cache.get(copy, png, encode('g'))).data.toString(), 'g');
    assert.equal(cache.size, 1, "a newer frame drops the older frame's entries");
  });

  it("keeps at most one frame's worth of encoded bytes, dropping the least recently used", async () => {
    const cache = new EncodeCache(4);
    const frame = testFrame(); // 12,672 bytes of pixels
    const big = (format: 'jpeg' | 'webp', quality: number) => ({ choice: { format, quality } });
    const encodeBig = () => Promise.resolve<EncodedImage>({ data: Buffer.alloc(5_000), mediaType: 'image/jpeg' });
    await cache.get(frame, big('jpeg', 10), encodeBig);
    await cache.get(frame, big('jpeg', 20), encodeBig);
    assert.equal(cache.size, 2);
    await cache.get(frame, big('jpeg', 30), encodeBig);
    await Promise.resolve(); // the trim runs once the encoding has settled
    assert.equal(cache.size, 2, '15,000 bytes do not fit: the oldest goes');
    let encodings = 0;
    await cache.get(frame, big('jpeg', 10), () => {
      encodings++;
      return encodeBig();
    });
    assert.equal(encodings, 1, 'the dropped one is encoded again');
  });

  it('shares one encoding between concurrent requests and forgets a failed one', async () => {
    const cache = new EncodeCache();
    const frame = testFrame();
    const key = { choice: { format: 'png' as const } };
    let encodings = 0;
    const failing = () => {
      encodings++;
      return Promise.reject(new Error('boom'));
    };
    const [first, second] = await Promise.allSettled([cache.get(frame, key, failing), cache.get(frame, key, failing)]);
    assert.equal(first.status, 'rejected');
    assert.equal(second.status, 'rejected');
    assert.equal(encodings, 1);
    assert.equal(cache.size, 0, 'a failed encoding is not kept');
    assert.equal((await cache.get(frame, key, () => Promise.resolve(image('ok')))).data.toString(), 'ok');
  });
});
