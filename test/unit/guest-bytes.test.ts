/**
 * Every byte a guest sends is bounded (issue 11, point 2), without a sandbox: the frame
 * header checks, the capture channel and the helper-stderr cap on a stand-in SSH channel,
 * and the bash tool's marker scanner. The red-team file (redteam-guest.test.ts) performs the
 * same attacks against real sandboxes.
 */
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { describe, it } from 'node:test';
import type { ClientChannel } from 'ssh2';
import { randomBytes } from 'node:crypto';
import { deflateSync } from 'node:zlib';
import sharp from 'sharp';
import { CaptureChannel, type RawFrame } from '../../src/computer/capture-channel.js';
import { startWarmHelpers } from '../../src/computer/warm-helpers.js';
import { Desktop, GRABBER_RESTART_AFTER_LIE_MS } from '../../src/computer/desktop.js';
import { framePng, framePngRegion } from '../../src/computer/frame-image.js';
import { HEADER_BYTES, maxRectsLength, parseFrameHeader } from '../../src/computer/frame-header.js';
import { STDERR_MAX_BYTES } from '../../src/computer/guest-process-channel.js';
import { GuestProtocolError } from '../../src/errors.js';
import { BashShell, type BashShellOptions } from '../../src/tools/bash/bash-shell.js';
import { ByteBudget, type BashOutputCounters } from '../../src/tools/bash/output-budget.js';
import { MarkerScanner, printMarker } from '../../src/tools/bash/marker.js';
import type { GuestTransport } from '../../src/transport/index.js';
import { httpStatusOf } from '../../src/api/errors.js';

const SCREEN = { width: 1024, height: 768 };
const STRIDE = SCREEN.width * 4;

function header(tag: string, width: number, height: number, stride: number, length: number): Buffer {
  const head = Buffer.alloc(HEADER_BYTES);
  head.write(tag, 0, 'latin1');
  head.writeUInt32LE(width, 4);
  head.writeUInt32LE(height, 8);
  head.writeUInt32LE(stride, 12);
  head.writeUInt32LE(length, 16);
  return head;
}

function u32s(...values: number[]): Buffer {
  const out = Buffer.alloc(values.length * 4);
  values.forEach((value, i) => out.writeUInt32LE(value, i * 4));
  return out;
}

function isProtocolError(reason: string) {
  return (err: unknown) => {
    assert.ok(err instanceof GuestProtocolError, `expected a GuestProtocolError, got ${String(err)}`);
    assert.equal(err.reason, reason);
    assert.equal(httpStatusOf(err.code), 502);
    assert.equal(err.code, 'guest_protocol_error');
    return true;
  };
}

