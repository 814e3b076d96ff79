import type Database from 'better-sqlite3';

/**
 * Which route a step came through: a tool of the agent loop, the plain actions route, another
 * vendor's computer-use call (/tools/openai-computer, /tools/gemini-computer), or a desktop
 * action (/desktop/*).
 */
export const STEP_TOOLS = ['computer', 'bash', 'str_replace_based_edit_tool', 'actions', 'openai-computer', 'gemini-computer', 'desktop'] as const;
export type StepTool = (typeof STEP_TOOLS)[number];

/** One stored step, as the trajectory routes show it. */
export interface StoredStep {
  n: number;
  tool: StepTool;
  /** The computer action's name (`left_click`, `type`...), or the tool's command; null when the input had none. */
  action: string | null;
  /** The input as the model sent it, typed text as its length unless the session opted in (step-input.ts). */
  input: Record<string, unknown>;
  /** The result text, when there was one. */
  output: string | null;
  /** The cursor position an action reported (model space). */
  cursor: { x: number; y: number } | null;
  error: { code: string; message: string } | null;
  /** Milliseconds since the session was created, when the step started: a video is linked by it. */
  startedMs: number;
  durationMs: number;
  settleMs: number | null;
  /** The step whose screenshot shows the screen before this one (the latest earlier one with an image). */
  beforeStep: number | null;
  /** The settled screenshot the step returned, stored as a file: its media type, or null if none. */
  afterImage: string | null;
}

/** What is kept of a session's trajectory as a whole. */
export interface TrajectoryRow {
  sessionId: string;
  tenant: string;
  /** The session's createdAt (ISO): step times count from it. */
  startedAt: string;
  keepTypedText: boolean;
  /** Bytes held: step rows and screenshot files. */
  bytes: number;
  steps: number;
  /** Steps not stored (the step cap), and screenshots not stored (the byte caps). */
  droppedSteps: number;
  droppedImages: number;
}

interface StepRow {
  n: number;
  tool: StepTool;
  action: string | null;
  input: string;
  output: string | null;
  cursor: string | null;
  error_code: string | null;
  error_message: string | null;
  started_ms: number;
  duration_ms: number;
  settle_ms: number | null;
  before_step: number | null;
  after_image: string | null;
}

interface Row {
  session_id: string;
  tenant: string;
  started_at: string;
  keep_typed_text: number;
  bytes: number;
  steps: number;
  dropped_steps: number;
  dropped_images: number;
}

export type NewStep = Omit<StoredStep, 'n' | 'beforeStep'>;

/**
 * Trajectories in the orchestrator's SQLite file, beside the sessions: a row per session and a
 * row per step. Rows outlive the session (they are pruned by age and size, not at destroy).
 */
export class TrajectoryStore {
  constructor(private readonly db: Database.Database) {
    db.exec(`
      CREATE TABLE IF NOT EXISTS trajectories (
        session_id TEXT PRIMARY KEY,
        tenant TEXT NOT NULL,
        started_at TEXT NOT NULL,
        keep_typed_text INTEGER NOT NULL DEFAULT 0,
        bytes INTEGER NOT NULL DEFAULT 0,
        steps INTEGER NOT NULL DEFAULT 0,
        dropped_steps INTEGER NOT NULL DEFAULT 0,
        dropped_images INTEGER NOT NULL DEFAULT 0
      );
      CREATE TABLE IF NOT EXISTS trajectory_steps (
        session_id TEXT NOT NULL,
        n INTEGER NOT NULL,
        tool TEXT NOT NULL,
        action TEXT,
        input TEXT NOT NULL,
        output TEXT,
        cursor TEXT,
        error_code TEXT,
        error_message TEXT,
        started_ms REAL NOT NULL,
        duration_ms REAL NOT NULL,
        settle_ms REAL,
        before_step INTEGER,
        after_image TEXT,
        PRIMARY KEY (session_id, n)
      );
    `);
  }

  /** Starts a session's trajectory (idempotent: a second call changes nothing). */
  begin(sessionId: string, tenant: string, startedAt: string, keepTypedText: boolean): void {
    this.db
      .prepare('INSERT OR IGNORE INTO trajectories (session_id, tenant, started_at, keep_typed_text) VALUES (?, ?, ?, ?)')
      .run(sessionId, tenant, startedAt, keepTypedText ? 1 : 0);
  }

  get(sessionId: string): TrajectoryRow | undefined {
    const row = this.db.prepare('SELECT * FROM trajectories WHERE session_id = ?').get(sessionId) as Row | undefined;
    return row && fromRow(row);
  }

  /**
   * Appends a step, numbered after the last one, in one transaction with the counters (so
   * concurrent calls can neither share a number nor together pass the caps); the step before
   * it with a screenshot is its "before". Null when a cap is reached: the step is counted only.
   */
  append(
    sessionId: string,
    step: NewStep,
    rowBytes: number,
    caps: { maxSteps: number; maxSessionBytes: number },
  ): { n: number; beforeStep: number | null } | null {
    return this.db.transaction(() => {
      const row = this.get(sessionId);
      if (!row) return null;
      if (row.steps >= caps.maxSteps || row.bytes + rowBytes > caps.maxSessionBytes) {
        this.db.prepare('UPDATE trajectories SET dropped_steps = dropped_steps + 1 WHERE session_id = ?').run(sessionId);
        return null;
      }
      const last = this.db.prepare('SELECT MAX(n) AS n FROM trajectory_steps WHERE session_id = ?').get(sessionId) as { n: number | null };
      const n = (last.n ?? 0) + 1;
      const before = this.db.prepare('SELECT MAX(n) AS n FROM trajectory_steps WHERE session_id = ? AND after_image IS NOT NULL').get(sessionId) as {
        n: number | null;
      };
      this.db
        .prepare(
          `INSERT INTO trajectory_steps (session_id, n, tool, action, input, output, cursor, error_code, error_message,
             started_ms, duration_ms, settle_ms, before_step, after_image)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL)`,
        )
        .run(
          sessionId,
          n,
          step.tool,
          step.action,
          JSON.stringify(step.input),
          step.output,
          step.cursor ? JSON.stringify(step.cursor) : null,
          step.error?.code ?? null,
          step.error?.message ?? null,
          step.startedMs,
          step.durationMs,
          step.settleMs,
          before.n,
        );
      this.db.prepare('UPDATE trajectories SET steps = steps + 1, bytes = bytes + ? WHERE session_id = ?').run(rowBytes, sessionId);
      return { n, beforeStep: before.n };
    })();
  }

