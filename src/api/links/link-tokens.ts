import type Database from 'better-sqlite3';
import { newSecretToken, parseSecretToken, secretMatches } from '../../util/secret-token.js';
import { OrchestratorError } from '../../errors.js';

/**
 * What a link token opens. One module for every page a person opens in a browser, which
 * cannot send the API key header: the trajectory viewer, and a terminal (a shell in the
 * sandbox: api/routes/terminal.ts). A token opens one purpose of one session of one tenant, until it expires,
 * is revoked, or is pruned with its session.
 */
export const LINK_PURPOSES = ['trajectory', 'terminal'] as const;
export type LinkPurpose = (typeof LINK_PURPOSES)[number];

export const MIN_LINK_TTL_SECONDS = 10;
export const MAX_LINK_TTL_SECONDS = 24 * 3600;
export const DEFAULT_LINK_TTL_SECONDS = 3600;

export interface LinkRecord {
  id: string;
  tenant: string;
  sessionId: string;
  purpose: LinkPurpose;
  createdAt: string;
  expiresAt: string;
  revokedAt: string | null;
}

interface Row {
  id: string;
  tenant: string;
  session_id: string;
  purpose: LinkPurpose;
  hash: Buffer;
  created_at: string;
  expires_at: string;
  revoked_at: string | null;
}

/** A link token that does not open what was asked: 401, and which of the reasons (never whose token it is). */
export class LinkTokenError extends OrchestratorError {
  constructor(message: string, code: 'invalid_link_token' | 'expired_link_token' | 'revoked_link_token') {
    super(code, message);
  }
}

/** `lnk_<12 id chars>_<43 secret chars>` (util/secret-token.ts). */
const KIND = 'lnk';

/**
 * Link tokens in SQLite (the orchestrator's file): only a SHA-256 of each token's secret is
 * kept, so a copy of the database opens nothing. Read afresh on every request, so a revoke
 * takes effect at once.
 */
export class LinkTokens {
  constructor(private readonly db: Database.Database) {
    db.exec(`
      CREATE TABLE IF NOT EXISTS link_tokens (
        id TEXT PRIMARY KEY,
        tenant TEXT NOT NULL,
        session_id TEXT NOT NULL,
        purpose TEXT NOT NULL,
        hash BLOB NOT NULL,
        created_at TEXT NOT NULL,
        expires_at TEXT NOT NULL,
        revoked_at TEXT
      );
      CREATE INDEX IF NOT EXISTS link_tokens_session ON link_tokens(session_id);
    `);
  }

  /** A new token; the returned `token` is the only copy there will ever be. */
  create(tenant: string, sessionId: string, purpose: LinkPurpose, ttlSeconds: number, now = new Date()): { record: LinkRecord; token: string } {
    const { id, token, digest } = newSecretToken(KIND);
    const record: LinkRecord = {
      id,
      tenant,
      sessionId,
      purpose,
      createdAt: now.toISOString(),
      expiresAt: new Date(now.getTime() + ttlSeconds * 1000).toISOString(),
      revokedAt: null,
    };
    this.db
      .prepare('INSERT INTO link_tokens (id, tenant, session_id, purpose, hash, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)')
      .run(id, tenant, sessionId, purpose, digest, record.createdAt, record.expiresAt);
    // Expired tokens are forgotten as new ones are made, so the table stays small.
    this.db.prepare('DELETE FROM link_tokens WHERE expires_at < ?').run(new Date(now.getTime() - 24 * 3600_000).toISOString());
    return { record, token };
  }

  /**
   * The link a token opens, if it opens `purpose` of `sessionId`; otherwise a LinkTokenError.
   * A token of another session, tenant or purpose is "invalid", like a made-up one.
   */
  verify(token: string, sessionId: string, purpose: LinkPurpose, now = new Date()): LinkRecord {
    const parsed = parseSecretToken(KIND, token);
    const invalid = () =>
      new LinkTokenError('the link token is not valid for this page: ask for a new link (POST /v1/sessions/:id/links)', 'invalid_link_token');
    if (!parsed) throw invalid();
    const row = this.db.prepare('SELECT * FROM link_tokens WHERE id = ?').get(parsed.id) as Row | undefined;
    if (!row || !secretMatches(row.hash, parsed.secret)) throw invalid();
    if (row.session_id !== sessionId || row.purpose !== purpose) throw invalid();
    if (row.revoked_at !== null) throw new LinkTokenError('the link was revoked: ask for a new one', 'revoked_link_token');
    if (Date.parse(row.expires_at) <= now.getTime()) throw new LinkTokenError('the link expired: ask for a new one', 'expired_link_token');
    return toRecord(row);
  }

  /** Whether `token` still opens that page (a page left open asks again: revoked or expired, it closes). */
  opens(token: string, sessionId: string, purpose: LinkPurpose, now = new Date()): boolean {
    try {
      this.verify(token, sessionId, purpose, now);
      return true;
    } catch {
      return false;
    }
  }

  /** Revokes a link of the tenant's session; false when there is no such link. */
  revoke(tenant: string, sessionId: string, id: string, now = new Date()): boolean {
    return (
      this.db
        .prepare('UPDATE link_tokens SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ? AND tenant = ? AND session_id = ?')
        .run(now.toISOString(), id, tenant, sessionId).changes > 0
    );
  }

  /** The tenants that made links to a session (one, unless ids were reused): its owners by what is kept. */
  tenantsOf(sessionId: string): string[] {
    return (this.db.prepare('SELECT DISTINCT tenant FROM link_tokens WHERE session_id = ?').all(sessionId) as Array<{ tenant: string }>).map((r) => r.tenant);
  }

  /** Every link of a session ends with it (the live view's tokens die with the session). */
  revokeSession(sessionId: string, now = new Date()): void {
    this.db.prepare('UPDATE link_tokens SET revoked_at = ? WHERE session_id = ? AND revoked_at IS NULL').run(now.toISOString(), sessionId);
  }
}

function toRecord(row: Row): LinkRecord {
  return {
    id: row.id,
    tenant: row.tenant,
    sessionId: row.session_id,
    purpose: row.purpose,
    createdAt: row.created_at,
    expiresAt: row.expires_at,
    revokedAt: row.revoked_at,
  };
}
