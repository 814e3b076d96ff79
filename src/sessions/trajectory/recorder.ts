import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from 'pino';
import type { EncodedImage } from '../../computer/screenshot-format.js';
import type { Metrics } from '../../metrics/metrics.js';
import type { TrajectorySettings } from './settings.js';
import { actionName, isTypingTool, storedInput, storedOutput } from './step-input.js';
import type { StepTool, StoredStep, TrajectoryRow, TrajectoryStore } from './trajectory-store.js';

/** A finished call, as a route saw it. */
export interface StepReport {
  sessionId: string;
  tool: StepTool;
  /** The input as the model sent it (step-input.ts decides what is stored of it). */
  input: unknown;
  /** Date.now() when the call started. */
  startedAt: number;
  durationMs: number;
  settleMs?: number;
  output?: string;
  /** The output is text of the desktop's (the clipboard read): stored as its length unless the session keeps typed text. */
  outputIsTyped?: boolean;
  cursor?: { x: number; y: number };
  error?: { code: string; message: string };
  /** The screenshot the call already produced (the settled screen it returns): stored by reference. */
  image?: EncodedImage;
}

export interface RecorderOptions {
  store: TrajectoryStore;
  /** Where screenshots are kept: <dir>/<sessionId>/<n>.<ext> (outside the session's own dir, which goes at destroy). */
  dir: string;
  settings: TrajectorySettings;
  /**
   * A live session's owner and creation time, for a step of a session whose trajectory was not
   * begun (adopted after a restart); undefined for one that ended (its calls are not recorded then).
   */
  describe(sessionId: string): { tenant: string; createdAt: string } | undefined;
  /** Is the session still live? A live one's trajectory is never pruned to make room. */
  isLive(sessionId: string): boolean;
  log: Logger;
  metrics?: Metrics;
}

const EXTENSIONS: Record<string, string> = { 'image/png': 'png', 'image/jpeg': 'jpg', 'image/webp': 'webp' };
const PRUNE_INTERVAL_MS = 60_000;

/**
 * Stores every call of a session as a step of its trajectory, and keeps the whole within its
 * caps: steps and bytes per session (a hostile model fills its own budget, then its steps are
 * counted, not stored), total bytes (the oldest ended trajectories go first), and age.
 * Recording never fails a call: a failure to store is logged and the call's answer stands.
 */
