/**
 * The session's incremental PNG encoder (src/computer/png/banded-png.ts): whichever bands it
 * re-deflates or keeps, the PNG holds exactly the frame's RGB values (decoded by libvips), its
 * zlib stream is valid with the right Adler-32 (Node's inflate and Python's zlib both check
 * it), and only the bands whose pixels changed are deflated again.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { deflateSync, inflateSync } from 'node:zlib';
import { describe, it } from 'node:test';
import sharp from 'sharp';
import type { RawFrame } from '../../src/computer/capture-channel.js';
import { adler32Combine } from '../../src/computer/png/adler32.js';
import { planPieces } from '../../src/computer/png/band-plan.js';
import { BandedPngEncoder } from '../../src/computer/png/banded-png.js';
import { BandedScreen, FRAME_BAND_ROWS } from '../../src/computer/frame-bands.js';
import { giveRows, PIECE_BYTES, takeRows } from '../../src/computer/png/row-buffers.js';

const BAND = 16;

/** A frame of distinct colours (the X server's padding byte, and any padding pixels, junk). */
function patternFrame(width: number, height: number, padPixels = 0, seed = 0): RawFrame {
  const stride = (width + padPixels) * 4;
  const pixels = Buffer.alloc(stride * height);
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width + padPixels; x++) {
      const at = y * stride + x * 4;
      pixels[at] = (x * 7 + y + seed) & 0xff;
      pixels[at + 1] = (x * 3 + y * 11) & 0xff;
      pixels[at + 2] = (x + y * 5 + 40) & 0xff;
      pixels[at + 3] = 0xa5;
    }
  }
  return { width, height, stride, pixels };
}

/** A copy of `frame` with rows y0 to y1 (pixels x0 to x1) painted `colour` (BGRX). */
function painted(frame: RawFrame, y0: number, y1: number, colour: number, x0 = 0, x1 = frame.width): RawFrame {
  const pixels = Buffer.from(frame.pixels);
  for (let y = y0; y < y1; y++) for (let x = x0; x < x1; x++) pixels.writeUInt32LE(colour, y * frame.stride + x * 4);
  return { ...frame, pixels };
}

/** The frame's RGB values, byte by byte: the reference. */
function expectedRgb(frame: RawFrame): Buffer {
  const out = Buffer.alloc(frame.width * frame.height * 3);
  let o = 0;
  for (let y = 0; y < frame.height; y++) {
    for (let x = 0; x < frame.width; x++) {
      const at = y * frame.stride + x * 4;
      out[o++] = frame.pixels[at + 2]!;
      out[o++] = frame.pixels[at + 1]!;
      out[o++] = frame.pixels[at]!;
    }
  }
  return out;
}

/** The IDAT chunks' data, concatenated: the zlib stream. */
function zlibStreamOf(png: Buffer): Buffer {
  const parts: Buffer[] = [];
  for (let at = 8; at < png.length;) {
    const length = png.readUInt32BE(at);
    if (png.toString('latin1', at + 4, at + 8) === 'IDAT') parts.push(png.subarray(at + 8, at + 8 + length));
    at += length + 12;
  }
  return Buffer.concat(parts);
}

/** Python's zlib (a strict decoder: it checks the Adler-32) on the stream; the rows' length, or its error. */
function pythonInflate(stream: Buffer): string {
  const run = spawnSync(
    'python3',
    ['-c', 'import sys, zlib\ntry:\n print(len(zlib.decompress(sys.stdin.buffer.read())))\nexcept zlib.error as e:\n print(e)'],
    { input: stream },
  );
  assert.equal(run.status, 0, run.stderr.toString());
  return run.stdout.toString().trim();
}

/** Checks the PNG three ways: libvips' pixels, Node's inflate, Python's inflate. */
async function assertExact(png: Buffer, frame: RawFrame): Promise<void> {
  const { data, info } = await sharp(png).raw().toBuffer({ resolveWithObject: true });
  assert.deepEqual([info.width, info.height, info.channels], [frame.width, frame.height, 3]);
  assert.ok(data.equals(expectedRgb(frame)), "the decoded pixels are the frame's");
  const stream = zlibStreamOf(png);
  const rowsLength = frame.height * (frame.width * 3 + 1);
  assert.equal(inflateSync(stream).length, rowsLength);
  assert.equal(pythonInflate(stream), String(rowsLength));
}

