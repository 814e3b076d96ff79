import { createHash, randomBytes, randomUUID, timingSafeEqual } from 'node:crypto';
import type Database from 'better-sqlite3';

export type ViewMode = 'view' | 'control';

/** A live-view grant as the API shows it (never with its token, which only its creator sees once). */
export interface ViewGrant {
  viewId: string;
  sessionId: string;
  tenant: string;
  mode: ViewMode;
  createdAt: string;
  expiresAt: string;
  revokedAt?: string;
}

/** Why a token opens nothing: each answered with what to do next (live-page.ts). */
export type RefusedToken = 'unknown' | 'expired' | 'revoked';

interface Row {
  id: string;
  session_id: string;
  tenant: string;
  mode: ViewMode;
  hash: Buffer;
  created_at: string;
  expires_at: string;
  revoked_at: string | null;
}

/** 32 random bytes, base64url: what a view URL carries. Only its SHA-256 is stored. */
const TOKEN_BYTES = 32;
const TOKEN_PATTERN = /^[A-Za-z0-9_-]{43}$/;

function digest(token: string): Buffer {
  return createHash('sha256').update(token, 'utf8').digest();
}

function toGrant(row: Row): ViewGrant {
  const grant: ViewGrant = {
    viewId: row.id,
    sessionId: row.session_id,
    tenant: row.tenant,
    mode: row.mode,
    createdAt: row.created_at,
    expiresAt: row.expires_at,
  };
  if (row.revoked_at) grant.revokedAt = row.revoked_at;
  return grant;
}

/**
 * Live-view tokens: short-lived, scoped to one tenant, one session and one mode, revocable,
 * kept in the orchestrator's SQLite store as SHA-256 digests (a copy of the database opens
 * no view). The token is the only credential a browser has, so it is looked up by its
 * digest, which is a unique key: no timing difference tells a near miss from a far one.
 */
export class ViewTokens {
  constructor(private readonly db: Database.Database) {
    db.exec(`
      CREATE TABLE IF NOT EXISTS session_views (
        id TEXT PRIMARY KEY,
        session_id TEXT NOT NULL,
        tenant TEXT NOT NULL,
        mode TEXT NOT NULL,
        hash BLOB NOT NULL UNIQUE,
        created_at TEXT NOT NULL,
        expires_at TEXT NOT NULL,
        revoked_at TEXT
      );
      CREATE INDEX IF NOT EXISTS session_views_session ON session_views(session_id);
    `);
  }

  /** A new grant and its token (returned here only). */
  create(input: { sessionId: string; tenant: string; mode: ViewMode; ttlSeconds: number; now?: number }): { grant: ViewGrant; token: string } {
    const now = input.now ?? Date.now();
    const token = randomBytes(TOKEN_BYTES).toString('base64url');
    const row: Row = {
      id: `view_${randomUUID().replace(/-/g, '').slice(0, 16)}`,
      session_id: input.sessionId,
      tenant: input.tenant,
      mode: input.mode,
      hash: digest(token),
      created_at: new Date(now).toISOString(),
      expires_at: new Date(now + input.ttlSeconds * 1000).toISOString(),
      revoked_at: null,
    };
    this.db
      .prepare(
        'INSERT INTO session_views (id, session_id, tenant, mode, hash, created_at, expires_at, revoked_at) VALUES (@id, @session_id, @tenant, @mode, @hash, @created_at, @expires_at, @revoked_at)',
      )
      .run(row);
    return { grant: toGrant(row), token };
  }

  /** The session's grants that still open something (neither expired nor revoked). */
  listUsable(sessionId: string, now = Date.now()): ViewGrant[] {
    const rows = this.db.prepare('SELECT * FROM session_views WHERE session_id = ? AND revoked_at IS NULL ORDER BY created_at').all(sessionId) as Row[];
    return rows.filter((r) => Date.parse(r.expires_at) > now).map(toGrant);
  }

  find(sessionId: string, viewId: string): ViewGrant | undefined {
    const row = this.db.prepare('SELECT * FROM session_views WHERE id = ? AND session_id = ?').get(viewId, sessionId) as Row | undefined;
    return row ? toGrant(row) : undefined;
  }

  /** Marks a grant revoked (idempotent); true if it was usable until now. */
  revoke(viewId: string, now = Date.now()): boolean {
    const changed = this.db
      .prepare('UPDATE session_views SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL')
      .run(new Date(now).toISOString(), viewId).changes;
    return changed > 0;
  }

  /** Revokes every grant of a session (it ended). */
  revokeSession(sessionId: string, now = Date.now()): void {
    this.db.prepare('UPDATE session_views SET revoked_at = ? WHERE session_id = ? AND revoked_at IS NULL').run(new Date(now).toISOString(), sessionId);
  }

  /** What a token opens, or why it opens nothing. A malformed token is simply unknown. */
  resolve(token: string, now = Date.now()): ViewGrant | RefusedToken {
    if (!TOKEN_PATTERN.test(token)) return 'unknown';
    const wanted = digest(token);
    const row = this.db.prepare('SELECT * FROM session_views WHERE hash = ?').get(wanted) as Row | undefined;
    if (!row || !timingSafeEqual(row.hash, wanted)) return 'unknown';
    if (row.revoked_at) return 'revoked';
    if (Date.parse(row.expires_at) <= now) return 'expired';
    return toGrant(row);
  }

  /** Forgets grants that ended more than a day ago (they open nothing; kept a while for a clear "expired"). */
  prune(now = Date.now()): void {
    const cutoff = new Date(now - 24 * 3600_000).toISOString();
    this.db.prepare('DELETE FROM session_views WHERE expires_at < ? OR revoked_at < ?').run(cutoff, cutoff);
  }
}
