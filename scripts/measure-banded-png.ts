/**
 * CPU per full-size PNG of a changing 1024x768 text screen: the whole-frame encoder
 * (src/computer/bgrx-png.ts) against a session's banded encoder (src/computer/png/banded-png.ts),
 * with all rows changing (the text scrolls by a line), ~15% of them (a block of 115 rows
 * changes) and one button's worth (24 rows). No sandbox needed: the screen is text rendered by
 * libvips (antialiased, like a browser's; an xterm's bitmap font compresses ~5x better).
 *
 * Each new frame is a new buffer, as the capture channel's are. CPU is process.cpuUsage()
 * around each encode (event loop and libuv pool alike), event-loop time is from
 * /proc/self/task/<pid>/stat (the main thread), GC time from the gc performance entries.
 *
 *   node --import tsx scripts/measure-banded-png.ts [N] [bandRows,...] [inFlight,...] [pieceKiB,...]
 */
import { readFileSync } from 'node:fs';
import { PerformanceObserver, performance } from 'node:perf_hooks';
import { setImmediate as nextTurn } from 'node:timers/promises';
import sharp from 'sharp';
import { bgrxToPng } from '../src/computer/bgrx-png.js';
import type { RawFrame } from '../src/computer/capture-channel.js';
import { BandedPngEncoder } from '../src/computer/png/banded-png.js';

const N = Number(process.argv[2] || 100);
const BAND_ROWS = (process.argv[3] || '32').split(',').map(Number);
const IN_FLIGHT = (process.argv[4] || '2').split(',').map(Number);
const PIECE_KIB = (process.argv[5] || '512').split(',').map(Number);
const WIDTH = 1024;
const HEIGHT = 768;
const LINE = 15;

/** Text lines rendered onto white, as BGRX rows: `height` rows. */
async function textScreen(height: number): Promise<Buffer> {
  const lines = Array.from(
    { length: Math.ceil(height / LINE) + 2 },
    (_, i) => `${String(i + 1).padStart(6)}  the quick brown fox ${(i * 13) % 997} jumps over the lazy dog ${'#'.repeat(i % 30)}`,
  );
  const text = await sharp({ text: { text: lines.join('\n'), font: 'DejaVu Sans Mono 9', width: WIDTH, rgba: true, dpi: 96 } })
    .png()
    .toBuffer();
  const meta = await sharp(text).metadata();
  const cut = await sharp(text)
    .extract({ left: 0, top: 0, width: Math.min(WIDTH, meta.width!), height: Math.min(height, meta.height!) })
    .png()
    .toBuffer();
  const { data } = await sharp({ create: { width: WIDTH, height, channels: 4, background: '#ffffff' } })
    .composite([{ input: cut, top: 0, left: 0 }])
    .raw()
    .toBuffer({ resolveWithObject: true });
  for (let i = 0; i < data.length; i += 4) {
    const red = data[i]!;
    data[i] = data[i + 2]!;
    data[i + 2] = red;
    data[i + 3] = 0;
  }
  return data;
}

const tall = await textScreen(HEIGHT + (N + 2) * LINE);
const rowBytes = WIDTH * 4;
const rows = (y0: number, y1: number) => tall.subarray(y0 * rowBytes, y1 * rowBytes);

/** Frame k of each case: a new buffer every time. */
const cases: Record<string, (k: number) => Buffer> = {
  'all rows (scrolling)': (k) => Buffer.from(rows(k * LINE, k * LINE + HEIGHT)),
  '115 rows (15%)': (k) => {
    const frame = Buffer.from(rows(0, HEIGHT));
    rows(400 + (k + 1) * LINE, 515 + (k + 1) * LINE).copy(frame, 400 * rowBytes);
    return frame;
  },
  '24 rows (a button)': (k) => {
    const frame = Buffer.from(rows(0, HEIGHT));
    if (k % 2) for (let i = 200 * rowBytes; i < 224 * rowBytes; i++) frame[i] = 255 - frame[i]!;
    return frame;
  },
};

let gcMs = 0;
new PerformanceObserver((list) => list.getEntries().forEach((e) => (gcMs += e.duration))).observe({ entryTypes: ['gc'] });

