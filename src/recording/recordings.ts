import { mkdir, readdir, writeFile } from 'node:fs/promises';
import type { Logger } from 'pino';
import type { ComputerAction } from '../computer/actions.js';
import { NotFoundError } from '../errors.js';
import type { Metrics } from '../metrics/metrics.js';
import type { Point, Size } from '../computer/scaling.js';
import type { CleanupStack } from '../util/cleanup-stack.js';
import { prune, readMeta, recordingFiles, type RecordingMeta } from './retention.js';
import { SessionRecorder, type RecordingStatus, type StopReason } from './session-recorder.js';
import type { RecordingSettings } from './settings.js';
import { cueText, SubtitleTrack } from './subtitles.js';

export type { RecordingStatus } from './session-recorder.js';

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
  /** The last status of recordings that ended in this run (the files say it for earlier runs). */
  private readonly ended = new Map<string, RecordingStatus>();
  private readonly pruner: NodeJS.Timeout;

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

  /** Stops a session's recording in progress; the file is complete once this returns. */
  async stop(sessionId: string, reason: StopReason = 'requested'): Promise<RecordingStatus> {
    const entry = this.active.get(sessionId);
    if (!entry) return this.status(sessionId);
    const status = await entry.recorder.stop(reason);
    await entry.done;
    return status;
  }

  /** A session's recording: in progress, or as it ended (404 if it has none). */
  async status(sessionId: string): Promise<RecordingStatus> {
    const status = this.statusNow(sessionId) ?? (await readMeta(this.opts.dir, sessionId))?.status;
    if (!status) throw new NotFoundError(`session ${sessionId} has no recording`);
    return status;
  }

  /** What this run knows of a session's recording, synchronously (for the session view). */
  statusNow(sessionId: string): RecordingStatus | undefined {
    return this.active.get(sessionId)?.recorder.status ?? this.ended.get(sessionId);
  }

  /** The files of a session's recording, once it exists (404 before). */
  async files(sessionId: string): Promise<{ video: string; subtitles: string; status: RecordingStatus }> {
    const status = await this.status(sessionId);
    return { ...recordingFiles(this.opts.dir, sessionId), status };
  }

  /** The video offset of a moment of a recorded session: ms since its recording started, or undefined. */
  async videoOffsetMs(sessionId: string, at: Date): Promise<number | undefined> {
    const status = this.statusNow(sessionId) ?? (await readMeta(this.opts.dir, sessionId))?.status;
    return status ? at.getTime() - Date.parse(status.startedAt) : undefined;
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
    this.ended.set(sessionId, status);
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
      this.opts.log.warn({ err, sessionId: meta.sessionId }, 'could not write a recording\'s metadata'),
    );
  }
}
