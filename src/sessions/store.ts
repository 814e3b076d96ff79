import Database from 'better-sqlite3';
import type { SessionRecord, SessionState } from './session-record.js';

interface Row {
  id: string;
  tenant: string;
  state: SessionState;
  runtime: SessionRecord['runtime'];
  width: number;
  height: number;
  model_width: number;
  model_height: number;
  tool_version: SessionRecord['toolVersion'];
  timeout_seconds: number;
  metadata: string;
  created_at: string;
  updated_at: string;
  expires_at: string;
  address_index: number | null;
  error: string | null;
  egress: number;
}

/**
 * Sessions and their state changes in SQLite, written before resources are taken, so a
 * restarted orchestrator knows what existed. The unique index on the address lease makes
 * a double lease impossible even across restarts.
 */
export class SessionStore {
  private readonly db: Database.Database;

  constructor(file: string) {
    this.db = new Database(file);
    this.db.pragma('journal_mode = WAL');
    this.db.pragma('synchronous = NORMAL');
    this.db.exec(`
      CREATE TABLE IF NOT EXISTS sessions (
        id TEXT PRIMARY KEY,
        state TEXT NOT NULL,
        runtime TEXT NOT NULL,
        width INTEGER NOT NULL,
        height INTEGER NOT NULL,
        timeout_seconds INTEGER NOT NULL,
        metadata TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        expires_at TEXT NOT NULL,
        address_index INTEGER,
        error TEXT
      );
      CREATE UNIQUE INDEX IF NOT EXISTS sessions_address ON sessions(address_index)
        WHERE address_index IS NOT NULL;
      -- API keys (src/api/auth/key-store.ts): only a SHA-256 of each key is kept.
      CREATE TABLE IF NOT EXISTS api_keys (
        id TEXT PRIMARY KEY,
        tenant TEXT NOT NULL,
        hash BLOB NOT NULL,
        created_at TEXT NOT NULL,
        expires_at TEXT,
        revoked_at TEXT
      );
    `);
    this.migrate();
  }

  /** The open database, for the other tables kept in the same file (API keys). */
  get database(): Database.Database {
    return this.db;
  }

  /** Columns added after the first release; an older file gains them with defaults. */
  private migrate(): void {
    const columns = new Set((this.db.prepare('PRAGMA table_info(sessions)').all() as Array<{ name: string }>).map((c) => c.name));
    const added: Array<[string, string]> = [
      ['model_width', 'INTEGER NOT NULL DEFAULT 0'],
      ['model_height', 'INTEGER NOT NULL DEFAULT 0'],
      ['tool_version', "TEXT NOT NULL DEFAULT 'computer_20250124'"],
      ['egress', 'INTEGER NOT NULL DEFAULT 0'],
      // Sessions from before tenants were made without keys: they belong to the local tenant.
      ['tenant', "TEXT NOT NULL DEFAULT 'local'"],
    ];
    for (const [name, type] of added) {
      if (!columns.has(name)) this.db.exec(`ALTER TABLE sessions ADD COLUMN ${name} ${type}`);
    }
  }

  insert(record: SessionRecord): void {
    this.db
      .prepare(
        `INSERT INTO sessions (id, tenant, state, runtime, width, height, model_width, model_height, tool_version,
           timeout_seconds, metadata, created_at, updated_at, expires_at, address_index, error, egress)
         VALUES (@id, @tenant, @state, @runtime, @width, @height, @model_width, @model_height, @tool_version,
           @timeout_seconds, @metadata, @created_at, @updated_at, @expires_at, @address_index, @error, @egress)`,
      )
      .run(toRow(record));
  }

  update(record: SessionRecord): void {
    this.db
      .prepare(
        `UPDATE sessions SET state = @state, updated_at = @updated_at, expires_at = @expires_at,
           timeout_seconds = @timeout_seconds, address_index = @address_index, error = @error
         WHERE id = @id`,
      )
      .run(toRow(record));
  }

  /** Sessions that are not yet destroyed: what a restart must adopt or reclaim. */
  unfinished(): SessionRecord[] {
    const rows = this.db.prepare(`SELECT * FROM sessions WHERE state != 'destroyed'`).all() as Row[];
    return rows.map(fromRow);
  }

  get(id: string): SessionRecord | undefined {
    const row = this.db.prepare('SELECT * FROM sessions WHERE id = ?').get(id) as Row | undefined;
    return row && fromRow(row);
  }

  /** Forgets destroyed sessions older than the cut-off, so the file does not grow forever. */
  pruneDestroyed(olderThan: Date): number {
    return this.db
      .prepare(`DELETE FROM sessions WHERE state = 'destroyed' AND updated_at < ?`)
      .run(olderThan.toISOString()).changes;
  }

  close(): void {
    this.db.close();
  }
}

function toRow(r: SessionRecord): Row {
  return {
    id: r.id,
    tenant: r.tenant,
    state: r.state,
    runtime: r.runtime,
    width: r.width,
    height: r.height,
    model_width: r.modelWidth,
    model_height: r.modelHeight,
    tool_version: r.toolVersion,
    timeout_seconds: r.timeoutSeconds,
    metadata: JSON.stringify(r.metadata),
    created_at: r.createdAt,
    updated_at: r.updatedAt,
    expires_at: r.expiresAt,
    address_index: r.addressIndex,
    error: r.error,
    egress: r.egress ? 1 : 0,
  };
}

function fromRow(row: Row): SessionRecord {
  return {
    id: row.id,
    tenant: row.tenant,
    state: row.state,
    runtime: row.runtime,
    width: row.width,
    height: row.height,
    modelWidth: row.model_width || row.width,
    modelHeight: row.model_height || row.height,
    toolVersion: row.tool_version,
    timeoutSeconds: row.timeout_seconds,
    metadata: JSON.parse(row.metadata) as Record<string, unknown>,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
    expiresAt: row.expires_at,
    addressIndex: row.address_index,
    error: row.error,
    egress: row.egress === 1,
  };
}
