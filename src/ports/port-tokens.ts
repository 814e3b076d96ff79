import type Database from 'better-sqlite3';
import { OrchestratorError } from '../errors.js';
import { newSecretToken, parseSecretToken, secretMatches } from '../util/secret-token.js';

export const MIN_PORT_TOKEN_TTL_SECONDS = 10;
export const MAX_PORT_TOKEN_TTL_SECONDS = 7 * 24 * 3600;
export const DEFAULT_PORT_TOKEN_TTL_SECONDS = 3600;

/** A port token as the API shows it (never the token itself, which only its creator sees once). */
export interface PortGrant {
  id: string;
  tenant: string;
  sessionId: string;
  port: number;
  createdAt: string;
  expiresAt: string;
  revokedAt: string | null;
}

interface Row {
  id: string;
  tenant: string;
  session_id: string;
  port: number;
  hash: Buffer;
  created_at: string;
  expires_at: string;
  revoked_at: string | null;
}

/** A port token that opens nothing here: 401 with the reason (never whose token it is). */
export class PortTokenError extends OrchestratorError {
  constructor(message: string, code: 'invalid_port_token' | 'expired_port_token' | 'revoked_port_token') {
    super(code, message);
  }
}

/**
 * `prt_<12 id chars>_<43 secret chars>`: a kind of its own, so neither a link token
 * (`lnk_`) nor a live-view token (bare 43 characters) is ever mistaken for one, and one of
 * these opens nothing else (each store reads only its own shape and table).
 */
const KIND = 'prt';

export function looksLikePortToken(value: string): boolean {
  return parseSecretToken(KIND, value) !== undefined;
}

function toGrant(row: Row): PortGrant {
  return {
    id: row.id,
    tenant: row.tenant,
    sessionId: row.session_id,
    port: row.port,
    createdAt: row.created_at,
    expiresAt: row.expires_at,
    revokedAt: row.revoked_at,
  };
}

/**
 * Tokens that open one port of one session of one tenant, until they expire or are revoked
 * (a URL a browser or a script without the API key can use). Kept in the orchestrator's
 * SQLite file as SHA-256 digests of their secrets, read afresh on every request so that a
 * revoke takes effect at once, before any byte of the next request reaches the guest.
 */
export class PortTokens {
  constructor(private readonly db: Database.Database) {
    db.exec(`
      CREATE TABLE IF NOT EXISTS port_tokens (
        id TEXT PRIMARY KEY,
        tenant TEXT NOT NULL,
        session_id TEXT NOT NULL,
        port INTEGER NOT NULL,
        hash BLOB NOT NULL,
        created_at TEXT NOT NULL,
        expires_at TEXT NOT NULL,
        revoked_at TEXT
      );
      CREATE INDEX IF NOT EXISTS port_tokens_session ON port_tokens(session_id);
    `);
  }

  /** A new token; the returned `token` is the only copy there will ever be. */
  create(tenant: string, sessionId: string, port: number, ttlSeconds: number, now = new Date()): { grant: PortGrant; token: string } {
    const { id, token, digest } = newSecretToken(KIND);
    const row: Row = {
      id,
      tenant,
      session_id: sessionId,
      port,
      hash: digest,
      created_at: now.toISOString(),
      expires_at: new Date(now.getTime() + ttlSeconds * 1000).toISOString(),
      revoked_at: null,
    };
    this.db
      .prepare(
        'INSERT INTO port_tokens (id, tenant, session_id, port, hash, created_at, expires_at, revoked_at) VALUES (@id, @tenant, @session_id, @port, @hash, @created_at, @expires_at, @revoked_at)',
      )
      .run(row);
    // Tokens ended a day ago are forgotten as new ones are made, so the table stays small.
    const cutoff = new Date(now.getTime() - 24 * 3600_000).toISOString();
    this.db.prepare('DELETE FROM port_tokens WHERE expires_at < ? OR revoked_at < ?').run(cutoff, cutoff);
    return { grant: toGrant(row), token };
  }

  /**
   * The grant a token gives if it opens `port` of `sessionId`; otherwise a PortTokenError.
   * A token of another session or port is "invalid", like a made-up one.
   */
  verify(token: string, sessionId: string, port: number, now = new Date()): PortGrant {
    // Made only when thrown: an error's stack costs more than the rest of a valid check.
    const invalid = () =>
      new PortTokenError('the port token does not open this port of this session: ask for a new URL (POST /v1/sessions/:id/ports)', 'invalid_port_token');
    const parsed = parseSecretToken(KIND, token);
    if (!parsed) throw invalid();
    const row = this.db.prepare('SELECT * FROM port_tokens WHERE id = ?').get(parsed.id) as Row | undefined;
    if (!row || !secretMatches(row.hash, parsed.secret)) throw invalid();
    if (row.session_id !== sessionId || row.port !== port) throw invalid();
    if (row.revoked_at !== null) throw new PortTokenError('the port token was revoked: ask for a new URL', 'revoked_port_token');
    if (Date.parse(row.expires_at) <= now.getTime()) throw new PortTokenError('the port token expired: ask for a new URL', 'expired_port_token');
    return toGrant(row);
  }

  /** The session's tokens that still open something. */
  listUsable(tenant: string, sessionId: string, now = new Date()): PortGrant[] {
    const rows = this.db
      .prepare('SELECT * FROM port_tokens WHERE tenant = ? AND session_id = ? AND revoked_at IS NULL ORDER BY created_at')
      .all(tenant, sessionId) as Row[];
    return rows.filter((r) => Date.parse(r.expires_at) > now.getTime()).map(toGrant);
  }

  /** Revokes a token of the tenant's session (idempotent); false when there is no such token. */
  revoke(tenant: string, sessionId: string, id: string, now = new Date()): boolean {
    return (
      this.db
        .prepare('UPDATE port_tokens SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ? AND tenant = ? AND session_id = ?')
        .run(now.toISOString(), id, tenant, sessionId).changes > 0
    );
  }
}