describe('frame headers are checked against the screen', () => {
  it('accepts a whole frame of the screen, with or without row padding', () => {
    const full = parseFrameHeader(header('SBXF', 1024, 768, STRIDE, STRIDE * 768), SCREEN);
    assert.deepEqual(full, { kind: 'full', width: 1024, height: 768, stride: STRIDE, length: STRIDE * 768 });
    const padded = STRIDE + 60;
    assert.equal(parseFrameHeader(header('SBXF', 1024, 768, padded, padded * 768), SCREEN).stride, padded);
    assert.equal(parseFrameHeader(header('SBXR', 1024, 768, STRIDE, 8), SCREEN).kind, 'rects');
    assert.equal(parseFrameHeader(header('SBXR', 1024, 768, STRIDE, maxRectsLength(1024, 768)), SCREEN).kind, 'rects');
  });

  const bad: Array<[string, Buffer, string]> = [
    ['the forged 16383x16383 header', header('SBXF', 16383, 16383, 0, 65536), 'bad_size'],
    ['a size other than the screen', header('SBXF', 1024, 769, STRIDE, STRIDE * 769), 'bad_size'],
    // Only the width wrong, everything else consistent with it: no other check can catch these.
    ['a width alone other than the screen (stride and length to match)', header('SBXF', 1023, 768, 1023 * 4, 1023 * 4 * 768), 'bad_size'],
    ["a narrower width alone, in the screen's own stride and length", header('SBXF', 1020, 768, STRIDE, STRIDE * 768), 'bad_size'],
    ['a wider width alone, changed rectangles', header('SBXR', 1025, 768, 1025 * 4, 8), 'bad_size'],
    ['stride 0', header('SBXF', 1024, 768, 0, 0), 'bad_stride'],
    ['a stride below a row', header('SBXF', 1024, 768, STRIDE - 4, (STRIDE - 4) * 768), 'bad_stride'],
    ['a stride with more than 63 bytes of padding', header('SBXF', 1024, 768, STRIDE + 64, (STRIDE + 64) * 768), 'bad_stride'],
    ['a stride that is not whole pixels', header('SBXF', 1024, 768, STRIDE + 2, (STRIDE + 2) * 768), 'bad_stride'],
    ['length 0xFFFFFFF0', header('SBXF', 1024, 768, STRIDE, 0xfffffff0), 'bad_length'],
    ['a whole frame one byte short', header('SBXF', 1024, 768, STRIDE, STRIDE * 768 - 1), 'bad_length'],
    ['rectangles larger than a compressed frame and its table', header('SBXR', 1024, 768, STRIDE, maxRectsLength(1024, 768) + 1), 'bad_length'],
    ['rectangles of 0xFFFFFFF0 bytes', header('SBXR', 1024, 768, STRIDE, 0xfffffff0), 'bad_length'],
    ['rectangles without flags and count', header('SBXR', 1024, 768, STRIDE, 7), 'bad_length'],
    ['the old changed-rows kind', header('SBXD', 1024, 768, STRIDE, 4), 'bad_tag'],
    ['an unknown tag', header('SBXZ', 1024, 768, STRIDE, STRIDE * 768), 'bad_tag'],
  ];
  for (const [name, head, reason] of bad) {
    it(`refuses ${name}`, () => assert.throws(() => parseFrameHeader(head, SCREEN), isProtocolError(reason)));
  }
});

/** An SSH channel stand-in: what the guest "sends" is emitted by the test. */
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
  /** Whether the reader holds the channel (flow control: the guest's window is not refilled). */
  isPaused = false;
  pause(): this {
    this.isPaused = true;
    return this;
  }
  resume(): this {
    this.isPaused = false;
    return this;
  }
}

async function openCapture(): Promise<{ capture: CaptureChannel; channel: FakeChannel; reported: GuestProtocolError[] }> {
  const channel = new FakeChannel();
  const reported: GuestProtocolError[] = [];
  const connection = {
    spawn: async () => channel as unknown as ClientChannel,
    reportProtocolError: (err: GuestProtocolError) => reported.push(err),
  } as unknown as GuestTransport;
  const capture = await CaptureChannel.open(connection, 99, SCREEN);
  return { capture, channel, reported };
}

