import { rmSync } from 'node:fs';
import { mkdir, readdir, writeFile } from 'node:fs/promises';
import type { Logger } from 'pino';
import type { ComputerAction } from '../computer/actions.js';
import { NotFoundError } from '../errors.js';
import type { Metrics } from '../metrics/metrics.js';
import type { Point, Size } from '../computer/scaling.js';
import type { CleanupStack } from '../util/cleanup-stack.js';
import { FrameExtractor } from './frame-extract.js';
import { prune, readMeta, recordingFiles, type RecordingMeta } from './retention.js';
import { SessionRecorder, type RecordingStatus, type StopReason } from './session-recorder.js';
import type { RecordingSettings } from './settings.js';
import { cueText, SubtitleTrack } from './subtitles.js';

export type { RecordingStatus } from './session-recorder.js';

/** A session id as we make them: anything else has no recording (and never reaches a file name). */
const SESSION_ID = /^[a-z0-9]{1,64}$/;
/** How often finished recordings are pruned besides after each recording ends. */
const PRUNE_INTERVAL_MS = 10 * 60_000;

export interface RecordingServiceOptions {
  settings: RecordingSettings;
  /** The recordings directory (settings.dir, else <stateDir>/session-recordings). */
  dir: string;
  metrics: Metrics;
  log: Logger;
  /** The ffmpeg to run (default: ffmpeg on PATH). */
  ffmpeg?: string;
}

/** What a recording needs of a session (the session layer hands it over). */
export interface RecordableSession {
  id: string;
  tenant: string;
  /** The real screen: the video's fixed frame size. */
  screen: Size;
  /** Model coordinates to the screen's (subtitles give positions in the video's pixels). */
  toScreen(p: Point): Point;
  /**
   * Copies the screen, through the session's capture channel, into `target` unless it is still
   * version `have`; at most `maxAgeMs` old unless a capture is under way. The version now in
   * `target`, or undefined when the session has no grabber.
   */
  copyFrame(maxAgeMs: number, target: Buffer, have: number | undefined): Promise<number | undefined>;
  /** Released when the session ends, before its connection closes. */
  cleanup: CleanupStack;
}

interface Active {
  recorder: SessionRecorder;
  subtitles: SubtitleTrack;
  tenant: string;
  toScreen: (p: Point) => Point;
  /** Settles once the end is recorded: subtitles flushed, metadata written. */
  done: Promise<void>;
}

/**
 * The recordings of this orchestrator: one recorder per recording session, the files in the
 * recordings directory on the host (video, WebVTT subtitles of the agent's actions, and a small
 * JSON of whose it is and how it went), and their retention. The guest never sees any of it.
 */
export class RecordingService {
  private readonly active = new Map<string, Active>();
  /** The last status of recordings that ended in this run, and whose (the files say it for earlier runs). */
  private readonly ended = new Map<string, { tenant: string; status: RecordingStatus }>();
  private readonly pruner: NodeJS.Timeout;
  private readonly frames = new FrameExtractor();

  constructor(private readonly opts: RecordingServiceOptions) {
    this.pruner = setInterval(() => void this.prune(), PRUNE_INTERVAL_MS);
    this.pruner.unref();
  }

  get settings(): RecordingSettings {
    return this.opts.settings;
  }

  /**
   * Starts recording a ready session (a recording in progress is left as it is). A session
   * recorded earlier and stopped gets a new recording in place of the old one. Stopped when the
   * session ends, before its connection closes (its cleanup stack).
   */
  async start(session: RecordableSession): Promise<RecordingStatus> {
    const { settings, metrics, log } = this.opts;
    await mkdir(this.opts.dir, { recursive: true, mode: 0o700 });
    // Checked after the await: of two starts at once, the second finds the first's recorder.
    const running = this.active.get(session.id);
    if (running) return running.recorder.status;
    const files = recordingFiles(this.opts.dir, session.id);
    // The old video unlinked, not truncated by ffmpeg's -y: a download under way keeps the
    // file it opened, whole (synchronous: nothing may start between the check and the recorder).
    rmSync(files.video, { force: true });
    const { screen, tenant } = session;
    let ended = (): void => undefined;
    const done = new Promise<void>((resolve) => (ended = resolve));
    const recorder = new SessionRecorder({
      screen,
      fps: settings.fps,
      maxBytes: settings.maxBytes,
      maxSeconds: settings.maxSeconds,
      videoPath: files.video,
      copyFrame: (maxAgeMs, target, have) => session.copyFrame(maxAgeMs, target, have),
      onBytes: (delta) => metrics.recordingBytes.inc(delta),
      onEnd: (status) => void this.recordEnd(session.id, tenant, status).finally(ended),
      ffmpeg: this.opts.ffmpeg,
    });
    const entry: Active = { recorder, subtitles: new SubtitleTrack(files.subtitles), tenant, toScreen: (p) => session.toScreen(p), done };
    this.active.set(session.id, entry);
    this.ended.delete(session.id);
    metrics.recordingsActive.inc();
    await this.writeMeta({ sessionId: session.id, tenant, status: recorder.status });
    await session.cleanup.push('recording', () => this.stop(session.id, 'session_ended').then(() => undefined));
    log.info({ sessionId: session.id, pid: recorder.encoderPid }, 'recording started');
    return recorder.status;
  }

