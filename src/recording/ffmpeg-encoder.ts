import { spawn, type ChildProcessByStdio } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';

/** What ffmpeg is told: all of it ours (never a client's text), checked numbers and our own path. */
export interface EncoderOptions {
  width: number;
  height: number;
  fps: number;
  /** ffmpeg stops writing at this size (-fs), a last guard behind the recorder's own check. */
  maxBytes: number;
  /** The output file: <recordings dir>/<session id>.mp4, a path we made. */
  output: string;
  /** The program (tests and the bench may point at another build; default: ffmpeg on PATH). */
  program?: string;
}

/** How many bytes of ffmpeg's stderr are kept to explain a failure (the rest is dropped). */
const STDERR_TAIL_BYTES = 2048;
/** How long a finishing ffmpeg may take to flush the file before it is killed. */
const FINISH_TIMEOUT_MS = 10_000;

/** The argv of one recording: raw BGRX frames on stdin, H.264 in fragmented MP4 out. */
export function ffmpegArgs(o: EncoderOptions): string[] {
  const whole = (n: number, what: string) => {
    if (!Number.isInteger(n) || n <= 0) throw new Error(`ffmpeg ${what} must be a positive integer, got ${n}`);
    return String(n);
  };
  return [
    '-hide_banner',
    '-loglevel',
    'error',
    '-nostdin',
    // The input's shape is the session's screen, fixed here: never read from what the guest sends.
    '-f',
    'rawvideo',
    '-pix_fmt',
    'bgr0',
    '-video_size',
    `${whole(o.width, 'width')}x${whole(o.height, 'height')}`,
    '-framerate',
    whole(o.fps, 'fps'),
    '-i',
    'pipe:0',
    // yuv420p needs even sides (every browser plays it); an odd last row or column is cropped.
    '-vf',
    'crop=trunc(iw/2)*2:trunc(ih/2)*2',
    // The conversion to yuv420p: with these flags swscale computes each pixel's chroma and
    // averages it down (area): 0.7 ms a 1024x768 frame here instead of 2.2 with its default
    // (bicubic), about 0.75 % of a core less at 5 fps, at the same quality (PSNR 41.7 dB against
    // 41.6 on a recorded terminal; `neighbor` is cheaper still but 1.8 dB worse).
    '-sws_flags',
    'area+full_chroma_inp',
    // ultrafast + one thread: the cheapest H.264 there is; a screen that does not change costs
    // almost nothing (skipped blocks). A keyframe every 10 s bounds what a crash can lose.
    '-c:v',
    'libx264',
    '-preset',
    'ultrafast',
    '-tune',
    'zerolatency',
    '-crf',
    '30',
    '-pix_fmt',
    'yuv420p',
    '-g',
    String(o.fps * 10),
    '-threads',
    '1',
    '-fs',
    whole(o.maxBytes, 'maxBytes'),
    // Fragmented MP4: playable while it is written and after a crash, and by every browser.
    // A fragment at least every second, written at once (not held in ffmpeg's 32 KiB output
    // buffer): this bounds what a crash loses and how far past -fs / the size cap a file goes,
    // and lets a download during the recording see it up to the last second.
    '-movflags',
    '+frag_keyframe+empty_moov+default_base_moof',
    '-frag_duration',
    '1000000',
    '-flush_packets',
    '1',
    '-f',
    'mp4',
    '-y',
    o.output,
  ];
}

/**
 * One ffmpeg process encoding a recording: frames are written to its standard input as they
 * are (one frame of the session's fixed size each), and `finish` closes its input so that it
 * writes the end of the file and exits. It never outlives `finish` (killed after a timeout),
 * and `exited` settles whenever it exits, asked or not (a crash is the recorder's to report).
 */
export class FfmpegEncoder {
  private readonly child: ChildProcessByStdio<Writable, null, Readable>;
  private stderrTail = Buffer.alloc(0);
  private exitInfo: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  readonly frameBytes: number;

  constructor(private readonly options: EncoderOptions) {
    this.frameBytes = options.width * options.height * 4;
    this.child = spawn(options.program ?? 'ffmpeg', ffmpegArgs(options), { stdio: ['pipe', 'ignore', 'pipe'] });
    this.exited = new Promise((resolve) => {
      // 'error' (no such program) comes instead of 'exit'; 'close' comes after either.
      this.child.once('error', (err) => {
        this.stderrTail = Buffer.from(err.message);
        this.exitInfo ??= { code: null, signal: null };
        resolve(this.exitInfo);
      });
      this.child.once('exit', (code, signal) => {
        this.exitInfo ??= { code, signal };
        resolve(this.exitInfo);
      });
    });
    this.child.stderr.on('data', (chunk: Buffer) => {
      this.stderrTail = Buffer.concat([this.stderrTail, chunk]);
      if (this.stderrTail.length > STDERR_TAIL_BYTES) this.stderrTail = this.stderrTail.subarray(-STDERR_TAIL_BYTES);
    });
    // A write after ffmpeg died fails with EPIPE: its exit is what gets reported, not this.
    this.child.stdin.on('error', () => undefined);
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  get running(): boolean {
    return this.exitInfo === undefined;
  }

  /** Whether a frame written now would be queued behind others (ffmpeg is behind). */
  get busy(): boolean {
    return this.child.stdin.writableNeedDrain;
  }

  /**
   * Writes one frame (exactly frameBytes); the same buffer may be written again. `taken` is
   * called once ffmpeg's pipe has it all (or the write failed, or was never made): until then
   * the buffer must not change.
   */
  write(frame: Buffer, taken: () => void = () => undefined): void {
    if (frame.length !== this.frameBytes) throw new Error(`a recorded frame must be ${this.frameBytes} bytes, got ${frame.length}`);
    if (this.running && this.child.stdin.writable) this.child.stdin.write(frame, () => taken());
    else taken();
  }

  /** What ffmpeg said last (its stderr, at most 2 KiB), to explain a failure. */
  get lastWords(): string {
    return this.stderrTail.toString('utf8').trim();
  }

  /** Ends the input so ffmpeg finishes the file; kills it if it has not exited in time. */
  async finish(): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
    if (this.running) this.child.stdin.end();
    const timer = setTimeout(() => this.kill(), FINISH_TIMEOUT_MS);
    try {
      return await this.exited;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Kills it at once (a failure path); `exited` still settles. */
  kill(): void {
    if (this.running) this.child.kill('SIGKILL');
  }

  get output(): string {
    return this.options.output;
  }
}