  /**
   * Counts `bytes` of a screenshot against the caps before it is written, in one transaction:
   * false (and counted as dropped) when the session's or the total budget has no room for it.
   */
  reserveImage(sessionId: string, bytes: number, caps: { maxSessionBytes: number; maxTotalBytes: number }): boolean {
    return this.db.transaction(() => {
      const row = this.get(sessionId);
      if (!row) return false;
      if (row.bytes + bytes > caps.maxSessionBytes || this.totalBytes() + bytes > caps.maxTotalBytes) {
        this.db.prepare('UPDATE trajectories SET dropped_images = dropped_images + 1 WHERE session_id = ?').run(sessionId);
        return false;
      }
      this.db.prepare('UPDATE trajectories SET bytes = bytes + ? WHERE session_id = ?').run(bytes, sessionId);
      return true;
    })();
  }

  /** A reserved screenshot that could not be written: its bytes are given back. */
  releaseImage(sessionId: string, bytes: number): void {
    this.db.prepare('UPDATE trajectories SET bytes = MAX(0, bytes - ?), dropped_images = dropped_images + 1 WHERE session_id = ?').run(bytes, sessionId);
  }

  /** A step's screenshot is written: its media type says so (and which file it is). */
  setAfterImage(sessionId: string, n: number, mediaType: string): void {
    this.db.prepare('UPDATE trajectory_steps SET after_image = ? WHERE session_id = ? AND n = ?').run(mediaType, sessionId, n);
  }

  /** Steps in order, from `fromStep` on, at most `limit` of them (so a long one is read in pages). */
  steps(sessionId: string, fromStep = 1, limit = 1000): StoredStep[] {
    const rows = this.db
      .prepare('SELECT * FROM trajectory_steps WHERE session_id = ? AND n >= ? ORDER BY n LIMIT ?')
      .all(sessionId, fromStep, limit) as StepRow[];
    return rows.map(stepFromRow);
  }

  step(sessionId: string, n: number): StoredStep | undefined {
    const row = this.db.prepare('SELECT * FROM trajectory_steps WHERE session_id = ? AND n = ?').get(sessionId, n) as StepRow | undefined;
    return row && stepFromRow(row);
  }

  /** Sums over a session's stored steps: how many failed, time spent in calls, the end of the last. */
  totals(sessionId: string): { errors: number; busyMs: number; lastEndMs: number } {
    const row = this.db
      .prepare(
        `SELECT COALESCE(SUM(error_code IS NOT NULL), 0) AS errors, COALESCE(SUM(duration_ms), 0) AS busy,
           COALESCE(MAX(started_ms + duration_ms), 0) AS last FROM trajectory_steps WHERE session_id = ?`,
      )
      .get(sessionId) as { errors: number; busy: number; last: number };
    return { errors: row.errors, busyMs: Math.round(row.busy * 10) / 10, lastEndMs: Math.round(row.last) };
  }

  totalBytes(): number {
    return (this.db.prepare('SELECT COALESCE(SUM(bytes), 0) AS total FROM trajectories').get() as { total: number }).total;
  }

  /** Sessions' trajectories, oldest first: what pruning deletes first. */
  oldestFirst(): TrajectoryRow[] {
    return (this.db.prepare('SELECT * FROM trajectories ORDER BY started_at, rowid').all() as Row[]).map(fromRow);
  }

  delete(sessionId: string): void {
    this.db.transaction(() => {
      this.db.prepare('DELETE FROM trajectory_steps WHERE session_id = ?').run(sessionId);
      this.db.prepare('DELETE FROM trajectories WHERE session_id = ?').run(sessionId);
    })();
  }
}

function fromRow(row: Row): TrajectoryRow {
  return {
    sessionId: row.session_id,
    tenant: row.tenant,
    startedAt: row.started_at,
    keepTypedText: row.keep_typed_text === 1,
    bytes: row.bytes,
    steps: row.steps,
    droppedSteps: row.dropped_steps,
    droppedImages: row.dropped_images,
  };
}

function stepFromRow(row: StepRow): StoredStep {
  return {
    n: row.n,
    tool: row.tool,
    action: row.action,
    input: JSON.parse(row.input) as Record<string, unknown>,
    output: row.output,
    cursor: row.cursor ? (JSON.parse(row.cursor) as { x: number; y: number }) : null,
    error: row.error_code !== null ? { code: row.error_code, message: row.error_message ?? '' } : null,
    startedMs: row.started_ms,
    durationMs: row.duration_ms,
    settleMs: row.settle_ms,
    beforeStep: row.before_step,
    afterImage: row.after_image,
  };
}
