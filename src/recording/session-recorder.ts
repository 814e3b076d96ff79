import { stat } from 'node:fs/promises';
import type { Size } from '../computer/scaling.js';
import { FfmpegEncoder } from './ffmpeg-encoder.js';

/** Why a recording is no longer running. */
export type StopReason = 'requested' | 'session_ended' | 'size_cap' | 'duration_cap' | 'failed';

/** A recording as the API shows it (in the session view and beside the file). */
export interface RecordingStatus {
  state: 'recording' | 'finished' | 'failed';
  startedAt: string;
  endedAt?: string;
  stopReason?: StopReason;
  /** Bytes of the video on disk (as last measured while recording). */
  bytes: number;
  fps: number;
  /** Frames written to the encoder (the same frame again when the screen did not change). */
  frames: number;
  error?: string;
}

export interface RecorderOptions {
  screen: Size;
  fps: number;
  maxBytes: number;
  maxSeconds: number;
  videoPath: string;
  /**
   * Copies the session's screen (through its capture channel, at most `maxAgeMs` old unless a
   * capture is under way) into `target`, tightly packed rows of the recording's size, unless it
   * is still version `have`; the version now in `target`, or undefined when there is no grabber.
   */
  copyFrame: (maxAgeMs: number, target: Buffer, have: number | undefined) => Promise<number | undefined>;
  /** Bytes the file grew by (the bytes-written metric). */
  onBytes: (delta: number) => void;
  /** Called once when the recording ends, however it ends. */
  onEnd: (status: RecordingStatus) => void;
  ffmpeg?: string;
}

/** How often the file's size is looked at against the cap. */
const SIZE_CHECK_MS = 1000;
/** At most this many frames owed are written when a recording ends (a minute at 5 fps). */
const MAX_FINAL_FRAMES = 300;
/** At most this many frames are written in one tick to catch up after a stall (a settle holds the grabber up to 2 s). */
const MAX_CATCH_UP_FRAMES = 20;
/** How long a recorder of a session without a grabber waits before asking again. */
const NO_GRABBER_RETRY_MS = 5000;

/**
 * Records one session's screen: a timer at `fps` has the session's own capture channel copy
 * the screen into one of the recorder's two frame buffers (one request at a time; it reuses
 * what a screenshot just fetched, and never queues behind a capture: see
 * Desktop.copyFrameInto), and writes the latest frame to ffmpeg at a constant rate, the same
 * buffer again when nothing changed. Two buffers, reused for the whole recording: a new frame
 * is copied into the one ffmpeg is not reading, so a busy screen costs no allocation per frame.
 * Frames are counted from the start so that the video's time is wall time: a stall is made up
 * with repeats, and the video offset of a moment is simply the ms since `startedAt` (offsetMs).
 */
export class SessionRecorder {
  readonly status: RecordingStatus;
  private readonly encoder: FfmpegEncoder;
  private readonly started = performance.now();
  private readonly ticker: NodeJS.Timeout;
  private readonly sizer: NodeJS.Timeout;
  /** The frame written at each tick; the other buffer, the next frame's place. */
  private latest: Buffer;
  private spare: Buffer;
  /** Writes to ffmpeg not yet taken by it, per buffer: a buffer with some is never overwritten. */
  private readonly unwritten = new Map<Buffer, number>();
  /** The screen version in `latest`. */
  private latestVersion: number | undefined;
  private grabbing = false;
  /** No grab before this (ms since the start): set when the session has no grabber. */
  private quietUntil = 0;
  private ending: Promise<RecordingStatus> | undefined;
  /** While its session is paused: no frames, and the video's clock stands still (performance.now() when it paused). */
  private pausedAt: number | undefined;
  /** The time spent paused, ms: not in the video. */
  private pausedTotalMs = 0;

  constructor(private readonly opts: RecorderOptions) {
    const { width, height } = opts.screen;
    this.status = { state: 'recording', startedAt: new Date().toISOString(), bytes: 0, fps: opts.fps, frames: 0 };
    // Black until the first frame arrives.
    this.latest = Buffer.alloc(width * height * 4);
    this.spare = Buffer.alloc(width * height * 4);
    this.encoder = new FfmpegEncoder({ width, height, fps: opts.fps, maxBytes: opts.maxBytes, output: opts.videoPath, program: opts.ffmpeg });
    void this.encoder.exited.then(({ code, signal }) => {
      if (this.ending) return;
      // ffmpeg ends by itself with success only at its own size guard (-fs).
      if (code === 0) return void this.stop('size_cap');
      this.fail(`ffmpeg exited unexpectedly (${signal ?? `code ${code}`})${this.encoder.lastWords ? `: ${this.encoder.lastWords.slice(-300)}` : ''}`);
    });
    this.ticker = setInterval(() => this.tick(), Math.round(1000 / opts.fps));
    this.sizer = setInterval(() => void this.checkSize(), SIZE_CHECK_MS);
    this.tick();
  }

  /** The ffmpeg process (tests kill it to see a crash reported). */
  get encoderPid(): number | undefined {
    return this.encoder.pid;
  }

  /** Where a moment falls in the video: ms since the recording started (may be negative: before it). */
  offsetMs(at: Date): number {
    return at.getTime() - Date.parse(this.status.startedAt) - this.pausedTotalMs;
  }

