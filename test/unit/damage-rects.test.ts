/**
 * The changed-rectangles frames of the screen grabber (issue 13): every rectangle is checked
 * as hostile input before anything is allocated for it or inflated, and the frame contract
 * holds (an unchanged screen gives the same RawFrame object, a changed one a new object).
 */
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { describe, it } from 'node:test';
import { deflateSync } from 'node:zlib';
import type { ClientChannel } from 'ssh2';
import { CaptureChannel } from '../../src/computer/capture-channel.js';
import { MAX_RECTS, inflateRect, maxCompressedLength, parseRectTable } from '../../src/computer/damage-rects.js';
import { HEADER_BYTES, maxRectsLength } from '../../src/computer/frame-header.js';
import { GuestProtocolError } from '../../src/errors.js';
import type { GuestTransport } from '../../src/transport/index.js';
import { httpStatusOf } from '../../src/api/errors.js';

const SCREEN = { width: 64, height: 48 };
const STRIDE = SCREEN.width * 4;

function u32s(...values: number[]): Buffer {
  const out = Buffer.alloc(values.length * 4);
  values.forEach((value, i) => out.writeUInt32LE(value, i * 4));
  return out;
}

interface Rect {
  x: number;
  y: number;
  w: number;
  h: number;
  /** The stream sent for it; by default its w*h*4 pixels of `fill`, deflated. */
  stream?: Buffer;
  fill?: number;
  /** The compressed length the table claims, if not the stream's own. */
  claim?: number;
}

function rectsPayload(rects: Rect[], flags = 3, count = rects.length): Buffer {
  const streams = rects.map((r) => r.stream ?? deflateSync(Buffer.alloc(r.w * r.h * 4, r.fill ?? 1)));
  const table = rects.map((r, i) => u32s(r.x, r.y, r.w, r.h, r.claim ?? streams[i]!.length));
  return Buffer.concat([u32s(flags, count), ...table, ...streams]);
}

function message(tag: string, payload: Buffer): Buffer {
  const head = Buffer.alloc(HEADER_BYTES);
  head.write(tag, 0, 'latin1');
  head.writeUInt32LE(SCREEN.width, 4);
  head.writeUInt32LE(SCREEN.height, 8);
  head.writeUInt32LE(STRIDE, 12);
  head.writeUInt32LE(payload.length, 16);
  return Buffer.concat([head, payload]);
}

function isBadRects(err: unknown): boolean {
  assert.ok(err instanceof GuestProtocolError, `expected a GuestProtocolError, got ${String(err)}`);
  assert.equal(err.reason, 'bad_rects');
  assert.equal(httpStatusOf(err.code), 502);
  assert.equal(err.code, 'guest_protocol_error');
  return true;
}

class FakeChannel extends EventEmitter {
  readonly stderr = new EventEmitter();
  readonly written: string[] = [];
  closed = false;
  write(data: string): boolean {
    this.written.push(data);
    return true;
  }
  close(): void {
    this.closed = true;
  }
}

/** A capture channel on a stand-in SSH channel, with its first whole frame (all 7s) received. */
async function withFirstFrame() {
  const channel = new FakeChannel();
  const reported: GuestProtocolError[] = [];
  const connection = {
    spawn: async () => channel as unknown as ClientChannel,
    reportProtocolError: (err: GuestProtocolError) => reported.push(err),
  } as unknown as GuestTransport;
  const capture = await CaptureChannel.open(connection, 99, SCREEN);
  const grab = capture.grab(1_000);
  channel.emit('data', message('SBXF', Buffer.alloc(STRIDE * SCREEN.height, 7)));
  const first = await grab;
  return { capture, channel, reported, first };
}

