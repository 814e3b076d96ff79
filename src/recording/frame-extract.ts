import { spawn } from 'node:child_process';
import { UnavailableError } from '../errors.js';

/** What one extraction is told: a checked time and our own path, nothing a client wrote. */
export interface FrameRequest {
  /** The recording: <recordings dir>/<session id>.mp4, a path we made. */
  video: string;
  /** Where in the video, in ms: a finite number >= 0 (checked here again). */
  offsetMs: number;
  /** Whose turn it takes: the authenticated tenant the recording is checked to be of (turns are fair between tenants). */
  tenant: string;
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
/** Waiting places one tenant may hold: one flooding the trajectory page leaves the rest to the others. */
const MAX_WAITING_PER_TENANT = 4;

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
 * (MAX_RUNNING, the rest wait; past MAX_WAITING, or past a tenant's MAX_WAITING_PER_TENANT, a
 * request is refused with 503), each killed past its time or its output cap. A free slot goes
 * to the waiting tenant running the fewest, the longest unserved of those (a round): a tenant
 * with a long queue does not delay another's request by more than one extraction.
 * Undefined when the video has no frame at that time.
 */
export class FrameExtractor {
  private running = 0;
  private queued = 0;
  /** Extractions running, by tenant. */
  private readonly runningBy = new Map<string, number>();
  /** Each tenant's waiting requests, oldest first; the map's order is the round's (a tenant served goes to its back). */
  private readonly waiting = new Map<string, Array<() => void>>();

  async extract(request: FrameRequest): Promise<Buffer | undefined> {
    const args = frameArgs(request.video, request.offsetMs);
    await this.turn(request.tenant);
    try {
      return await runFfmpeg(request.program ?? 'ffmpeg', args);
    } finally {
      this.release(request.tenant);
    }
  }

  /** Takes a running slot now, or waits for one (counted when taken: no await between the check and the count). */
  private turn(tenant: string): Promise<void> {
    if (this.running < MAX_RUNNING) {
      this.take(tenant);
      return Promise.resolve();
    }
    const queue = this.waiting.get(tenant) ?? [];
    if (queue.length >= MAX_WAITING_PER_TENANT) {
      return Promise.reject(
        new UnavailableError(`this tenant has ${queue.length} recording frames waiting to be extracted, its limit: try again once they are shown`),
      );
    }
    if (this.queued >= MAX_WAITING) {
      return Promise.reject(new UnavailableError('too many recording frames are being extracted now: try again in a moment'));
    }
    this.queued++;
    this.waiting.set(tenant, queue); // a tenant not waiting yet joins at the back of the round
    return new Promise((resolve) => queue.push(() => (this.take(tenant), resolve())));
  }

  private take(tenant: string): void {
    this.running++;
    this.runningBy.set(tenant, (this.runningBy.get(tenant) ?? 0) + 1);
  }

  /** Frees a slot and hands it on at once (the next one counted in the same step: nobody can take it in between). */
  private release(tenant: string): void {
    this.running--;
    const left = (this.runningBy.get(tenant) ?? 1) - 1;
    if (left > 0) this.runningBy.set(tenant, left);
    else this.runningBy.delete(tenant);
    let next: string | undefined;
    for (const t of this.waiting.keys()) if (next === undefined || (this.runningBy.get(t) ?? 0) < (this.runningBy.get(next) ?? 0)) next = t;
    if (next === undefined) return;
    const queue = this.waiting.get(next) as Array<() => void>;
    const wake = queue.shift() as () => void;
    this.waiting.delete(next);
    if (queue.length > 0) this.waiting.set(next, queue); // to the back of the round
    this.queued--;
    wake();
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