describe('the banded PNG encoder', () => {
  it('encodes a first frame exactly, deflating every band', async () => {
    const encoder = new BandedPngEncoder({ bandRows: BAND, pieceBytes: 1 });
    const frame = patternFrame(97, 70);
    await assertExact(await encoder.encode(frame), frame);
    assert.deepEqual(encoder.lastStats, { bands: 5, deflated: 5, deflates: 5 });
  });

  it("reads the capture channel's frames band by band, never joined, and knows a shared band unchanged", async () => {
    const source = patternFrame(90, FRAME_BAND_ROWS * 3 + 7, 2);
    const screen = new BandedScreen(source.width, source.height, source.stride, Buffer.from(source.pixels));
    // The encoder must not join the bands into one buffer (a whole frame's copy): `pixels` throws.
    const unjoined = (frame: RawFrame): RawFrame => ({
      width: frame.width,
      height: frame.height,
      stride: frame.stride,
      bands: frame.bands,
      get pixels(): Buffer {
        throw new Error('the bands were joined');
      },
    });
    const encoder = new BandedPngEncoder({ pieceBytes: 1 });
    const first = screen.handOut();
    await assertExact(await encoder.encode(unjoined(first)), first);
    assert.deepEqual(encoder.lastStats, { bands: 4, deflated: 4, deflates: 4 });
    // A change across the first two bands' boundary: those two are copied and re-deflated, the rest kept.
    const change = Buffer.alloc(5 * 4 * 4, 0x3c);
    screen.patch([{ x: 3, y: FRAME_BAND_ROWS - 2, width: 5, height: 4, offset: 0, length: 1 }], [change]);
    const second = screen.handOut();
    await assertExact(await encoder.encode(unjoined(second)), second);
    assert.deepEqual(encoder.lastStats, { bands: 4, deflated: 2, deflates: 2 });
  });

  it('re-deflates only a changed band in the middle, and the PNG is still exact', async () => {
    const encoder = new BandedPngEncoder({ bandRows: BAND, pieceBytes: 1 });
    const frame = patternFrame(120, 96);
    await encoder.encode(frame);
    const next = painted(frame, 40, 44, 0x00ff2040, 10, 30);
    await assertExact(await encoder.encode(next), next);
    assert.deepEqual(encoder.lastStats, { bands: 6, deflated: 1, deflates: 1 });
  });

  it('re-deflates the first and the last band when only they changed', async () => {
    const encoder = new BandedPngEncoder({ bandRows: BAND, pieceBytes: 1 });
    const frame = patternFrame(64, 64);
    await encoder.encode(frame);
    const next = painted(painted(frame, 0, 1, 0x00112233), 63, 64, 0x00445566, 63, 64);
    await assertExact(await encoder.encode(next), next);
    assert.deepEqual(encoder.lastStats, { bands: 4, deflated: 2, deflates: 2 });
    // And back: the kept bands were views into the previous PNG, copied into this one.
    await assertExact(await encoder.encode(frame), frame);
    assert.deepEqual(encoder.lastStats, { bands: 4, deflated: 2, deflates: 2 });
  });

  it('keeps every band of a frame with the same pixels, giving the same bytes', async () => {
    const encoder = new BandedPngEncoder({ bandRows: BAND, pieceBytes: 1 });
    const frame = patternFrame(50, 40);
    const first = await encoder.encode(frame);
    const same = { ...frame, pixels: Buffer.from(frame.pixels) };
    const again = await encoder.encode(same);
    assert.deepEqual(encoder.lastStats, { bands: 3, deflated: 0, deflates: 0 });
    assert.ok(again.equals(first));
  });

  it('starts over for a frame of another size', async () => {
    const encoder = new BandedPngEncoder({ bandRows: BAND, pieceBytes: 1 });
    await encoder.encode(patternFrame(64, 48));
    const other = patternFrame(48, 64);
    await assertExact(await encoder.encode(other), other);
    assert.deepEqual(encoder.lastStats, { bands: 4, deflated: 4, deflates: 4 });
  });

  it('handles an odd height (a short last band), changed or not', async () => {
    const encoder = new BandedPngEncoder({ bandRows: BAND, pieceBytes: 1 });
    const frame = patternFrame(33, 2 * BAND + 5, 3);
    await assertExact(await encoder.encode(frame), frame);
    const next = painted(frame, 2 * BAND + 4, 2 * BAND + 5, 0x00abcdef);
    await assertExact(await encoder.encode(next), next);
    assert.deepEqual(encoder.lastStats, { bands: 3, deflated: 1, deflates: 1 });
    const above = painted(next, 5, 6, 0x00010203);
    await assertExact(await encoder.encode(above), above);
    assert.deepEqual(encoder.lastStats, { bands: 3, deflated: 1, deflates: 1 });
  });

  it('encodes random noise (stored blocks) exactly, then a change in it', async () => {
    const encoder = new BandedPngEncoder({ bandRows: BAND, pieceBytes: 1 });
    const frame: RawFrame = { width: 200, height: 150, stride: 800, pixels: randomBytes(800 * 150) };
    await assertExact(await encoder.encode(frame), frame);
    const next = { ...frame, pixels: Buffer.from(frame.pixels) };
    randomBytes(800 * 3).copy(next.pixels, 800 * 70);
    await assertExact(await encoder.encode(next), next);
    assert.deepEqual(encoder.lastStats, { bands: 10, deflated: 1, deflates: 1 });
  });

  it('groups bands into pieces at the default sizes, and regroups the rows that keep changing', async () => {
    // 1024x768: 24 bands of 32 rows, 5 bands (~480 KiB of rows) to a piece.
    const encoder = new BandedPngEncoder();
    let frame = patternFrame(1024, 768, 0, 1);
    await assertExact(await encoder.encode(frame), frame);
    assert.deepEqual(encoder.lastStats, { bands: 24, deflated: 24, deflates: 5 });
    const steps: Array<[y0: number, y1: number, deflated: number, deflates: number]> = [
      [0, 20, 5, 2], // band 0 changed: its piece of bands 0-4 is split into [0] and [1-4]
      [300, 415, 10, 3], // bands 9-12: pieces 5-9 and 10-14 become [5-8], [9-12], [13-14]
      [760, 768, 4, 2], // band 23: piece 20-23 becomes [20-22], [23]
      [0, 20, 1, 1], // band 0 again: only its own piece
      [31, 33, 5, 2], // bands 0 and 1 (rows 31, 32): [0-1] together, [2-4]
    ];
    for (const [y0, y1, deflated, deflates] of steps) {
      frame = painted(frame, y0, y1, 0x00fe0000 + y0 + deflates, 100, 900);
      await assertExact(await encoder.encode(frame), frame);
      assert.deepEqual(encoder.lastStats, { bands: 24, deflated, deflates }, `rows ${y0}-${y1}`);
    }
  });

  it('reads frames whose bytes start off a 4-byte boundary, with row padding', async () => {
    const encoder = new BandedPngEncoder({ bandRows: BAND, pieceBytes: 1 });
    const aligned = patternFrame(45, 40, 2);
    const backing = Buffer.alloc(aligned.pixels.length + 3);
    aligned.pixels.copy(backing, 3);
    const frame = { ...aligned, pixels: backing.subarray(3) };
    assert.notEqual(frame.pixels.byteOffset % 4, 0);
    await assertExact(await encoder.encode(frame), frame);
    const next = painted(frame, 20, 21, 0x00777777);
    await assertExact(await encoder.encode(next), next);
    assert.deepEqual(encoder.lastStats, { bands: 3, deflated: 1, deflates: 1 });
  });

  it('gives correct PNGs to two encodes running at once', async () => {
    const encoder = new BandedPngEncoder({ bandRows: BAND, pieceBytes: 1 });
    const frame = patternFrame(80, 80);
    await encoder.encode(frame);
    const a = painted(frame, 10, 12, 0x00ff0000);
    const b = painted(frame, 60, 70, 0x0000ff00);
    const [pngA, pngB] = await Promise.all([encoder.encode(a), encoder.encode(b)]);
    await assertExact(pngA, a);
    await assertExact(pngB, b);
  });

  it('yields to the event loop while it compares (and swaps) a large frame', async () => {
    const encoder = new BandedPngEncoder();
    const frame = patternFrame(3840, 2160);
    /** Turns the event loop took (setImmediate callbacks run) while `work` ran. */
    const turnsDuring = async (work: Promise<unknown>) => {
      let turns = 0;
      let done = false;
      void work.finally(() => (done = true));
      while (!done) {
        await nextTurn();
        turns++;
      }
      await work;
      return turns;
    };
    assert.ok((await turnsDuring(encoder.encode(frame))) >= 20);
    // The same pixels again: nothing but comparisons (~33 MB), which must not run in one go either.
    const turns = await turnsDuring(encoder.encode({ ...frame, pixels: Buffer.from(frame.pixels) }));
    assert.deepEqual(encoder.lastStats, { bands: 68, deflated: 0, deflates: 0 });
    assert.ok(turns >= 2, `the event loop got ${turns} turns while 8 Mi pixels were compared`);
  });
});

