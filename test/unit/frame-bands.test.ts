/**
 * The capture channel's screen in bands (frame-bands.ts): a frame handed out never changes,
 * a change copies only the bands it touches, and bands nobody holds are patched in place.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { BandedScreen, FRAME_BAND_ROWS } from '../../src/computer/frame-bands.js';
import { sameFrame } from '../../src/computer/frame-image.js';
import { bgrxToPng, rgbBytes } from '../../src/computer/bgrx-png.js';
import type { RawFrame } from '../../src/computer/frame-bands.js';

const WIDTH = 8;
const HEIGHT = FRAME_BAND_ROWS * 2 + 5; // two whole bands and a short one
const STRIDE = WIDTH * 4 + 8; // two pixels of padding per row, as the X server may have

/** Pixel (x, y) of a frame with rows `stride` apart, as B, G, R, X. */
function pixelAt(pixels: Buffer, stride: number, x: number, y: number): number[] {
  return [...pixels.subarray(y * stride + x * 4, y * stride + x * 4 + 4)];
}

function rect(x: number, y: number, width: number, height: number, fill: number) {
  return { rect: { x, y, width, height, offset: 0, length: 1 }, pixels: Buffer.alloc(width * height * 4, fill) };
}

function screen(): BandedScreen {
  return new BandedScreen(WIDTH, HEIGHT, STRIDE, Buffer.alloc(STRIDE * HEIGHT, 1));
}

describe('the screen in bands', () => {
  it('cuts the frame into bands of FRAME_BAND_ROWS rows, the last one short', () => {
    const frame = screen().handOut();
    assert.deepEqual(
      frame.bands?.buffers.map((b) => b.length / STRIDE),
      [FRAME_BAND_ROWS, FRAME_BAND_ROWS, 5],
    );
    assert.ok(frame.pixels.equals(Buffer.alloc(STRIDE * HEIGHT, 1)));
  });

  it('never writes a band a frame handed out holds: a change copies the bands it touches, the others stay shared', () => {
    const s = screen();
    const before = s.handOut();
    assert.equal(s.handOut(), before, 'the same object while nothing changed');
    // Rows 30 to 34: the end of band 0 and the start of band 1.
    const { rect: r, pixels } = rect(2, FRAME_BAND_ROWS - 2, 3, 5, 9);
    s.patch([r], [pixels]);
    const after = s.handOut();
    assert.notEqual(after, before);
    assert.ok(before.pixels.equals(Buffer.alloc(STRIDE * HEIGHT, 1)), 'the frame handed out before is untouched');
    const [b0, b1, b2] = after.bands!.buffers;
    assert.notEqual(b0, before.bands!.buffers[0]);
    assert.notEqual(b1, before.bands!.buffers[1]);
    assert.equal(b2, before.bands!.buffers[2], 'an untouched band is the very same buffer');
    assert.deepEqual(pixelAt(after.pixels, STRIDE, 2, FRAME_BAND_ROWS - 2), [9, 9, 9, 9]);
    assert.deepEqual(pixelAt(after.pixels, STRIDE, 4, FRAME_BAND_ROWS + 2), [9, 9, 9, 9]);
    assert.deepEqual(pixelAt(after.pixels, STRIDE, 5, FRAME_BAND_ROWS + 2), [1, 1, 1, 1], 'right of the rectangle');
    assert.deepEqual(pixelAt(after.pixels, STRIDE, 2, FRAME_BAND_ROWS + 3), [1, 1, 1, 1], 'below the rectangle');
    assert.deepEqual(pixelAt(after.pixels, STRIDE, 1, FRAME_BAND_ROWS - 2), [1, 1, 1, 1], 'left of the rectangle');
  });

  it('patches in place while no frame holds the bands, and copies the screen out packed', () => {
    const s = screen();
    const held = s.handOut();
    s.patch(...toArgs(rect(0, 0, 1, 1, 5))); // band 0 copied (held)
    s.patch(...toArgs(rect(1, 0, 1, 1, 6))); // the copy, patched in place: both changes are in it
    const target = Buffer.alloc(WIDTH * 4 * HEIGHT);
    s.copyInto(target);
    assert.deepEqual(pixelAt(target, WIDTH * 4, 0, 0), [5, 5, 5, 5]);
    assert.deepEqual(pixelAt(target, WIDTH * 4, 1, 0), [6, 6, 6, 6]);
    assert.deepEqual(pixelAt(target, WIDTH * 4, WIDTH - 1, HEIGHT - 1), [1, 1, 1, 1], 'the padding is left out');
    assert.deepEqual(pixelAt(held.pixels, STRIDE, 0, 0), [1, 1, 1, 1]);
    assert.throws(() => s.copyInto(Buffer.alloc(10)), RangeError);
  });

  it('tells equal frames by their shared bands, and by their bytes otherwise', () => {
    const s = screen();
    const a = s.handOut();
    s.patch(...toArgs(rect(0, HEIGHT - 1, 1, 1, 1))); // the same value again: new band, same bytes
    const b = s.handOut();
    assert.notEqual(a, b);
    assert.equal(sameFrame(a, b), true);
    s.patch(...toArgs(rect(0, HEIGHT - 1, 1, 1, 2)));
    assert.equal(sameFrame(a, s.handOut()), false);
    assert.equal(sameFrame(a, { width: WIDTH, height: HEIGHT, stride: STRIDE, pixels: Buffer.alloc(STRIDE * HEIGHT, 1) }), true);
  });
});

describe('frames in bands, encoded', () => {
  it('gives the same RGB and PNG for any area as one buffer would, reading band by band (never joined)', async () => {
    const pixels = Buffer.alloc(STRIDE * HEIGHT);
    for (let i = 0; i < pixels.length; i++) pixels[i] = (i * 7 + (i >> 9)) & 0xff;
    const whole: RawFrame = { width: WIDTH, height: HEIGHT, stride: STRIDE, pixels };
    const banded = new BandedScreen(WIDTH, HEIGHT, STRIDE, Buffer.from(pixels)).handOut();
    const unjoined: RawFrame = {
      width: WIDTH,
      height: HEIGHT,
      stride: STRIDE,
      bands: banded.bands,
      get pixels(): Buffer {
        throw new Error('the bands were joined');
      },
    };
    for (const area of [undefined, { x0: 1, y0: FRAME_BAND_ROWS - 3, x1: 6, y1: FRAME_BAND_ROWS * 2 + 2 }, { x0: 0, y0: HEIGHT - 1, x1: WIDTH, y1: HEIGHT }]) {
      assert.ok((await rgbBytes(unjoined, area)).equals(await rgbBytes(whole, area)), `rgb of ${JSON.stringify(area)}`);
      assert.ok((await bgrxToPng(unjoined, area)).equals(await bgrxToPng(whole, area)), `png of ${JSON.stringify(area)}`);
    }
  });
});

function toArgs(change: ReturnType<typeof rect>): [Parameters<BandedScreen['patch']>[0], Buffer[]] {
  return [[change.rect], [change.pixels]];
}
