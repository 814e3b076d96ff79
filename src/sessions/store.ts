import Database from 'better-sqlite3';
import { cacheStatements } from '../util/statement-cache.js';
import type { ResourceKind } from './resource-ledger.js';
import type { ControlTransport, EndReason, OnIdle, PausedState, SessionRecord, SessionState } from './session-record.js';

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
  screenshot_format: SessionRecord['screenshotFormat'];
  screenshot_quality: number | null;
  timeout_seconds: number;
  metadata: string;
  created_at: string;
  updated_at: string;
  expires_at: string;
  address_index: number | null;
  error: string | null;
  egress: number;
  pooled: number;
  max_lifetime_seconds: number;
  end_reason: EndReason | null;
  template: string;
  paused_mode: PausedState['mode'] | null;
  paused_since: string | null;
  paused_bytes: number | null;
  paused_total_ms: number;
  paused_retention_seconds: number;
  on_idle: OnIdle;
  auto_resume: number;
  transport: ControlTransport;
  volumes: string;
  host_key_fingerprint: string | null;
  snapshot: string | null;
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
    cacheStatements(this.db);
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
      -- The ledger: every host resource a session holds, written before it is taken and
      -- forgotten once released (sessions/resource-ledger.ts).
      -- API keys (src/api/auth/key-store.ts): only a SHA-256 of each key is kept.
      CREATE TABLE IF NOT EXISTS api_keys (
        id TEXT PRIMARY KEY,
        tenant TEXT NOT NULL,
        hash BLOB NOT NULL,
        created_at TEXT NOT NULL,
        expires_at TEXT,
        revoked_at TEXT
      );
      CREATE TABLE IF NOT EXISTS session_resources (
        session_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        name TEXT NOT NULL,
        recorded_at TEXT NOT NULL,
        PRIMARY KEY (session_id, kind, name)
      );
      -- A host id range (a container's user namespace) is held by one session at a time.
      CREATE UNIQUE INDEX IF NOT EXISTS session_id_ranges ON session_resources(name) WHERE kind = 'id-range';
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
      ['pooled', 'INTEGER NOT NULL DEFAULT 0'],
      // Sessions from before tenants were made without keys: they belong to the local tenant.
      ['tenant', "TEXT NOT NULL DEFAULT 'local'"],
      ['max_lifetime_seconds', 'INTEGER NOT NULL DEFAULT 3600'],
      // What carries the control channel (issue 23); older sessions were all reached over TCP.
      ['transport', "TEXT NOT NULL DEFAULT 'tcp'"],
      ['end_reason', 'TEXT'],
      ['screenshot_format', "TEXT NOT NULL DEFAULT 'png'"],
      ['screenshot_quality', 'INTEGER'],
      // Sessions from before templates booted the one image there was: the built-in minimal.
      ['template', "TEXT NOT NULL DEFAULT 'minimal'"],
      // Pause (sessions/pause.ts): how it is paused, and the time it spent paused before.
      ['paused_mode', 'TEXT'],
      ['paused_since', 'TEXT'],
      ['paused_bytes', 'INTEGER'],
      ['paused_total_ms', 'INTEGER NOT NULL DEFAULT 0'],
      ['on_idle', "TEXT NOT NULL DEFAULT 'destroy'"],
      ['auto_resume', 'INTEGER NOT NULL DEFAULT 1'],
      // Volumes mounted (docs/volumes.md), as JSON: a restart's adoption holds them again.
      ['volumes', "TEXT NOT NULL DEFAULT '[]'"],
      // Its own paused retention (tenant-limits.ts); sessions from before it get the old default, 7 days.
      ['paused_retention_seconds', 'INTEGER NOT NULL DEFAULT 604800'],
      // The pinned host key's fingerprint, shown in the view; a fork's snapshot (docs/snapshots.md).
      ['host_key_fingerprint', 'TEXT'],
      ['snapshot', 'TEXT'],
    ];
    for (const [name, type] of added) {
      if (!columns.has(name)) this.db.exec(`ALTER TABLE sessions ADD COLUMN ${name} ${type}`);
    }
  }

  insert(record: SessionRecord): void {
    this.db
      .prepare(
        `INSERT INTO sessions (id, tenant, state, runtime, width, height, model_width, model_height, tool_version,
           timeout_seconds, metadata, created_at, updated_at, expires_at, address_index, error, egress, pooled,
           max_lifetime_seconds, end_reason, screenshot_format, screenshot_quality, template,
           paused_mode, paused_since, paused_bytes, paused_total_ms, on_idle, auto_resume, transport, volumes,
           paused_retention_seconds, host_key_fingerprint, snapshot)
         VALUES (@id, @tenant, @state, @runtime, @width, @height, @model_width, @model_height, @tool_version,
           @timeout_seconds, @metadata, @created_at, @updated_at, @expires_at, @address_index, @error, @egress, @pooled,
           @max_lifetime_seconds, @end_reason, @screenshot_format, @screenshot_quality, @template,
           @paused_mode, @paused_since, @paused_bytes, @paused_total_ms, @on_idle, @auto_resume, @transport, @volumes,
           @paused_retention_seconds, @host_key_fingerprint, @snapshot)`,
      )
      .run(toRow(record));
  }

  update(record: SessionRecord): void {
    this.db
      .prepare(
        `UPDATE sessions SET state = @state, updated_at = @updated_at, expires_at = @expires_at,
           timeout_seconds = @timeout_seconds, address_index = @address_index, error = @error,
           max_lifetime_seconds = @max_lifetime_seconds, end_reason = @end_reason,
           paused_mode = @paused_mode, paused_since = @paused_since, paused_bytes = @paused_bytes,
           paused_total_ms = @paused_total_ms, on_idle = @on_idle, auto_resume = @auto_resume,
           host_key_fingerprint = @host_key_fingerprint, snapshot = @snapshot
         WHERE id = @id`,
      )
      .run(toRow(record));
  }

  /**
   * A warm-pool sandbox becomes a client's session: every field the request decides
   * (screen as the model sees it, tool version, screenshot format, timeout, metadata, times) is written at once.
   */
  claim(record: SessionRecord): void {
    this.db
      .prepare(
        `UPDATE sessions SET tenant = @tenant, state = @state, model_width = @model_width, model_height = @model_height,
           tool_version = @tool_version, screenshot_format = @screenshot_format, screenshot_quality = @screenshot_quality,
           timeout_seconds = @timeout_seconds, metadata = @metadata,
           created_at = @created_at, updated_at = @updated_at, expires_at = @expires_at,
           address_index = @address_index, error = @error, pooled = @pooled,
           max_lifetime_seconds = @max_lifetime_seconds, end_reason = @end_reason,
           on_idle = @on_idle, auto_resume = @auto_resume, paused_retention_seconds = @paused_retention_seconds
         WHERE id = @id`,
      )
      .run(toRow(record));
  }

  /** Records a resource a session is about to take (idempotent). */
  recordResource(sessionId: string, kind: ResourceKind, name: string): void {
    this.db
      .prepare('INSERT OR IGNORE INTO session_resources (session_id, kind, name, recorded_at) VALUES (?, ?, ?, ?)')
      .run(sessionId, kind, name, new Date().toISOString());
  }

  /**
   * Leases a range of `size` host ids, base + k * size for the lowest k no session holds, and
   * records it on the ledger as "<first>:<size>" before anyone uses it: the range is held until
   * the session's ledger is forgotten (everything released), so neither a crash nor a restart
   * can hand it to a second session. A session that holds one already keeps it.
   */
  leaseIdRange(sessionId: string, base: number, size: number, maxRanges: number, takeHostWide: (first: number) => boolean = () => true): number {
    return this.db.transaction(() => {
      const held = this.db.prepare("SELECT session_id, name FROM session_resources WHERE kind = 'id-range'").all() as Array<{
        session_id: string;
        name: string;
      }>;
      const mine = held.find((r) => r.session_id === sessionId);
      if (mine) return Number(mine.name.split(':')[0]);
      const taken = new Set(held.map((r) => r.name));
      for (let k = 0; k < maxRanges; k++) {
        const first = base + k * size;
        const name = `${first}:${size}`;
        // Free in our ledger; then it must be free on the host too (another orchestrator's, id-leases.ts).
        if (taken.has(name) || !takeHostWide(first)) continue;
        this.recordResource(sessionId, 'id-range', name);
        return first;
      }
      throw new Error(`all ${maxRanges} host id ranges from ${base} are held by sessions (of this orchestrator or another on this host)`);
    })();
  }

  /** What the ledger says a session holds, in the order it was taken. */
  resourcesOf(sessionId: string): Array<{ kind: ResourceKind; name: string }> {
    return this.db.prepare('SELECT kind, name FROM session_resources WHERE session_id = ? ORDER BY recorded_at, rowid').all(sessionId) as Array<{
      kind: ResourceKind;
      name: string;
    }>;
  }

  /** Sessions with resources on the ledger (a crash may leave some of a session not in `sessions`). */
  sessionsWithResources(): string[] {
    return (this.db.prepare('SELECT DISTINCT session_id FROM session_resources').all() as Array<{ session_id: string }>).map((r) => r.session_id);
  }

  /** Everything of the session released: its ledger goes. */
  forgetResources(sessionId: string): void {
    this.db.prepare('DELETE FROM session_resources WHERE session_id = ?').run(sessionId);
  }

  /** Forgets a row: a warm-pool sandbox that was destroyed before anyone claimed it. */
  delete(id: string): void {
    this.db.prepare('DELETE FROM sessions WHERE id = ?').run(id);
  }

  /** Sessions (and warm-pool sandboxes) not yet destroyed: what a restart must adopt or reclaim. */
  unfinished(): SessionRecord[] {
    const rows = this.db.prepare(`SELECT * FROM sessions WHERE state != 'destroyed'`).all() as Row[];
    return rows.map(fromRow);
  }

  /** A client's session; warm-pool sandboxes are nobody's session yet, so they are not found. */
  get(id: string): SessionRecord | undefined {
    const row = this.db.prepare('SELECT * FROM sessions WHERE id = ? AND pooled = 0').get(id) as Row | undefined;
    return row && fromRow(row);
  }

  /** Forgets destroyed sessions older than the cut-off, so the file does not grow forever. */
  pruneDestroyed(olderThan: Date): number {
    return this.db.prepare(`DELETE FROM sessions WHERE state = 'destroyed' AND updated_at < ?`).run(olderThan.toISOString()).changes;
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
    screenshot_format: r.screenshotFormat,
    screenshot_quality: r.screenshotQuality,
    timeout_seconds: r.timeoutSeconds,
    metadata: JSON.stringify(r.metadata),
    created_at: r.createdAt,
    updated_at: r.updatedAt,
    expires_at: r.expiresAt,
    address_index: r.addressIndex,
    error: r.error,
    egress: r.egress ? 1 : 0,
    pooled: r.pooled ? 1 : 0,
    max_lifetime_seconds: r.maxLifetimeSeconds,
    end_reason: r.endReason,
    template: r.template,
    paused_mode: r.paused?.mode ?? null,
    paused_since: r.paused?.since ?? null,
    paused_bytes: r.paused?.bytes ?? null,
    paused_total_ms: r.pausedMs,
    paused_retention_seconds: r.pausedRetentionSeconds,
    on_idle: r.onIdle,
    auto_resume: r.autoResume ? 1 : 0,
    transport: r.transport ?? 'tcp',
    volumes: JSON.stringify(r.volumes),
    host_key_fingerprint: r.hostKeyFingerprint ?? null,
    snapshot: r.snapshot ?? null,
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
    screenshotFormat: row.screenshot_format,
    screenshotQuality: row.screenshot_quality,
    timeoutSeconds: row.timeout_seconds,
    metadata: JSON.parse(row.metadata) as Record<string, unknown>,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
    expiresAt: row.expires_at,
    addressIndex: row.address_index,
    error: row.error,
    egress: row.egress === 1,
    pooled: row.pooled === 1,
    maxLifetimeSeconds: row.max_lifetime_seconds,
    endReason: row.end_reason,
    template: row.template,
    paused: row.paused_mode && row.paused_since ? { mode: row.paused_mode, since: row.paused_since, bytes: row.paused_bytes ?? 0 } : null,
    pausedMs: row.paused_total_ms,
    pausedRetentionSeconds: row.paused_retention_seconds,
    onIdle: row.on_idle,
    autoResume: row.auto_resume === 1,
    transport: row.transport,
    volumes: JSON.parse(row.volumes) as SessionRecord['volumes'],
    hostKeyFingerprint: row.host_key_fingerprint,
    snapshot: row.snapshot,
  };
}