describe('the Adler-32 of the bands', () => {
  /** zlib's own Adler-32 of `data`: the last 4 bytes of its zlib stream. */
  const zlibAdler = (data: Buffer) => {
    const stream = deflateSync(data, { level: 0 });
    return stream.readUInt32BE(stream.length - 4);
  };

  it('combines as zlib computes over the whole (lengths around the modulus included)', () => {
    for (const [a, b] of [
      [0, 0],
      [1, 0],
      [0, 7],
      [1000, 3],
      [65521, 65521],
      [70000, 140000],
      [3, 200003],
    ] as const) {
      const first = randomBytes(a);
      const second = Buffer.alloc(b, 0xff); // all 0xff: the sums at their largest
      assert.equal(adler32Combine(zlibAdler(first), zlibAdler(second), b), zlibAdler(Buffer.concat([first, second])), `${a} + ${b} bytes`);
    }
  });

  it('is checked by both decoders of the tests: a wrong one is refused', async () => {
    const stream = zlibStreamOf(await new BandedPngEncoder({ bandRows: BAND, pieceBytes: 1 }).encode(patternFrame(40, 40)));
    stream[stream.length - 1]! ^= 1;
    assert.throws(() => inflateSync(stream), /incorrect data check/);
    assert.match(pythonInflate(stream), /incorrect data check/);
  });
});