export class TrajectoryRecorder {
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly opts: RecorderOptions) {}

  /** A session was created: its trajectory starts, with its choice about typed text. */
  begin(session: { id: string; tenant: string; createdAt: string }, keepTypedText: boolean): void {
    this.opts.store.begin(session.id, session.tenant, session.createdAt, keepTypedText);
  }

  get(sessionId: string): TrajectoryRow | undefined {
    return this.opts.store.get(sessionId);
  }

  /** The store, for reading (the trajectory routes). */
  get reader(): TrajectoryStore {
    return this.opts.store;
  }

  steps(sessionId: string, from: number, limit: number): StoredStep[] {
    return this.opts.store.steps(sessionId, from, limit);
  }

  async record(report: StepReport): Promise<void> {
    try {
      await this.store(report);
    } catch (err) {
      this.opts.log.warn({ err, sessionId: report.sessionId }, 'could not store a trajectory step');
    }
  }

  private async store(report: StepReport): Promise<void> {
    const { store, settings } = this.opts;
    let row = store.get(report.sessionId);
    if (!row) {
      const session = this.opts.describe(report.sessionId);
      if (!session) return;
      store.begin(report.sessionId, session.tenant, session.createdAt, false);
      row = store.get(report.sessionId);
      if (!row) return;
    }
    const masked = report.outputIsTyped === true && !row.keepTypedText && report.output !== undefined;
    const step = {
      tool: report.tool,
      action: actionName(report.input, report.tool),
      input: storedInput(report.input, row.keepTypedText ? 'keep' : 'length', isTypingTool(report.tool)),
      output: masked ? `(${report.output?.length ?? 0} characters, not stored)` : storedOutput(report.output),
      cursor: report.cursor ?? null,
      error: report.error ? { code: report.error.code, message: storedOutput(report.error.message) ?? '' } : null,
      startedMs: Math.max(0, report.startedAt - Date.parse(row.startedAt)),
      durationMs: Math.round(report.durationMs * 10) / 10,
      settleMs: report.settleMs ?? null,
      afterImage: null,
    };
    // What the row costs on disk, roughly: its text. Counted against the same budgets as images.
    const rowBytes = 256 + Buffer.byteLength(JSON.stringify(step));
    const added = store.append(report.sessionId, step, rowBytes, settings);
    this.opts.metrics?.trajectorySteps.inc({ outcome: added ? 'stored' : 'dropped' });
    this.measure();
    // A zoom's image is a magnified region, not the screen: it is neither this step's "after"
    // nor the next one's "before" (the page draws coordinates on the whole screen).
    const image = step.action === 'zoom' ? undefined : report.image;
    if (!added || !image) return;
    const size = image.data.length;
    await this.makeRoom(size, report.sessionId);
    if (!store.reserveImage(report.sessionId, size, settings)) {
      this.opts.metrics?.trajectorySteps.inc({ outcome: 'screenshot_dropped' });
      return;
    }
    this.measure();
    try {
      await mkdir(path.join(this.opts.dir, report.sessionId), { recursive: true, mode: 0o700 });
      await writeFile(this.imageFile(report.sessionId, added.n, image.mediaType), image.data, { mode: 0o600 });
    } catch (err) {
      store.releaseImage(report.sessionId, size);
      throw err;
    }
    store.setAfterImage(report.sessionId, added.n, image.mediaType);
  }

  /** The screenshot stored for step `n` (the screen after it), if there is one. */
  async image(sessionId: string, n: number): Promise<{ data: Buffer; mediaType: string } | undefined> {
    const step = this.opts.store.step(sessionId, n);
    if (!step?.afterImage) return undefined;
    const data = await readFile(this.imageFile(sessionId, n, step.afterImage)).catch(() => undefined);
    return data && { data, mediaType: step.afterImage };
  }

  private imageFile(sessionId: string, n: number, mediaType: string): string {
    return path.join(this.opts.dir, sessionId, `${n}.${EXTENSIONS[mediaType] ?? 'bin'}`);
  }

  /**
   * Frees room for `bytes` more under the total cap by deleting the oldest ended trajectories
   * (never a live one: reserveImage then refuses the screenshot instead).
   */
  private async makeRoom(bytes: number, forSession: string): Promise<void> {
    const { store, settings } = this.opts;
    if (store.totalBytes() + bytes <= settings.maxTotalBytes) return; // the usual case: no table scan
    for (const row of store.oldestFirst()) {
      if (store.totalBytes() + bytes <= settings.maxTotalBytes) return;
      if (row.sessionId === forSession || this.opts.isLive(row.sessionId)) continue;
      await this.delete(row.sessionId);
    }
  }

  /** Deletes trajectories past their retention, then the oldest ended ones while over the total cap. */
  async prune(now = Date.now()): Promise<number> {
    const { store, settings } = this.opts;
    let deleted = 0;
    for (const row of store.oldestFirst()) {
      const expired = Date.parse(row.startedAt) + settings.retentionSeconds * 1000 < now;
      const overTotal = store.totalBytes() > settings.maxTotalBytes;
      if (this.opts.isLive(row.sessionId) || !(expired || overTotal)) continue;
      await this.delete(row.sessionId);
      deleted++;
    }
    return deleted;
  }

  /** The bytes gauge, read from the store (one SUM over a row per trajectory). */
  private measure(): void {
    this.opts.metrics?.trajectoryBytes.set(this.opts.store.totalBytes());
  }

  private async delete(sessionId: string): Promise<void> {
    // Files first: a crash between the two leaves a row without files (shown as no screenshot), never files nobody counts.
    await rm(path.join(this.opts.dir, sessionId), { recursive: true, force: true });
    this.opts.store.delete(sessionId);
    this.measure();
  }

  start(): void {
    this.timer = setInterval(() => void this.prune().catch((err: unknown) => this.opts.log.warn({ err }, 'trajectory pruning failed')), PRUNE_INTERVAL_MS);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }
}