interface Figures {
  /** The longest the event loop went without a turn while encoding (median and max over frames, separate runs). */
  turnP50Ms: number;
  turnMaxMs: number;
  cpuMs: number;
  loopMs: number;
  gcMs: number;
  kib: number;
  deflatedShare: number;
}

/** CPU of this process's main thread (the event loop), from /proc: 10 ms ticks, fine over N frames. */
function mainThreadCpuMs(): number {
  const stat = readFileSync(`/proc/self/task/${process.pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10; // utime, stime (fields 14, 15)
}

async function measure(frameOf: (k: number) => Buffer, encode: (frame: RawFrame) => Promise<Buffer>, deflated: () => number): Promise<Figures> {
  for (let k = 0; k < 5; k++) await encode({ width: WIDTH, height: HEIGHT, stride: rowBytes, pixels: frameOf(k) }); // warm-up
  let cpu = 0;
  let bytes = 0;
  let share = 0;
  const gc0 = gcMs;
  let loop = 0;
  for (let k = 5; k < N + 5; k++) {
    const frame = { width: WIDTH, height: HEIGHT, stride: rowBytes, pixels: frameOf(k) };
    const c = process.cpuUsage();
    const l = mainThreadCpuMs();
    bytes += (await encode(frame)).length;
    loop += mainThreadCpuMs() - l;
    const used = process.cpuUsage(c);
    cpu += (used.user + used.system) / 1000;
    share += deflated();
  }
  // Then, apart (its own turns cost CPU), the longest stretch without an event-loop turn per frame.
  const longest: number[] = [];
  for (let k = N + 5; k < N + 5 + Math.min(N, 50); k++) {
    const frame = { width: WIDTH, height: HEIGHT, stride: rowBytes, pixels: frameOf(k) };
    let done = false;
    let last = performance.now();
    let max = 0;
    const ticker = (async () => {
      while (!done) {
        await nextTurn();
        const now = performance.now();
        max = Math.max(max, now - last);
        last = now;
      }
    })();
    last = performance.now();
    await encode(frame);
    done = true;
    await ticker;
    longest.push(max);
  }
  longest.sort((a, b) => a - b);
  const turnP50Ms = longest[Math.floor(longest.length / 2)]!;
  return { turnP50Ms, turnMaxMs: longest.at(-1)!, cpuMs: cpu / N, loopMs: loop / N, gcMs: (gcMs - gc0) / N, kib: bytes / N / 1024, deflatedShare: share / N };
}

console.log(`${N} frames per row, ${WIDTH}x${HEIGHT}; CPU = event loop + libuv pool\n`);
console.log('| rows changed | encoder | CPU ms / PNG | event loop ms | GC ms | KiB | bands deflated | longest turn ms p50 (max) |');
console.log('| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |');
for (const [name, frameOf] of Object.entries(cases)) {
  const print = (encoder: string, f: Figures) =>
    console.log(
      `| ${name} | ${encoder} | ${f.cpuMs.toFixed(2)} | ${f.loopMs.toFixed(2)} | ${f.gcMs.toFixed(2)} | ${f.kib.toFixed(0)} | ${(f.deflatedShare * 100).toFixed(0)}% | ${f.turnP50Ms.toFixed(2)} (${f.turnMaxMs.toFixed(2)}) |`,
    );
  print('whole frame (before)', await measure(frameOf, bgrxToPng, () => 1));
  for (const bandRows of BAND_ROWS) {
    for (const deflatesInFlight of IN_FLIGHT) {
      for (const pieceKiB of PIECE_KIB) {
        const encoder = new BandedPngEncoder({ bandRows, deflatesInFlight, pieceBytes: pieceKiB * 1024 });
        const stats = () => (encoder.lastStats ? encoder.lastStats.deflated / encoder.lastStats.bands : 0);
        print(`bands of ${bandRows}, pieces <= ${pieceKiB} KiB, ${deflatesInFlight} at once`, await measure(frameOf, (f) => encoder.encode(f), stats));
      }
    }
  }
}