describe('which bands are deflated again (planPieces)', () => {
  const spans = (plan: ReturnType<typeof planPieces>) => plan.map(({ span, kept }) => `${kept === undefined ? 'new' : 'kept'} ${span.first}-${span.end - 1}`);

  it('deflates every band, in pieces of at most maxBands, without stored pieces', () => {
    assert.deepEqual(spans(planPieces([true, true, true, true, true, true, true], undefined, 3)), ['new 0-2', 'new 3-5', 'new 6-6']);
  });

  it('keeps every stored piece when nothing changed', () => {
    const stored = [
      { first: 0, end: 2 },
      { first: 2, end: 5 },
    ];
    assert.deepEqual(spans(planPieces([false, false, false, false, false], stored, 8)), ['kept 0-1', 'kept 2-4']);
  });

  it('redoes a piece with a changed band, apart from its unchanged bands, and keeps the others', () => {
    const stored = [
      { first: 0, end: 3 },
      { first: 3, end: 6 },
      { first: 6, end: 8 },
    ];
    const changed = [false, false, false, false, true, true, false, false];
    assert.deepEqual(spans(planPieces(changed, stored, 8)), ['kept 0-2', 'new 3-3', 'new 4-5', 'kept 6-7']);
    // Changed bands of neighbouring pieces join, up to maxBands.
    const across = [false, false, true, true, true, false, true, false];
    assert.deepEqual(spans(planPieces(across, stored, 2)), ['new 0-1', 'new 2-3', 'new 4-4', 'new 5-5', 'new 6-6', 'new 7-7']);
  });
});

describe('the rows buffers of the pieces', () => {
  it('are reused once handed back, a few at most; a larger piece gets a buffer of its own', () => {
    const first = takeRows(1000);
    giveRows(first);
    const again = takeRows(2000);
    assert.equal(again.buffer, first.buffer, 'the buffer handed back is taken again');
    assert.equal(again.length, 2000);
    const held = [again, ...Array.from({ length: 5 }, () => takeRows(PIECE_BYTES))];
    held.forEach(giveRows);
    const kept = new Set(Array.from({ length: 6 }, () => takeRows(10).buffer));
    assert.ok(kept.size === 6 && held.filter((b) => kept.has(b.buffer)).length === 4, 'four buffers are kept, the others left to the GC');
    const large = takeRows(PIECE_BYTES + 1);
    giveRows(large);
    assert.notEqual(takeRows(PIECE_BYTES + 1).buffer, large.buffer);
  });
});
