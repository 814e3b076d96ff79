import type Database from 'better-sqlite3';

/**
 * A snapshot as stored: whose it is (the tenant stored here is what scopes it, never whether
 * the session that made it still exists), what it was taken of, and its size once saved.
 * `creating` rows count against the quota, so that racing creates cannot pass it together.
 */
export interface SnapshotRecord {
  id: string;
  tenant: string;
  name: string | null;
  sessionId: string;
  template: string;
  runtime: string;
  /** The desktop's screen when it was taken: a fork's screen is the same (its X server is in the state). */
  width: number;
  height: number;
  /** Bytes of host disk its files hold (0 while creating). */
  bytes: number;
  state: 'creating' | 'ready';
  createdAt: string;
}

interface Row {
  id: string;
  tenant: string;
  name: string | null;
  session_id: string;
  template: string;
  runtime: string;
  width: number;
  height: number;
  bytes: number;
  state: string;
  created_at: string;
}

/** Snapshots in the orchestrator's SQLite file, next to the sessions. A row exists before its files are made and goes after they are removed. */
export class SnapshotStore {
  constructor(private readonly db: Database.Database) {
    db.exec(`
      CREATE TABLE IF NOT EXISTS snapshots (
        id TEXT PRIMARY KEY,
        tenant TEXT NOT NULL,
        name TEXT,
        session_id TEXT NOT NULL,
        template TEXT NOT NULL,
        runtime TEXT NOT NULL,
        width INTEGER NOT NULL,
        height INTEGER NOT NULL,
        bytes INTEGER NOT NULL,
        state TEXT NOT NULL,
        created_at TEXT NOT NULL
      );
      CREATE UNIQUE INDEX IF NOT EXISTS snapshots_tenant_name ON snapshots (tenant, name) WHERE name IS NOT NULL;
    `);
  }

  /** False if the tenant has a snapshot of that name already. */
  insert(r: SnapshotRecord): boolean {
    const res = this.db
      .prepare(
        'INSERT OR IGNORE INTO snapshots (id, tenant, name, session_id, template, runtime, width, height, bytes, state, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)',
      )
      .run(r.id, r.tenant, r.name, r.sessionId, r.template, r.runtime, r.width, r.height, r.bytes, r.state, r.createdAt);
    return res.changes === 1;
  }

  /** The tenant's snapshot of that id; another tenant's is not found. */
  get(tenant: string, id: string): SnapshotRecord | undefined {
    const row = this.db.prepare('SELECT * FROM snapshots WHERE tenant = ? AND id = ?').get(tenant, id) as Row | undefined;
    return row && fromRow(row);
  }

  list(tenant: string): SnapshotRecord[] {
    return (this.db.prepare('SELECT * FROM snapshots WHERE tenant = ? ORDER BY created_at, id').all(tenant) as Row[]).map(fromRow);
  }

  /** Every tenant's (a restart removes what a crash left half made). */
  all(): SnapshotRecord[] {
    return (this.db.prepare('SELECT * FROM snapshots').all() as Row[]).map(fromRow);
  }

  markReady(id: string, bytes: number): void {
    this.db.prepare("UPDATE snapshots SET state = 'ready', bytes = ? WHERE id = ?").run(bytes, id);
  }

  delete(id: string): void {
    this.db.prepare('DELETE FROM snapshots WHERE id = ?').run(id);
  }
}

function fromRow(row: Row): SnapshotRecord {
  return {
    id: row.id,
    tenant: row.tenant,
    name: row.name,
    sessionId: row.session_id,
    template: row.template,
    runtime: row.runtime,
    width: row.width,
    height: row.height,
    bytes: row.bytes,
    state: row.state === 'ready' ? 'ready' : 'creating',
    createdAt: row.created_at,
  };
}
