import { spawn } from 'node:child_process';
import { UnavailableError } from '../errors.js';

/** What one extraction is told: a checked time and our own path, nothing a client wrote. */
export interface FrameRequest {
  /** The recording: <recordings dir>/<session id>.mp4, a path we made. */
  video: string;
  /** Where in the video, in ms: a finite number >= 0 (checked here again). */
  offsetMs: number;
  /** The program (default: ffmpeg on PATH). */
  program?: string;
}

/** A frame of a screen as JPEG is tens of KiB; more than this is not a frame (ffmpeg is killed). */
const MAX_FRAME_BYTES = 8 * 1024 * 1024;
/** One seek and one decode: well under a second; a stuck ffmpeg is killed at this. */
const EXTRACT_TIMEOUT_MS = 10_000;
/** Extractions at once (each a short burst of one core), and how many may wait for a turn. */
const MAX_RUNNING = 2;
const MAX_WAITING = 16;

/** The argv of one extraction: seek (before the input: fast, to the nearest frame), one frame, JPEG to stdout. */
export function frameArgs(video: string, offsetMs: number): string[] {
  if (!Number.isFinite(offsetMs) || offsetMs < 0) throw new Error(`a frame's time must be a number of ms >= 0, got ${offsetMs}`);
  return [
    '-hide_banner',
    '-loglevel',
    'error',
    '-nostdin',
    '-ss',
    (offsetMs / 1000).toFixed(3),
    '-i',
    video,
    '-frames:v',
    '1',
    '-an',
    '-threads',
    '1',
    '-f',
    'image2pipe',
    '-c:v',
    'mjpeg',
    '-q:v',
    '4',
    'pipe:1',
  ];
}

/**
 * Extracts frames of recordings for the trajectory page, one ffmpeg per frame, a few at once
 * (MAX_RUNNING, the rest wait; past MAX_WAITING a request is refused with 503), each killed
 * past its time or its output cap. Undefined when the video has no frame at that time.
 */
export class FrameExtractor {
  private running = 0;
  private readonly waiting: Array<() => void> = [];

  async extract(request: FrameRequest): Promise<Buffer | undefined> {
    const args = frameArgs(request.video, request.offsetMs);
    await this.turn();
    try {
      return await runFfmpeg(request.program ?? 'ffmpeg', args);
    } finally {
      this.running--;
      this.waiting.shift()?.();
    }
  }

  /** Takes a running slot now, or waits for one (counted when taken: no await between the check and the count). */
  private turn(): Promise<void> {
    if (this.running < MAX_RUNNING) {
      this.running++;
      return Promise.resolve();
    }
    if (this.waiting.length >= MAX_WAITING) {
      return Promise.reject(new UnavailableError('too many recording frames are being extracted now: try again in a moment'));
    }
    return new Promise((resolve) => this.waiting.push(() => (this.running++, resolve())));
  }
}

function runFfmpeg(program: string, args: string[]): Promise<Buffer | undefined> {
  return new Promise((resolve, reject) => {
    const child = spawn(program, args, { stdio: ['ignore', 'pipe', 'ignore'] });
    const chunks: Buffer[] = [];
    let bytes = 0;
    let failure: Error | undefined;
    const timer = setTimeout(() => {
      failure = new Error(`ffmpeg took more than ${EXTRACT_TIMEOUT_MS} ms for one frame`);
      child.kill('SIGKILL');
    }, EXTRACT_TIMEOUT_MS);
    child.stdout.on('data', (chunk: Buffer) => {
      bytes += chunk.length;
      if (bytes > MAX_FRAME_BYTES) {
        failure ??= new Error(`ffmpeg wrote more than ${MAX_FRAME_BYTES} bytes for one frame`);
        child.kill('SIGKILL');
        return;
      }
      chunks.push(chunk);
    });
    child.stdout.on('error', () => undefined); // the exit below says what happened
    // For its whole life, not once: a failed kill after a failed spawn would be a second error.
    child.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.once('close', (code) => {
      clearTimeout(timer);
      if (failure) return reject(failure);
      // No frame at that time (past the end, or a file without one yet): nothing, not an error.
      resolve(code === 0 && bytes > 0 ? Buffer.concat(chunks) : undefined);
    });
  });
}