describe('the capture channel', () => {
  it('assembles a whole frame and changed rectangles from chunks of any size', async () => {
    const { capture, channel } = await openCapture();
    const pixels = Buffer.alloc(STRIDE * 768, 7);
    const first = capture.grab(1_000);
    const message = Buffer.concat([header('SBXF', 1024, 768, STRIDE, pixels.length), pixels]);
    for (let at = 0; at < message.length; at += 65_521) channel.emit('data', message.subarray(at, at + 65_521));
    const frame = await first;
    assert.equal(frame.pixels.length, pixels.length);
    assert.ok(frame.pixels.equals(pixels));

    const second = capture.grab(1_000);
    const row = Buffer.alloc(STRIDE, 9);
    const stream = deflateSync(row);
    const rects = Buffer.concat([u32s(3, 1, 0, 5, 1024, 1, stream.length), stream]);
    const bytes = Buffer.concat([header('SBXR', 1024, 768, STRIDE, rects.length), rects]);
    for (const byte of bytes) channel.emit('data', Buffer.from([byte]));
    const patched = await second;
    assert.ok(patched.pixels.subarray(5 * STRIDE, 6 * STRIDE).equals(row));
    assert.equal(patched.pixels[0], 7);
    assert.ok(frame.pixels.subarray(5 * STRIDE, 6 * STRIDE).equals(Buffer.alloc(STRIDE, 7)), 'the frame handed out before is unchanged');
    assert.notEqual(patched, frame);
    assert.deepEqual(capture.method, { shm: true, damage: true });
    assert.equal(channel.closed, false);
  });

  for (const [name, head] of [
    ['16383x16383, stride 0', header('SBXF', 16383, 16383, 0, 65536)],
    ['length 0xFFFFFFF0', header('SBXF', 1024, 768, STRIDE, 0xfffffff0)],
  ] as const) {
    it(`fails the request at once on a header of ${name}, closes the channel and allocates nothing`, async () => {
      const { capture, channel, reported } = await openCapture();
      const before = process.memoryUsage().arrayBuffers;
      const grab = capture.grab(5_000);
      channel.emit('data', head);
      // The payload that follows is never kept: the channel is gone.
      channel.emit('data', Buffer.alloc(65_536));
      await assert.rejects(grab, (err: unknown) => err instanceof GuestProtocolError && /bad frame/.test(err.message));
      assert.ok(process.memoryUsage().arrayBuffers - before < 1024 * 1024, 'no buffer of the announced size');
      assert.equal(channel.closed, true);
      assert.equal(capture.isOpen, false);
      assert.equal(reported.length, 1, 'reported once, for the metric');
      assert.equal(reported[0]?.channel, 'capture');
    });
  }

  it('hands the screen on to a grabber started again: an unchanged first frame keeps the bands and allocates nothing', async () => {
    const memory = {};
    const start = async (message: Buffer) => {
      const channel = new FakeChannel();
      const connection = { spawn: async () => channel as unknown as ClientChannel, reportProtocolError: () => undefined } as unknown as GuestTransport;
      const capture = await CaptureChannel.open(connection, 99, SCREEN, memory);
      const grab = capture.grab(1_000);
      channel.emit('data', message);
      const frame = await grab;
      capture.close();
      return frame;
    };
    const whole = (pixels: Buffer) => Buffer.concat([header('SBXF', 1024, 768, STRIDE, STRIDE * 768), pixels]);
    const screen = whole(Buffer.alloc(STRIDE * 768, 7));
    const first = await start(screen);
    const second = await start(screen);
    assert.ok(second.bands && first.bands);
    assert.ok(
      second.bands.buffers.every((band, i) => band === first.bands!.buffers[i]),
      'the same bands, not copies',
    );
    // The second start received into a buffer of its own, now spare; the third reuses it.
    const before = process.memoryUsage().arrayBuffers;
    const third = await start(screen);
    assert.ok(process.memoryUsage().arrayBuffers - before < 1024 * 1024, 'no new buffer for an unchanged screen');
    assert.ok(third.bands!.buffers.every((band, i) => band === first.bands!.buffers[i]));
    // A changed band is a copy of its own; the frames handed out before are untouched.
    const changed = Buffer.from(screen);
    changed.fill(9, HEADER_BYTES + 40 * STRIDE, HEADER_BYTES + 41 * STRIDE);
    const fourth = await start(changed);
    assert.notEqual(fourth.bands!.buffers[1], first.bands.buffers[1]);
    assert.equal(fourth.bands!.buffers[0], first.bands.buffers[0]);
    assert.equal(fourth.pixels[40 * STRIDE], 9);
    assert.equal(first.pixels[40 * STRIDE], 7, 'a frame handed out is never modified');
    changed.fill(3);
    assert.equal(fourth.pixels[40 * STRIDE], 9, 'the spare buffer is not part of any frame');
  });

  it(`does not start a grabber that lied again for ${GRABBER_RESTART_AFTER_LIE_MS} ms: requests meanwhile fail at once with its error`, async () => {
    const channels: FakeChannel[] = [];
    const connection = {
      spawn: async () => {
        const channel = new FakeChannel();
        channels.push(channel);
        // Each grabber answers its first request with the forged header.
        channel.write = (data: string) => {
          channel.written.push(data);
          setImmediate(() => channel.emit('data', header('SBXF', 16383, 16383, 0, 65536)));
          return true;
        };
        return channel as unknown as ClientChannel;
      },
      reportProtocolError: () => undefined,
    } as unknown as GuestTransport;
    const desktop = new Desktop(connection, 99, SCREEN);
    await assert.rejects(desktop.capture(), isProtocolError('bad_size'));
    const lied = performance.now();
    for (let i = 0; i < 20; i++) {
      await assert.rejects(
        desktop.capture(),
        (err: unknown) => err instanceof GuestProtocolError && err.reason === 'bad_size' && /started again in \d+ ms/.test(err.message),
      );
    }
    assert.equal(channels.length, 1, 'one grabber started, not one per request');
    await new Promise((resolve) => setTimeout(resolve, GRABBER_RESTART_AFTER_LIE_MS - (performance.now() - lied) + 20));
    await assert.rejects(desktop.capture(), (err: unknown) => err instanceof GuestProtocolError && !/started again/.test(err.message));
    assert.equal(channels.length, 2, 'started again once the pause is over');
    desktop.close();
  });

  it('refuses changed rectangles before any whole frame, and output nobody asked for', async () => {
    const first = await openCapture();
    const grab = first.capture.grab(1_000);
    first.channel.emit('data', Buffer.concat([header('SBXR', 1024, 768, STRIDE, 8), u32s(3, 0)]));
    await assert.rejects(grab, isProtocolError('bad_rects'));

    const second = await openCapture();
    second.channel.emit('data', header('SBXF', 1024, 768, STRIDE, STRIDE * 768));
    assert.equal(second.channel.closed, true);
    assert.equal(second.reported[0]?.reason, 'unrequested_output');
  });

  it(`closes the channel once stderr passes ${STDERR_MAX_BYTES} bytes, and keeps what came before`, async () => {
    const { capture, channel, reported } = await openCapture();
    const grab = capture.grab(5_000);
    channel.stderr.emit('data', Buffer.from('sbx-capture: a line of its own\n'));
    assert.equal(channel.closed, false);
    for (let i = 0; i < 10_000 && !channel.closed; i++) channel.stderr.emit('data', Buffer.alloc(1024, 0x41));
    assert.equal(channel.closed, true, 'closed after the first chunk past the cap');
    await assert.rejects(grab, isProtocolError('stderr_overrun'));
    assert.equal(reported.length, 1);
  });
});