  /** The session paused: the capture stops and the video's clock with it, until resume(). */
  pause(): void {
    this.pausedAt ??= performance.now();
  }

  resume(): void {
    if (this.pausedAt === undefined) return;
    this.pausedTotalMs += performance.now() - this.pausedAt;
    this.pausedAt = undefined;
  }

  get isRecording(): boolean {
    return this.status.state === 'recording' && !this.ending;
  }

  /** Stops and finalises the file (ffmpeg gets EOF and writes its end). Idempotent. */
  stop(reason: StopReason): Promise<RecordingStatus> {
    this.ending ??= this.end(reason);
    return this.ending;
  }

  private async end(reason: StopReason, error?: string): Promise<RecordingStatus> {
    clearInterval(this.ticker);
    clearInterval(this.sizer);
    if (error) this.encoder.kill();
    else if (reason !== 'size_cap') this.writeFramesDue();
    const { code, signal } = await this.encoder.finish();
    await this.checkSize();
    this.status.endedAt = new Date().toISOString();
    this.status.stopReason = reason;
    if (error) {
      this.status.state = 'failed';
      this.status.error = error;
    } else if (code !== 0 && reason !== 'size_cap') {
      this.status.state = 'failed';
      this.status.error = `ffmpeg did not finish the file (${signal ?? `code ${code}`})${this.encoder.lastWords ? `: ${this.encoder.lastWords.slice(-300)}` : ''}`;
    } else {
      this.status.state = 'finished';
    }
    this.opts.onEnd(this.status);
    return this.status;
  }

  private fail(error: string): void {
    this.ending ??= this.end('failed', error);
  }

  /** The video's clock: ms recorded so far (paused time left out). */
  private elapsedMs(): number {
    return (this.pausedAt ?? performance.now()) - this.started - this.pausedTotalMs;
  }

  /**
   * The frames the video's clock still owes when it ends (ffmpeg fell behind on a busy host
   * and the ticks' catch-up had not caught up): written now, so that the video is as long as
   * the time it recorded (at most MAX_FINAL_FRAMES: the same buffer queued, nothing copied).
   */
  private writeFramesDue(): void {
    const recordedMs = Math.min(this.elapsedMs(), this.opts.maxSeconds * 1000);
    const due = Math.min(Math.floor((recordedMs * this.opts.fps) / 1000), this.status.frames + MAX_FINAL_FRAMES);
    for (; this.status.frames < due; this.status.frames += 1) this.write(this.latest);
  }

  private tick(): void {
    if (this.ending || this.pausedAt !== undefined) return;
    const elapsedMs = this.elapsedMs();
    if (elapsedMs >= this.opts.maxSeconds * 1000) {
      void this.stop('duration_cap');
      return;
    }
    if (!this.grabbing && elapsedMs >= this.quietUntil) {
      this.grabbing = true;
      void this.grab().finally(() => (this.grabbing = false));
    }
    const due = Math.floor((elapsedMs * this.opts.fps) / 1000) + 1;
    let behind = Math.min(due - this.status.frames, MAX_CATCH_UP_FRAMES);
    // ffmpeg behind: nothing is queued on its pipe beyond one write; the count catches up later.
    while (behind > 0 && !this.encoder.busy) {
      this.write(this.latest);
      this.status.frames += 1;
      behind -= 1;
    }
  }

  /**
   * Has the screen copied into the spare buffer and makes it the latest, if it changed. While
   * ffmpeg has not taken every write of the spare buffer yet, this tick's frame is skipped (the
   * last one is repeated): a buffer is never written while ffmpeg may still read it.
   */
  private async grab(): Promise<void> {
    if (this.unwritten.has(this.spare)) return;
    const target = this.spare;
    try {
      // What a screenshot fetched within half a tick is as good as a new frame.
      // The spare buffer holds an older frame: copied into unless the screen is still the latest's.
      const version = await this.opts.copyFrame(500 / this.opts.fps, target, this.latestVersion);
      // No grabber: a grab would be a scrot run in the guest; not 5 a second.
      if (version === undefined) return void (this.quietUntil = performance.now() - this.started + NO_GRABBER_RETRY_MS);
      if (version === this.latestVersion) return;
      this.spare = this.latest;
      this.latest = target;
      this.latestVersion = version;
    } catch {
      // A failed grab repeats the last frame; the session reports its own errors. (A screen
      // resized since the recording started no longer fits `target`: the last frame stays too.)
    }
  }

  private write(frame: Buffer): void {
    this.unwritten.set(frame, (this.unwritten.get(frame) ?? 0) + 1);
    this.encoder.write(frame, () => {
      const left = (this.unwritten.get(frame) ?? 1) - 1;
      if (left > 0) this.unwritten.set(frame, left);
      else this.unwritten.delete(frame);
    });
  }

  private async checkSize(): Promise<void> {
    const size = await stat(this.opts.videoPath).then(
      (s) => s.size,
      () => this.status.bytes,
    );
    if (size > this.status.bytes) this.opts.onBytes(size - this.status.bytes);
    this.status.bytes = size;
    if (!this.ending && size >= this.opts.maxBytes) void this.stop('size_cap');
  }
}
