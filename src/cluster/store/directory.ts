/**
 * The session directory after placement: confirm, release, end, look up; and the routes of
 * tokens and runs that name no session in their path. A session leaving creating/live gives
 * its size back to its node in the same transaction, with the node's row locked first (the
 * store's lock order), so the node's commitment never drifts from its directory rows and no
 * two transactions deadlock. A second end or release of the same session changes nothing.
 */
import type { DirectoryEntry, DirectoryState } from './cluster-store.js';
import type { Db } from './db.js';

interface EntryRow {
  id: string;
  tenant: string;
  node: string;
  state: DirectoryState;
  memory_mib: number;
  vcpus: string;
  created_at: Date;
  reason: string | null;
}

const ENTRY_COLUMNS = 'id, tenant, node, state, memory_mib, vcpus, created_at, reason';

function entryOf(row: EntryRow): DirectoryEntry {
  return {
    sessionId: row.id,
    tenant: row.tenant,
    node: row.node,
    state: row.state,
    memoryMiB: row.memory_mib,
    vcpus: Number(row.vcpus),
    createdAt: row.created_at,
    reason: row.reason,
  };
}

/**
 * A confirm's commit is not waited for on disk (synchronous_commit off for its transaction
 * alone): a confirm lost in a database crash leaves the row `creating`, which routes, counts
 * and is reconciled exactly as `live` does, so nothing depends on it being durable, and a
 * create waits for one WAL flush (its placement's: the row and the node's commitment) instead
 * of two. The server's setting, and every other statement, stay durable.
 */
const ASYNC_COMMIT = `WITH async AS (SELECT set_config('synchronous_commit', 'off', true))`;

/** Expired view routes removed per recordViewToken: enough to keep up, never a long statement. */
const PRUNE_BATCH = 100;

export class Directory {
  constructor(private readonly db: Db) {}

  /**
   * `as`: the id the node gave the session instead (a warm sandbox keeps the id its resources
   * were made under): the row is the same, under that id. Refused (a unique violation) if the
   * directory holds that id already; the caller destroys the session then.
   */
  async confirm(sessionId: string, as?: string): Promise<void> {
    if (as === undefined || as === sessionId) {
      await this.db.query(
        'confirming a session',
        `${ASYNC_COMMIT} UPDATE sessions SET state = 'live' WHERE id = $1 AND state = 'creating' AND EXISTS (SELECT 1 FROM async)`,
        [sessionId],
        'sbx-confirm',
      );
      return;
    }
    await this.db.query(
      'confirming a session',
      `UPDATE sessions SET state = 'live', id = $2 WHERE id = $1 AND state = 'creating'`,
      [sessionId, as],
      'sbx-confirm-as',
    );
  }

  /** The row goes; if it still counted (creating, live), its size is given back. */
  async release(sessionId: string): Promise<void> {
    await this.giveBack('releasing a session', sessionId, `DELETE FROM sessions WHERE id = $1 RETURNING node, state, memory_mib, vcpus`);
  }

  /** Kept as `ended` (its recording and trajectory stay routable); a lost session stays lost. */
  async end(sessionId: string): Promise<void> {
    await this.giveBack(
      'ending a session',
      sessionId,
      `UPDATE sessions SET state = 'ended', ended_at = now() WHERE id = $1 AND state IN ('creating', 'live')
       RETURNING node, 'live'::text AS state, memory_mib, vcpus`,
    );
  }

  /**
   * Locks the session's node, then runs `change` (which returns the row's node, its state
   * before the change and its size) and gives the size back if that state counted. A lost
   * node's commitment was zeroed when it was marked: its sessions are lost, not counted.
   */
  private async giveBack(what: string, sessionId: string, change: string): Promise<void> {
    await this.db.transaction(what, async (client) => {
      const node = await client.query('SELECT n.name FROM nodes n JOIN sessions s ON s.node = n.name WHERE s.id = $1 FOR UPDATE OF n', [sessionId]);
      if (node.rowCount === 0) return;
      await client.query(
        `WITH changed AS (${change})
         UPDATE nodes n SET sessions = n.sessions - 1, committed_memory_mib = n.committed_memory_mib - changed.memory_mib,
           committed_vcpus = n.committed_vcpus - changed.vcpus, change_seq = nextval('nodes_change_seq')
         FROM changed WHERE n.name = changed.node AND changed.state IN ('creating', 'live')`,
        [sessionId],
      );
    });
  }

  async lookup(sessionId: string): Promise<DirectoryEntry | undefined> {
    const row = (await this.db.query<EntryRow>('looking up a session', `SELECT ${ENTRY_COLUMNS} FROM sessions WHERE id = $1`, [sessionId])).rows[0];
    return row && entryOf(row);
  }

  async sessionsOfNode(node: string): Promise<DirectoryEntry[]> {
    const result = await this.db.query<EntryRow>("listing a node's sessions", `SELECT ${ENTRY_COLUMNS} FROM sessions WHERE node = $1 ORDER BY created_at, id`, [
      node,
    ]);
    return result.rows.map(entryOf);
  }

  async recordViewToken(tokenHash: Buffer, sessionId: string, expiresAt: Date): Promise<void> {
    await this.db.query(
      'recording a view token',
      `DELETE FROM view_routes WHERE token_hash IN (SELECT token_hash FROM view_routes WHERE expires_at <= now() LIMIT ${PRUNE_BATCH})`,
    );
    await this.db.query(
      'recording a view token',
      `INSERT INTO view_routes (token_hash, session_id, expires_at) VALUES ($1, $2, $3)
       ON CONFLICT (token_hash) DO UPDATE SET session_id = EXCLUDED.session_id, expires_at = EXCLUDED.expires_at`,
      [tokenHash, sessionId, expiresAt],
    );
  }

  async lookupViewToken(tokenHash: Buffer): Promise<string | undefined> {
    const result = await this.db.query<{ session_id: string }>(
      'looking up a view token',
      'SELECT session_id FROM view_routes WHERE token_hash = $1 AND expires_at > now()',
      [tokenHash],
    );
    return result.rows[0]?.session_id;
  }

  async recordRun(runId: string, sessionId: string): Promise<void> {
    await this.db.query(
      'recording a run',
      'INSERT INTO run_routes (run_id, session_id) VALUES ($1, $2) ON CONFLICT (run_id) DO UPDATE SET session_id = EXCLUDED.session_id',
      [runId, sessionId],
    );
  }

  async lookupRun(runId: string): Promise<string | undefined> {
    const result = await this.db.query<{ session_id: string }>('looking up a run', 'SELECT session_id FROM run_routes WHERE run_id = $1', [runId]);
    return result.rows[0]?.session_id;
  }
}