describe('the bash tool marker scanner', () => {
  const nonce = 'ab'.repeat(16);
  const marker = (value: string) => Buffer.from(`<<sbx:${nonce}:${value}>>\n`);

  it('finds a marker split byte by byte and passes everything before it on', () => {
    const seen: Buffer[] = [];
    const scanner = new MarkerScanner(nonce, (bytes) => seen.push(Buffer.from(bytes)));
    const stream = Buffer.concat([Buffer.from('output\n<<sbx:not-it>>\n'), marker('42'), Buffer.from('after')]);
    let found: ReturnType<MarkerScanner['feed']>;
    for (const byte of stream) found ??= scanner.feed(Buffer.from([byte]));
    assert.equal(found?.value, 42);
    assert.equal(Buffer.concat(seen).toString(), 'output\n<<sbx:not-it>>\n');
  });

  it("finds a marker that does not start a line: a background job's bytes just before it", () => {
    // What a flooding background job and a throttled channel produced: the marker's line is
    // one write, but the job's bytes come right before it, with no newline between.
    const seen: Buffer[] = [];
    const scanner = new MarkerScanner(nonce, (bytes) => seen.push(Buffer.from(bytes)));
    const found = scanner.feed(Buffer.concat([Buffer.from('X00Xe1B'), marker('3'), Buffer.from('8ZrP')]));
    assert.deepEqual(
      { value: found?.value, rest: found?.rest.toString(), before: Buffer.concat(seen).toString() },
      { value: 3, rest: '8ZrP', before: 'X00Xe1B' },
    );
    // And bash prints it in one line, so that one write(2) carries all of it (bash line-buffers stdout).
    assert.match(printMarker(nonce, '$?'), /^builtin printf '<<sbx:%s:%d>>\\n' /);
  });

  it('returns the bytes after the marker in the same chunk', () => {
    const scanner = new MarkerScanner(nonce, () => undefined);
    scanner.feed(Buffer.from(`\n<<sbx:${nonce}:1`));
    const found = scanner.feed(Buffer.from('27>>\nrest'));
    assert.deepEqual({ value: found?.value, rest: found?.rest.toString() }, { value: 127, rest: 'rest' });
  });

  it('fails an unterminated marker followed by megabytes within a few bytes, holding nothing', () => {
    const scanner = new MarkerScanner(nonce, () => undefined);
    const flood = Buffer.alloc(64 * 1024, 0x37); // "7777...": digits, as a value would be
    assert.throws(() => scanner.feed(Buffer.concat([Buffer.from(`\n<<sbx:${nonce}:`), flood])), isProtocolError('marker_overrun'));
    const slow = new MarkerScanner(nonce, () => undefined);
    slow.feed(Buffer.from(`\n<<sbx:${nonce}:`));
    let fed = 0;
    assert.throws(() => {
      for (; fed < 100; fed++) slow.feed(Buffer.from('7'));
    }, isProtocolError('marker_overrun'));
    assert.ok(fed <= 14, `failed after ${fed} bytes`);
  });

  it('refuses a marker whose value is not a number', () => {
    const scanner = new MarkerScanner(nonce, () => undefined);
    assert.throws(() => scanner.feed(marker('x1')), isProtocolError('bad_marker'));
  });

  it('finds a marker that straddles two large chunks at any offset, without copying the chunks', () => {
    const m = marker('7');
    for (let cut = 0; cut < m.length; cut++) {
      const seen: Buffer[] = [];
      const scanner = new MarkerScanner(nonce, (bytes) => seen.push(Buffer.from(bytes)));
      const first = Buffer.concat([Buffer.alloc(40_000, 0x61), m.subarray(0, cut)]);
      // A long tail, so that the second chunk is searched in place, not joined whole.
      const second = Buffer.concat([m.subarray(cut), Buffer.alloc(1000, 0x62)]);
      let found = scanner.feed(Buffer.alloc(50_000, 0x0a));
      found ??= scanner.feed(first);
      found ??= scanner.feed(second);
      assert.equal(found?.value, 7, `cut at ${cut}`);
      assert.ok(found?.rest.equals(Buffer.alloc(1000, 0x62)), `cut at ${cut}: the bytes after the marker`);
      assert.equal(Buffer.concat(seen).length, 90_000, `cut at ${cut}: every byte before the marker passed on`);
    }
  });

  it('scans 16 MiB without a marker once, holding at most the marker length', () => {
    let passed = 0;
    const scanner = new MarkerScanner(nonce, (bytes) => (passed += bytes.length));
    const chunk = Buffer.alloc(32 * 1024, 0x0a); // newlines: each could start a marker
    for (let i = 0; i < 512; i++) assert.equal(scanner.feed(chunk), undefined);
    const held = 512 * chunk.length - passed;
    assert.ok(held < marker('0').length, `held ${held} bytes`);
  });
});

