import type Database from 'better-sqlite3';
import { newSecretToken, parseSecretToken, secretMatches } from '../util/secret-token.js';

/** What the E2B surface keeps of a sandbox it made, beside the session itself. */
export interface E2bSandboxRow {
  sessionId: string;
  tenant: string;
  /** The template name the client asked for (E2B's templateID), shown back as it was. */
  templateId: string;
  /** The sandbox's env vars (create's envVars): every command of the sandbox gets them. */
  envVars: Record<string, string>;
}

interface Row {
  session_id: string;
  tenant: string;
  template_id: string;
  hashes: string;
  env_vars: string;
  created_at: string;
}

/** The kind of the envd access token: `eat_<12>_<43>`, read by no other store. */
const KIND = 'eat';
/** Tokens valid at once for one sandbox (one per create or connect). */
const MAX_TOKENS = 16;

/**
 * The sandboxes made through the E2B surface, in the orchestrator's SQLite file: each one's
 * envd access token (the credential of its in-sandbox API, kept as the SHA-256 digest of its
 * secret like our other tokens, so a copy of the database opens nothing), its env vars and
 * the template name the client used. Rows of sessions that ended are dropped as new ones come.
 */
export class E2bSandboxStore {
  constructor(private readonly db: Database.Database) {
    db.exec(`
      CREATE TABLE IF NOT EXISTS e2b_sandboxes (
        session_id TEXT PRIMARY KEY,
        tenant TEXT NOT NULL,
        template_id TEXT NOT NULL,
        hashes TEXT NOT NULL,
        env_vars TEXT NOT NULL,
        created_at TEXT NOT NULL
      );
    `);
  }

  /** Records a new sandbox; the returned token is the only copy there will ever be. */
  add(row: E2bSandboxRow, now = new Date()): string {
    const { token, digest } = newSecretToken(KIND);
    this.db
      .prepare('INSERT OR REPLACE INTO e2b_sandboxes (session_id, tenant, template_id, hashes, env_vars, created_at) VALUES (?, ?, ?, ?, ?, ?)')
      .run(row.sessionId, row.tenant, row.templateId, JSON.stringify([digest.toString('hex')]), JSON.stringify(row.envVars), now.toISOString());
    return token;
  }

  get(sessionId: string): E2bSandboxRow | undefined {
    const row = this.db.prepare('SELECT * FROM e2b_sandboxes WHERE session_id = ?').get(sessionId) as Row | undefined;
    return row && { sessionId: row.session_id, tenant: row.tenant, templateId: row.template_id, envVars: JSON.parse(row.env_vars) as Record<string, string> };
  }

  /**
   * Another token for the sandbox (a connect: E2B hands its token out again, ours are kept only
   * as digests). The earlier ones stay valid, so a client still using one is not cut off; the
   * oldest go beyond MAX_TOKENS.
   */
  issue(sessionId: string): string | undefined {
    const row = this.db.prepare('SELECT hashes FROM e2b_sandboxes WHERE session_id = ?').get(sessionId) as Pick<Row, 'hashes'> | undefined;
    if (!row) return undefined;
    const { token, digest } = newSecretToken(KIND);
    const hashes = [...(JSON.parse(row.hashes) as string[]), digest.toString('hex')].slice(-MAX_TOKENS);
    this.db.prepare('UPDATE e2b_sandboxes SET hashes = ? WHERE session_id = ?').run(JSON.stringify(hashes), sessionId);
    return token;
  }

  /** Whether `token` is the sandbox's envd access token (in constant time once the row is found). */
  verify(sessionId: string, token: string): boolean {
    const parsed = parseSecretToken(KIND, token);
    const row = this.db.prepare('SELECT hashes FROM e2b_sandboxes WHERE session_id = ?').get(sessionId) as Pick<Row, 'hashes'> | undefined;
    if (parsed === undefined || row === undefined) return false;
    let match = false;
    for (const hex of JSON.parse(row.hashes) as string[]) match = secretMatches(Buffer.from(hex, 'hex'), parsed.secret) || match;
    return match;
  }

  /** Forgets the rows of sessions that no longer exist. */
  prune(live: (sessionId: string) => boolean): void {
    const ids = this.db.prepare('SELECT session_id FROM e2b_sandboxes').all() as Array<{ session_id: string }>;
    const drop = this.db.prepare('DELETE FROM e2b_sandboxes WHERE session_id = ?');
    for (const { session_id } of ids) if (!live(session_id)) drop.run(session_id);
  }
}