describe('changed rectangles: the table is checked before anything is inflated', () => {
  it('accepts rectangles within the screen that do not overlap', () => {
    const table = parseRectTable(
      rectsPayload([
        { x: 0, y: 0, w: 64, h: 1 },
        { x: 10, y: 1, w: 5, h: 47 },
      ]),
      SCREEN,
    );
    assert.equal(table.shm, true);
    assert.equal(table.damage, true);
    assert.deepEqual(
      table.rects.map(({ x, y, width, height }) => [x, y, width, height]),
      [
        [0, 0, 64, 1],
        [10, 1, 5, 47],
      ],
    );
    assert.deepEqual(parseRectTable(u32s(0, 0), SCREEN), { shm: false, damage: false, rects: [] });
  });

  const bad: Array<[string, Buffer]> = [
    ['a rectangle off the right edge', rectsPayload([{ x: 60, y: 0, w: 5, h: 1 }])],
    ['a rectangle off the bottom', rectsPayload([{ x: 0, y: 40, w: 1, h: 9 }])],
    ['a rectangle whose x wraps around u32', rectsPayload([{ x: 0xffffffff, y: 0, w: 2, h: 1, stream: deflateSync(Buffer.alloc(8)) }])],
    ['an empty rectangle', rectsPayload([{ x: 0, y: 0, w: 0, h: 5, stream: deflateSync(Buffer.alloc(0)) }])],
    [
      'overlapping rectangles',
      rectsPayload([
        { x: 0, y: 0, w: 10, h: 10 },
        { x: 9, y: 9, w: 2, h: 2 },
      ]),
    ],
    [
      'the same rectangle twice',
      rectsPayload([
        { x: 3, y: 3, w: 4, h: 4 },
        { x: 3, y: 3, w: 4, h: 4 },
      ]),
    ],
    [`more than ${MAX_RECTS} rectangles`, rectsPayload(Array.from({ length: MAX_RECTS + 1 }, (_, i) => ({ x: i % 64, y: Math.floor(i / 64), w: 1, h: 1 })))],
    ['a count of 0xFFFFFFFF with no table', u32s(3, 0xffffffff)],
    ['a table longer than the payload', u32s(3, 2, 0, 0, 1, 1, 10)],
    ['a compressed length longer than its rectangle could need', rectsPayload([{ x: 0, y: 0, w: 1, h: 1, stream: Buffer.alloc(maxCompressedLength(4) + 1) }])],
    ['a compressed length of 0', rectsPayload([{ x: 0, y: 0, w: 1, h: 1, stream: Buffer.alloc(0) }])],
    ['a length that claims more than the payload holds', rectsPayload([{ x: 0, y: 0, w: 4, h: 4, claim: 30 }])],
    ['a length that claims less than the payload holds', rectsPayload([{ x: 0, y: 0, w: 4, h: 4, claim: 5 }])],
    ['unknown flags', rectsPayload([], 4)],
    ['no flags and count', Buffer.alloc(7)],
  ];
  for (const [name, payload] of bad) {
    it(`refuses ${name}`, () => assert.throws(() => parseRectTable(payload, SCREEN), isBadRects));
  }
});