describe('frames to PNG, off the event loop', () => {
  /** The conversion as it was done on the event loop, kept here as the reference. */
  function referenceRgb(frame: RawFrame): Buffer {
    const rgb = Buffer.alloc(frame.width * frame.height * 3);
    for (let y = 0; y < frame.height; y++) {
      for (let x = 0; x < frame.width; x++) {
        const at = y * frame.stride + x * 4;
        rgb.set([frame.pixels[at + 2] as number, frame.pixels[at + 1] as number, frame.pixels[at] as number], (y * frame.width + x) * 3);
      }
    }
    return rgb;
  }
  const raw = (rgb: Buffer, width: number, height: number) => sharp(rgb, { raw: { width, height, channels: 3 } });

  for (const padding of [0, 12]) {
    it(`gives the same pixels as the reference, whole, scaled and cut (row padding ${padding})`, async () => {
      const width = 64;
      const height = 48;
      const frame = { width, height, stride: width * 4 + padding, pixels: randomBytes((width * 4 + padding) * height) };
      const reference = referenceRgb(frame);
      assert.ok(
        (
          await sharp(await framePng(frame))
            .raw()
            .toBuffer()
        ).equals(reference),
        'whole',
      );
      for (const size of [
        { width: 80, height: 60 },
        { width: 40, height: 30 },
      ]) {
        const expected = await raw(reference, width, height).resize(size.width, size.height, { fit: 'fill' }).raw().toBuffer();
        assert.ok(
          (
            await sharp(await framePng(frame, size))
              .raw()
              .toBuffer()
          ).equals(expected),
          `scaled to ${size.width}x${size.height}`,
        );
      }
      const region = { x0: 5, y0: 7, x1: 37, y1: 29 };
      const cut = await raw(reference, width, height).extract({ left: 5, top: 7, width: 32, height: 22 }).raw().toBuffer();
      assert.ok(
        (
          await sharp(await framePngRegion(frame, region))
            .raw()
            .toBuffer()
        ).equals(cut),
        'region',
      );
    });
  }
});