  /** The session paused (sessions/pause.ts): its recording stops capturing, the video's time stands still. */
  pause(sessionId: string): void {
    this.active.get(sessionId)?.recorder.pause();
  }

  /** The session resumed: its recording captures again, from where the video stopped. */
  resume(sessionId: string): void {
    this.active.get(sessionId)?.recorder.resume();
  }

  /**
   * Stops a session's recording in progress; the file is complete once this returns. With
   * `tenant` (a client's request), another tenant's recording is as one that does not exist.
   */
  async stop(sessionId: string, reason: StopReason = 'requested', tenant?: string): Promise<RecordingStatus> {
    const entry = this.active.get(sessionId);
    if (!entry || (tenant !== undefined && entry.tenant !== tenant)) return this.status(sessionId, tenant);
    const status = await entry.recorder.stop(reason);
    await entry.done;
    return status;
  }

  /**
   * A session's recording: in progress, or as it ended (404 if it has none). With `tenant`, a
   * recording whose own record names another tenant is one it has none of: the recording's
   * tenant is checked by what the recording stores, never by whether its session's row is
   * still there (rows are pruned after a day, recordings kept for days).
   */
  async status(sessionId: string, tenant?: string): Promise<RecordingStatus> {
    const found = await this.find(sessionId);
    if (!found || (tenant !== undefined && found.tenant !== tenant)) throw new NotFoundError(`session ${sessionId} has no recording`);
    return found.status;
  }

  /** The tenant a session's recording belongs to, by its own record; undefined without one. */
  async ownerOf(sessionId: string): Promise<string | undefined> {
    return (await this.find(sessionId))?.tenant;
  }

  /** What this run knows of a session's recording, synchronously (for the session view). */
  statusNow(sessionId: string): RecordingStatus | undefined {
    return this.active.get(sessionId)?.recorder.status ?? this.ended.get(sessionId)?.status;
  }

  /** The files of a session's recording, once it exists (404 before; with `tenant`, as status). */
  async files(sessionId: string, tenant?: string): Promise<{ video: string; subtitles: string; status: RecordingStatus }> {
    const status = await this.status(sessionId, tenant);
    return { ...recordingFiles(this.opts.dir, sessionId), status };
  }

  /** The video offset of a moment of a recorded session: ms since its recording started, or undefined. */
  async videoOffsetMs(sessionId: string, at: Date): Promise<number | undefined> {
    const status = (await this.find(sessionId))?.status;
    return status ? at.getTime() - Date.parse(status.startedAt) : undefined;
  }

  /**
   * The frame of a session's recording `offsetMs` into it, as JPEG (the trajectory page shows
   * it for a step that stored no screenshot of its own), if the recording is the tenant's and
   * covers that moment; undefined otherwise. A time past the end is the last frame's.
   */
  async frameAt(sessionId: string, tenant: string, offsetMs: number): Promise<{ data: Buffer; finished: boolean } | undefined> {
    const found = await this.find(sessionId);
    if (!found || found.tenant !== tenant || !Number.isFinite(offsetMs) || offsetMs < 0) return undefined;
    const { status } = found;
    const endMs = (status.endedAt ? Date.parse(status.endedAt) : Date.now()) - Date.parse(status.startedAt);
    // Two frames before the end at most: a seek to the very end finds no frame to decode; a
    // recording in progress is written a fragment (a second) at a time.
    const lastMs = Math.max(0, endMs - (status.state === 'recording' ? 1500 : 2000 / status.fps));
    if (!(offsetMs <= endMs + 1000)) return undefined;
    const data = await this.frames.extract({
      video: recordingFiles(this.opts.dir, sessionId).video,
      offsetMs: Math.min(offsetMs, lastMs),
      tenant,
      program: this.opts.ffmpeg,
    });
    return data && { data, finished: status.state !== 'recording' };
  }