describe('the capture channel with changed rectangles', () => {
  it('gives the same frame object when nothing changed, a new one (the old untouched) when something did', async () => {
    const { capture, channel, first } = await withFirstFrame();
    const same = capture.grab(1_000);
    channel.emit('data', message('SBXR', rectsPayload([], 2)));
    assert.equal(await same, first, 'the very same RawFrame object');
    assert.deepEqual(capture.method, { shm: false, damage: true });

    const changed = capture.grab(1_000);
    channel.emit(
      'data',
      message(
        'SBXR',
        rectsPayload([
          { x: 2, y: 3, w: 4, h: 5, fill: 9 },
          { x: 0, y: 47, w: 64, h: 1, fill: 8 },
        ]),
      ),
    );
    const second = await changed;
    assert.notEqual(second, first);
    assert.ok(first.pixels.equals(Buffer.alloc(STRIDE * SCREEN.height, 7)), 'the frame handed out before is never modified');
    const at = (x: number, y: number) => second.pixels[y * STRIDE + x * 4];
    assert.equal(at(2, 3), 9);
    assert.equal(at(5, 7), 9);
    assert.equal(at(6, 7), 7, 'right of the rectangle');
    assert.equal(at(1, 3), 7, 'left of the rectangle');
    assert.equal(at(5, 8), 7, 'below the rectangle');
    assert.equal(at(63, 47), 8);
    assert.equal(at(63, 46), 7);
    assert.equal(channel.written.at(-1), 'grab\n');
  });

  it('copies the screen out for a watcher without handing out a frame; a frame handed out is never written (copy on write)', async () => {
    const { capture, channel, first } = await withFirstFrame();
    const sevens = Buffer.alloc(STRIDE * SCREEN.height, 7);
    const change = async (x: number, fill: number) => {
      const done = capture.refresh(1_000);
      channel.emit('data', message('SBXR', rectsPayload([{ x, y: 0, w: 1, h: 1, fill }])));
      await done;
    };
    const target = Buffer.alloc(STRIDE * SCREEN.height);
    const v1 = capture.copyInto(target, undefined);
    assert.ok(v1 !== undefined && target.equals(sevens));
    // Unchanged: `target` is not touched (a buffer of the wrong size would be refused if it were).
    assert.equal(capture.copyInto(Buffer.alloc(1), v1), v1);

    await change(0, 9);
    assert.ok(first.pixels.equals(sevens), 'the frame handed out before the change is untouched');
    const v2 = capture.copyInto(target, v1);
    assert.notEqual(v2, v1);
    assert.equal(target[0], 9);
    await change(1, 5); // nothing handed out since: patched where it is
    const second = capture.frame();
    assert.equal(capture.frame(), second, 'the same object while the screen is unchanged');
    assert.deepEqual([second.pixels[0], second.pixels[4], second.pixels[8]], [9, 5, 7]);

    await change(2, 3);
    assert.deepEqual([second.pixels[0], second.pixels[4], second.pixels[8]], [9, 5, 7], 'a frame handed out is never written');
    const third = capture.frame();
    assert.notEqual(third, second);
    assert.deepEqual([third.pixels[0], third.pixels[4], third.pixels[8]], [9, 5, 3]);
    assert.notEqual(capture.copyInto(target, v2), v2);
    assert.equal(target[8], 3);
  });

  it('asks the grabber to settle with two integers only', async () => {
    const { capture, channel, first } = await withFirstFrame();
    const settled = capture.settled(100.4, 2_000, 1_000);
    assert.equal(channel.written.at(-1), 'settle 100 2000\n');
    channel.emit('data', message('SBXR', rectsPayload([])));
    assert.equal(await settled, first);
  });

  const badStreams: Array<[string, Buffer]> = [
    ['is not zlib at all', Buffer.from('this is not a zlib stream')],
    ['stops short', deflateSync(Buffer.alloc(4 * 4 * 4)).subarray(0, 8)],
    ['inflates to fewer bytes than its rectangle', deflateSync(Buffer.alloc(4 * 4 * 4 - 4))],
    ['inflates to more bytes than its rectangle', deflateSync(Buffer.alloc(4 * 4 * 4 + 4))],
  ];
  for (const [name, stream] of badStreams) {
    it(`fails the request and closes the channel when a stream ${name}`, async () => {
      const { capture, channel, reported } = await withFirstFrame();
      const grab = capture.grab(1_000);
      channel.emit('data', message('SBXR', rectsPayload([{ x: 0, y: 0, w: 4, h: 4, stream }])));
      await assert.rejects(grab, isBadRects);
      assert.equal(channel.closed, true);
      assert.equal(reported[0]?.reason, 'bad_rects');
    });
  }

  it('stops a zip bomb at its rectangle size', async () => {
    // 1 MiB of zeros in ~1 KiB, sent for a 1x1 rectangle: the table cannot claim more than
    // compressBound(4) bytes for it, so the bomb is refused before anything is inflated.
    const small = await withFirstFrame();
    const grab = small.capture.grab(1_000);
    small.channel.emit('data', message('SBXR', rectsPayload([{ x: 0, y: 0, w: 1, h: 1, stream: deflateSync(Buffer.alloc(1024 * 1024)) }])));
    await assert.rejects(grab, isBadRects);
    assert.equal(small.channel.closed, true);

    const bomb = deflateSync(Buffer.alloc(64 * 1024 * 1024), { level: 9 });

    // 64 MiB in ~64 KiB for a 1024x1024 rectangle (4 MiB): the inflater stops at 4 MiB and the stream is refused.
    const payload = rectsPayload([{ x: 0, y: 0, w: 1, h: 1, stream: bomb }]);
    const rect = { x: 0, y: 0, width: 1024, height: 1024, offset: payload.length - bomb.length, length: bomb.length };
    await assert.rejects(inflateRect(payload, rect), (err: unknown) => isBadRects(err) && /larger than|too large/i.test((err as Error).message));
  });

  it('reads the table first: a count of 0xFFFFFFFF fails on its 8th byte, before the rest of the payload is sent', async () => {
    const { capture, channel, reported } = await withFirstFrame();
    const grab = capture.grab(1_000);
    // The header announces the most a frame of this screen may carry; only the prefix follows.
    const head = message('SBXR', Buffer.alloc(maxRectsLength(SCREEN.width, SCREEN.height))).subarray(0, HEADER_BYTES);
    channel.emit('data', Buffer.concat([head, u32s(3, 0xffffffff)]));
    await assert.rejects(grab, (err: unknown) => isBadRects(err) && /4294967295 rectangles/.test((err as Error).message));
    assert.equal(channel.closed, true);
    assert.equal(reported[0]?.reason, 'bad_rects');
  });

  it('refuses a table with a rectangle off the screen before its streams arrive', async () => {
    const { capture, channel } = await withFirstFrame();
    const grab = capture.grab(1_000);
    const whole = message('SBXR', rectsPayload([{ x: 60, y: 0, w: 5, h: 1 }]));
    // Everything but the streams: the header, the prefix and the one entry.
    channel.emit('data', whole.subarray(0, HEADER_BYTES + 8 + 20));
    await assert.rejects(grab, (err: unknown) => isBadRects(err) && /off the 64x48 screen/.test((err as Error).message));
    assert.equal(channel.closed, true);
  });

  for (const size of [1, 7, 29]) {
    it(`applies a frame that arrives in pieces of ${size} bytes (header, table and streams cut anywhere)`, async () => {
      const { capture, channel } = await withFirstFrame();
      const grab = capture.grab(1_000);
      const whole = message(
        'SBXR',
        rectsPayload([
          { x: 2, y: 3, w: 4, h: 5, fill: 9 },
          { x: 0, y: 47, w: 64, h: 1, fill: 8 },
        ]),
      );
      for (let at = 0; at < whole.length; at += size) channel.emit('data', whole.subarray(at, at + size));
      const frame = await grab;
      assert.equal(frame.pixels[(3 * SCREEN.width + 2) * 4], 9);
      assert.equal(frame.pixels[(47 * SCREEN.width + 63) * 4], 8);
      assert.equal(frame.pixels[0], 7);
      const empty = capture.grab(1_000);
      const none = message('SBXR', rectsPayload([], 2));
      for (let at = 0; at < none.length; at += size) channel.emit('data', none.subarray(at, at + size));
      assert.equal(await empty, frame);
    });
  }

  it('refuses bytes sent while a frame is being inflated', async () => {
    const { capture, channel, reported } = await withFirstFrame();
    const grab = capture.grab(1_000);
    channel.emit('data', message('SBXR', rectsPayload([{ x: 0, y: 0, w: 64, h: 48 }])));
    channel.emit('data', Buffer.from('more'));
    await assert.rejects(grab, (err: unknown) => err instanceof GuestProtocolError && err.reason === 'unrequested_output');
    assert.equal(reported[0]?.reason, 'unrequested_output');
  });
});