describe('the bash tool shell, on a stand-in channel', () => {
  /** A started BashShell whose guest side is the test: it answers the start-up marker. */
  async function startShell(
    options: Pick<BashShellOptions, 'outputLimits' | 'counters'> = {},
  ): Promise<{ shell: BashShell; channel: FakeChannel; reported: GuestProtocolError[] }> {
    const channel = new FakeChannel();
    const reported: GuestProtocolError[] = [];
    const connection = {
      spawn: async () => channel as unknown as ClientChannel,
      exec: async () => ({ stdout: Buffer.alloc(0), stderr: Buffer.alloc(0), exitCode: 0, signal: undefined }),
      reportProtocolError: (err: GuestProtocolError) => reported.push(err),
    } as unknown as GuestTransport;
    channel.close = () => {
      channel.closed = true;
      channel.emit('close');
    };
    const starting = BashShell.start(connection, { display: 99, maxOutputChars: 1000, startTimeoutMs: 2_000, ...options });
    await new Promise((resolve) => setImmediate(resolve));
    channel.emit('data', Buffer.from(`<<sbx:${lastNonce(channel)}:4242>>\n`));
    return { shell: await starting, channel, reported };
  }
  function lastNonce(channel: FakeChannel): string {
    const nonce = /([0-9a-f]{32})/.exec(channel.written.at(-1) ?? '')?.[1];
    assert.ok(nonce, 'a marker was asked for');
    return nonce;
  }

  it('ends a command whose marker never ends: the shell closed, the reason told, reported once', async () => {
    const { shell, channel, reported } = await startShell();
    assert.equal(shell.pid, 4242);
    const running = shell.run('echo hi', 5_000);
    channel.emit('data', Buffer.concat([Buffer.from(`hi\n<<sbx:${lastNonce(channel)}:`), Buffer.alloc(1024 * 1024, 0x37)]));
    const outcome = await running;
    assert.equal(outcome.kind, 'ended');
    assert.equal(outcome.kind === 'ended' && outcome.reason, 'guest_protocol_error');
    assert.match(outcome.kind === 'ended' ? (outcome.detail ?? '') : '', /end-of-command marker that never ends/);
    assert.equal(outcome.output.text, 'hi');
    assert.equal(channel.closed, true);
    assert.deepEqual(
      reported.map((err) => err.reason),
      ['marker_overrun'],
    );
  });

  /** Counters that remember what they were told. */
  function recordingCounters(): BashOutputCounters & { drops: Record<string, number>; throttles: Record<string, number> } {
    const drops: Record<string, number> = {};
    const throttles: Record<string, number> = {};
    return {
      drops,
      throttles,
      dropped: (bytes, phase) => void (drops[phase] = (drops[phase] ?? 0) + bytes),
      throttled: (seconds, reason) => void (throttles[reason] = (throttles[reason] ?? 0) + seconds),
    };
  }

  it("stops reading a background job's output past the unread cap until the next command, counting what was dropped", async () => {
    const counters = recordingCounters();
    const { shell, channel } = await startShell({ outputLimits: { bytesPerSecond: 2 ** 30, burstBytes: 2 ** 30, maxUnreadBytes: 8192 }, counters });
    channel.emit('data', Buffer.alloc(4096, 0x61));
    assert.equal(channel.isPaused, false, 'under the cap: read on');
    channel.emit('data', Buffer.alloc(4096, 0x61));
    assert.equal(channel.isPaused, true, 'at the cap: the channel is no longer read');
    // 1000 characters are kept (4004 bytes, room for a cut character); the rest is only counted.
    assert.equal(counters.drops.between_commands, 8192 - 4004);
    const running = shell.run('echo hi', 5_000);
    assert.equal(channel.isPaused, false, 'a command reads again');
    assert.ok((counters.throttles.unread_cap ?? -1) >= 0, 'the hold was timed');
    channel.emit('data', Buffer.from(`hi\n<<sbx:${lastNonce(channel)}:0>>\n`));
    const outcome = await running;
    assert.equal(outcome.kind, 'completed');
    assert.equal(outcome.output.text, 'a'.repeat(1000));
    assert.equal(outcome.output.clippedChars, 8192 + 3 - 1000);
    await shell.stop('session_ended');
  });

  it('keeps holding a background job that outlives its shell, until the shell is stopped', async () => {
    const counters = recordingCounters();
    const { shell, channel } = await startShell({ outputLimits: { bytesPerSecond: 2 ** 30, burstBytes: 2 ** 30, maxUnreadBytes: 8192 }, counters });
    channel.emit('exit', 0);
    await new Promise((resolve) => setTimeout(resolve, 300)); // the exit's grace: the shell has ended
    channel.emit('data', Buffer.alloc(16_384, 0x61));
    assert.equal(channel.isPaused, true, 'nobody will read it: held, not drained');
    await shell.stop('session_ended');
    assert.equal(channel.isPaused, false, 'stopping lifts the hold, so that the channel can end');
    assert.ok((counters.throttles.unread_cap ?? -1) >= 0);
  });

  it("pauses a command's flood once its output budget is spent, and reads on once it is paid back", async () => {
    const counters = recordingCounters();
    const limits = { bytesPerSecond: 1024 * 1024, burstBytes: 64 * 1024, maxUnreadBytes: 1024 * 1024 };
    const { shell, channel } = await startShell({ outputLimits: limits, counters });
    const running = shell.run('cat /dev/urandom | base64', 5_000);
    channel.emit('data', Buffer.alloc(60 * 1024, 0x61));
    assert.equal(channel.isPaused, false, 'within the burst');
    channel.emit('data', Buffer.alloc(64 * 1024, 0x61));
    assert.equal(channel.isPaused, true, 'past the burst: paused');
    // ~60 KiB of debt at 1 MiB/s: ~60 ms (waited for up to 2 s: a busy host's timers run late).
    for (let waited = 0; channel.isPaused && waited < 2_000; waited += 10) await new Promise((resolve) => setTimeout(resolve, 10));
    assert.equal(channel.isPaused, false, 'the debt paid back: read again');
    assert.ok((counters.throttles.rate ?? 0) >= 0.05, `paused ${counters.throttles.rate} s`);
    channel.emit('data', Buffer.from(`<<sbx:${lastNonce(channel)}:0>>\n`));
    const outcome = await running;
    assert.equal(outcome.kind, 'completed');
    assert.equal(outcome.output.clippedChars, 124 * 1024 - 1000);
    assert.equal(counters.drops.command, 124 * 1024 - 4004);
    await shell.stop('session_ended');
  });

  it('a byte budget lets a burst through, then the rate, and asks for the wait that pays a debt back', () => {
    let now = 0;
    const budget = new ByteBudget(1000, 5000, () => now);
    assert.equal(budget.charge(5000), 0);
    assert.equal(budget.charge(500), 500, '500 bytes of debt at 1000 B/s');
    now = 1500; // 1500 bytes earned: the debt paid, 1000 in hand
    assert.equal(budget.charge(1000), 0);
    now = 100_000; // refilled, never past the burst
    assert.equal(budget.charge(5001), 1);
  });

  it('closes a shell whose error stream passes 4 KiB', async () => {
    const { shell, channel, reported } = await startShell();
    const running = shell.run('true', 5_000);
    for (let i = 0; i < 100 && !channel.closed; i++) channel.stderr.emit('data', Buffer.alloc(1024, 0x45));
    const outcome = await running;
    assert.equal(outcome.kind === 'ended' && outcome.reason, 'guest_protocol_error');
    assert.equal(channel.closed, true);
    assert.deepEqual(
      reported.map((err) => err.reason),
      ['stderr_overrun'],
    );
  });
});

