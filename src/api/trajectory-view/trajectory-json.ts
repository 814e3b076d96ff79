import type { TrajectoryRecorder } from '../../sessions/trajectory/recorder.js';
import type { StoredStep, TrajectoryRow, TrajectoryStore } from '../../sessions/trajectory/trajectory-store.js';

/** A step as the API shows it: the stored step, its screenshots by URL. */
export interface StepJson extends Omit<StoredStep, 'afterImage' | 'beforeStep'> {
  /**
   * before / after: the screenshots calls returned (stored); frame: the session's recording at
   * the end of the step, for a step without a screenshot of its own taken while recording.
   */
  screenshots: { before: string | null; after: string | null; frame: string | null };
}

export interface TrajectorySummary {
  sessionId: string;
  /** The session's state now (`ready`, `destroyed`...); `ended` once its record is pruned. */
  state: string;
  endReason: string | null;
  startedAt: string;
  keepTypedText: boolean;
  totals: {
    steps: number;
    errors: number;
    /** Time spent inside calls, and from the session's start to the end of its last call. */
    busyMs: number;
    lastEndMs: number;
    droppedSteps: number;
    droppedImages: number;
    bytes: number;
  };
  /** The session's recording, when it has one: a step is at `startedMs - videoStartMs` in it. */
  videoUrl: string | null;
  /** When the recording started, in ms since the session was created (null without one). */
  videoStartMs: number | null;
  /** When it ended, the same way (null without one, or while it is recording). */
  videoEndMs: number | null;
}

/** Where a session's recording started and ended, if it has one (the recording's own clock is wall time). */
export interface VideoStart {
  startedAt: string;
  endedAt?: string;
}

/** The whole seconds a recording in progress may lag behind (it is written a fragment, about a second, at a time). */
const RECORDING_LAG_MS = 1000;

export function screenshotUrl(sessionId: string, n: number, when: 'before' | 'after'): string {
  return `/v1/sessions/${sessionId}/trajectory/steps/${n}/screenshot?when=${when}`;
}

export function frameUrl(sessionId: string, n: number): string {
  return `/v1/sessions/${sessionId}/trajectory/steps/${n}/frame`;
}

/** The step's end as a time in its session's video (ms), when the video covers it. */
export function videoTimeOf(
  step: Pick<StoredStep, 'startedMs' | 'durationMs'>,
  video: Pick<TrajectorySummary, 'videoStartMs' | 'videoEndMs'>,
): number | undefined {
  if (video.videoStartMs === null) return undefined;
  const end = step.startedMs + step.durationMs;
  if (end < video.videoStartMs) return undefined;
  if (video.videoEndMs !== null && end > video.videoEndMs + RECORDING_LAG_MS) return undefined;
  return end - video.videoStartMs;
}

export function stepJson(sessionId: string, step: StoredStep, video?: Pick<TrajectorySummary, 'videoStartMs' | 'videoEndMs'>): StepJson {
  const { afterImage, beforeStep, ...rest } = step;
  const recorded = afterImage === null && video !== undefined && videoTimeOf(step, video) !== undefined;
  return {
    ...rest,
    screenshots: {
      before: beforeStep !== null ? screenshotUrl(sessionId, step.n, 'before') : null,
      after: afterImage !== null ? screenshotUrl(sessionId, step.n, 'after') : null,
      frame: recorded ? frameUrl(sessionId, step.n) : null,
    },
  };
}

export function trajectorySummary(
  row: TrajectoryRow,
  store: TrajectoryStore,
  session: { state: string; endReason: string | null } | undefined,
  video?: VideoStart,
): TrajectorySummary {
  const totals = store.totals(row.sessionId);
  return {
    sessionId: row.sessionId,
    state: session?.state ?? 'ended',
    endReason: session?.endReason ?? null,
    startedAt: row.startedAt,
    keepTypedText: row.keepTypedText,
    totals: { steps: row.steps, ...totals, droppedSteps: row.droppedSteps, droppedImages: row.droppedImages, bytes: row.bytes },
    videoUrl: video ? `/v1/sessions/${row.sessionId}/recording` : null,
    videoStartMs: video ? Date.parse(video.startedAt) - Date.parse(row.startedAt) : null,
    videoEndMs: video?.endedAt ? Date.parse(video.endedAt) - Date.parse(row.startedAt) : null,
  };
}

/** Every stored step, in order, read in pages so a long trajectory is never held whole. */
export async function* allSteps(recorder: Pick<TrajectoryRecorder, 'steps'>, sessionId: string): AsyncGenerator<StoredStep> {
  const PAGE = 200;
  for (let from = 1; ;) {
    const page = recorder.steps(sessionId, from, PAGE);
    for (const step of page) yield step;
    if (page.length < PAGE) return;
    from = (page[page.length - 1] as StoredStep).n + 1;
    await new Promise<void>((resolve) => setImmediate(resolve)); // other requests run between pages
  }
}