  /** A recording in progress, one that ended in this run, or one an earlier run left (its metadata file). */
  private async find(sessionId: string): Promise<{ tenant: string; status: RecordingStatus } | undefined> {
    const active = this.active.get(sessionId);
    if (active) return { tenant: active.tenant, status: active.recorder.status };
    const ended = this.ended.get(sessionId);
    if (ended) return ended;
    if (!SESSION_ID.test(sessionId)) return undefined;
    const meta = await readMeta(this.opts.dir, sessionId);
    return meta && typeof meta.tenant === 'string' ? { tenant: meta.tenant, status: meta.status } : undefined;
  }

  /** An action the agent performed: a subtitle cue when the session is being recorded. */
  noteAction(sessionId: string, action: ComputerAction, startedAt: Date, durationMs: number): void {
    const entry = this.active.get(sessionId);
    if (!entry?.recorder.isRecording) return;
    const text = cueText(action, entry.toScreen);
    if (text) entry.subtitles.add(entry.recorder.offsetMs(startedAt), durationMs, text);
  }

  /** Stops every recording (shutdown) and the pruner. */
  async close(): Promise<void> {
    clearInterval(this.pruner);
    await Promise.allSettled([...this.active.keys()].map((id) => this.stop(id, 'session_ended')));
  }

  /**
   * At start-up: recordings an earlier run left "recording" (it crashed or was killed) are
   * marked failed; their files, fragmented MP4, play up to where they stopped.
   */
  async recover(): Promise<void> {
    const names = await readdir(this.opts.dir).catch(() => [] as string[]);
    for (const name of names) {
      if (!name.endsWith('.json')) continue;
      const meta = await readMeta(this.opts.dir, name.slice(0, -5));
      if (!meta || meta.status.state !== 'recording' || this.active.has(meta.sessionId)) continue;
      meta.status = { ...meta.status, state: 'failed', stopReason: 'failed', error: 'the orchestrator stopped while recording' };
      await this.writeMeta(meta);
    }
    await this.prune();
  }

  /** Applies the retention limits now; returns the session ids whose recordings were deleted. */
  async prune(): Promise<string[]> {
    const { keepSeconds, totalMaxBytes } = this.opts.settings;
    const { dir } = this.opts;
    try {
      const deleted = await prune(dir, { keepSeconds, totalMaxBytes }, new Set(this.active.keys()));
      for (const id of deleted) this.ended.delete(id);
      if (deleted.length > 0) this.opts.log.info({ deleted: deleted.length }, 'old recordings deleted');
      return deleted;
    } catch (err) {
      this.opts.log.warn({ err }, 'pruning recordings failed');
      return [];
    }
  }

  private async recordEnd(sessionId: string, tenant: string, status: RecordingStatus): Promise<void> {
    const entry = this.active.get(sessionId);
    this.active.delete(sessionId);
    this.ended.set(sessionId, { tenant, status });
    this.opts.metrics.recordingsActive.dec();
    if (status.state === 'failed') this.opts.metrics.errors.inc({ kind: 'recording' });
    const log = this.opts.log.child({ sessionId });
    if (status.state === 'failed') log.warn({ error: status.error }, 'recording failed; the session goes on');
    else log.info({ reason: status.stopReason, bytes: status.bytes, frames: status.frames }, 'recording finished');
    await entry?.subtitles.flush();
    await this.writeMeta({ sessionId, tenant, status });
    await this.prune();
  }

  private async writeMeta(meta: RecordingMeta): Promise<void> {
    await writeFile(recordingFiles(this.opts.dir, meta.sessionId).meta, JSON.stringify(meta), { mode: 0o600 }).catch((err: Error) =>
      this.opts.log.warn({ err, sessionId: meta.sessionId }, "could not write a recording's metadata"),
    );
  }
}