describe("the warm helpers' launcher (a line with its port)", () => {
  // A guest whose sshd ignores the host's close goes on sending on the channel: what the
  // launcher's channel brings after its line, or instead of it, is never kept.
  const launcher = () => {
    const channel = new FakeChannel();
    const connection = { spawn: async () => channel as unknown as ClientChannel } as unknown as GuestTransport;
    return { channel, started: startWarmHelpers(connection, 99) };
  };
  // 64 MiB in 64 KiB chunks; kept, it cost 20-75 s of a blocked event loop (each chunk's check
  // copied all kept before it) and 330 MB of heap. Drained, about 50 ms.
  const flood = (channel: FakeChannel) => {
    const chunk = Buffer.alloc(64 * 1024, 0x78);
    const began = performance.now();
    for (let i = 0; i < 1024; i++) channel.emit('data', chunk);
    const ms = performance.now() - began;
    assert.ok(ms < 5_000, `64 MiB on the channel held the event loop ${ms.toFixed(0)} ms`);
  };

  it('takes the port, then keeps nothing more the channel brings', async () => {
    const { channel, started } = launcher();
    await new Promise((resolve) => setImmediate(resolve));
    const heapBefore = process.memoryUsage().heapUsed;
    channel.emit('data', Buffer.from('40123\n'));
    assert.equal((await started).port, 40123);
    assert.ok(channel.closed);
    flood(channel);
    const grown = process.memoryUsage().heapUsed - heapBefore;
    assert.ok(grown < 16 * 1024 * 1024, `the heap grew ${grown} bytes while the closed channel flooded`);
  });

  it('more than a port is refused at once, and nothing after it is kept', async () => {
    const { channel, started } = launcher();
    await new Promise((resolve) => setImmediate(resolve));
    const heapBefore = process.memoryUsage().heapUsed;
    flood(channel);
    await assert.rejects(started, /said more than a port/);
    flood(channel);
    const grown = process.memoryUsage().heapUsed - heapBefore;
    assert.ok(grown < 16 * 1024 * 1024, `the heap grew ${grown} bytes while the channel flooded`);
  });
});
