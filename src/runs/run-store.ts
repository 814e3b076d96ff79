import type Database from 'better-sqlite3';

/** A run as kept: its row, and the transcript (the messages sent and received). */
export interface StoredRun {
  id: string;
  tenant: string;
  sessionId: string;
  /** The session's trajectory (its id is the session's): the steps of the run's tool calls. */
  trajectoryId: string;
  task: string;
  model: string;
  toolVersion: string;
  state: string;
  stopReason: string | null;
  steps: number;
  usage: string;
  transcript: string;
  createdAt: string;
  endedAt: string | null;
}

/**
 * Runs in the orchestrator's SQLite file, beside the sessions and their trajectories: a run's
 * transcript outlives its session like the trajectory it points to. The transcript is stored
 * with the screenshots' data replaced by their size (the trajectory keeps the images).
 */
export class RunStore {
  constructor(private readonly db: Database.Database) {
    db.exec(`CREATE TABLE IF NOT EXISTS runs (
      id TEXT PRIMARY KEY, tenant TEXT NOT NULL, session_id TEXT NOT NULL, trajectory_id TEXT NOT NULL,
      task TEXT NOT NULL, model TEXT NOT NULL, tool_version TEXT NOT NULL, state TEXT NOT NULL,
      stop_reason TEXT, steps INTEGER NOT NULL, usage TEXT NOT NULL, transcript TEXT NOT NULL,
      created_at TEXT NOT NULL, ended_at TEXT)`);
  }

  save(run: StoredRun): void {
    this.db
      .prepare(
        `INSERT INTO runs (id, tenant, session_id, trajectory_id, task, model, tool_version, state, stop_reason, steps, usage, transcript, created_at, ended_at)
         VALUES (@id, @tenant, @sessionId, @trajectoryId, @task, @model, @toolVersion, @state, @stopReason, @steps, @usage, @transcript, @createdAt, @endedAt)
         ON CONFLICT(id) DO UPDATE SET state = @state, stop_reason = @stopReason, steps = @steps, usage = @usage,
           transcript = @transcript, ended_at = @endedAt`,
      )
      .run(run);
  }

  get(id: string): StoredRun | undefined {
    const row = this.db
      .prepare(
        `SELECT id, tenant, session_id AS sessionId, trajectory_id AS trajectoryId, task, model, tool_version AS toolVersion, state,
           stop_reason AS stopReason, steps, usage, transcript, created_at AS createdAt, ended_at AS endedAt FROM runs WHERE id = ?`,
      )
      .get(id) as StoredRun | undefined;
    return row;
  }

  /**
   * What runs created since `since` (ISO) used, per tenant: their tokens, and their seconds
   * from creation to end (a run the orchestrator did not see end counts no seconds).
   */
  usageSince(since: string): Array<{ tenant: string; tokens: number; seconds: number }> {
    const rows = this.db.prepare('SELECT tenant, usage, created_at AS createdAt, ended_at AS endedAt FROM runs WHERE created_at >= ?').all(since) as Array<{
      tenant: string;
      usage: string;
      createdAt: string;
      endedAt: string | null;
    }>;
    return rows.map((row) => {
      let tokens = 0;
      try {
        tokens = Object.values(JSON.parse(row.usage) as Record<string, unknown>).reduce<number>((sum, n) => sum + (typeof n === 'number' ? n : 0), 0);
      } catch {
        // a row written by a broken version: its tokens are unknown
      }
      const seconds = row.endedAt ? Math.max(0, Math.ceil((Date.parse(row.endedAt) - Date.parse(row.createdAt)) / 1000)) : 0;
      return { tenant: row.tenant, tokens, seconds };
    });
  }
}

/** A transcript for storage: image data replaced by its length (the trajectory has the images). */
export function storableTranscript(messages: unknown): string {
  return JSON.stringify(messages, (key, value: unknown) =>
    key === 'data' && typeof value === 'string' && value.length > 256 ? `[${value.length} base64 characters]` : value,
  );
}
