import type { TrajectoryRecorder } from '../../sessions/trajectory/recorder.js';
import type { StoredStep, TrajectoryRow, TrajectoryStore } from '../../sessions/trajectory/trajectory-store.js';

/** A step as the API shows it: the stored step, its screenshots by URL. */
export interface StepJson extends Omit<StoredStep, 'afterImage' | 'beforeStep'> {
  screenshots: { before: string | null; after: string | null };
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
}

/** Where a session's recording started, if it has one (the recording's own clock is wall time). */
export interface VideoStart {
  startedAt: string;
}

export function screenshotUrl(sessionId: string, n: number, when: 'before' | 'after'): string {
  return `/v1/sessions/${sessionId}/trajectory/steps/${n}/screenshot?when=${when}`;
}

export function stepJson(sessionId: string, step: StoredStep): StepJson {
  const { afterImage, beforeStep, ...rest } = step;
  return {
    ...rest,
    screenshots: {
      before: beforeStep !== null ? screenshotUrl(sessionId, step.n, 'before') : null,
      after: afterImage !== null ? screenshotUrl(sessionId, step.n, 'after') : null,
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
  };
}

/** Every stored step, in order, read in pages so a long trajectory is never held whole. */
export async function* allSteps(recorder: Pick<TrajectoryRecorder, 'steps'>, sessionId: string): AsyncGenerator<StoredStep> {
  const PAGE = 200;
  for (let from = 1; ; ) {
    const page = recorder.steps(sessionId, from, PAGE);
    for (const step of page) yield step;
    if (page.length < PAGE) return;
    from = (page[page.length - 1] as StoredStep).n + 1;
    await new Promise<void>((resolve) => setImmediate(resolve)); // other requests run between pages
  }
}
