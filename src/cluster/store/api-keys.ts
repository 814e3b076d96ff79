/**
 * Tenants' API keys in PostgreSQL: the single host's record (api/auth/key-store.ts) and its
 * rules (only the SHA-256 of a key is stored; revoking twice keeps the first date), so a key
 * made with `sbx keys create --db` works through any gateway. Dates are timestamptz here and
 * ISO strings in the record, as in SQLite.
 */
import type { ApiKeyRecord } from '../../api/auth/key-store.js';
import type { Db } from './db.js';

interface KeyRow {
  id: string;
  tenant: string;
  hash: Buffer;
  created_at: Date;
  expires_at: Date | null;
  revoked_at: Date | null;
}

function recordOf(row: KeyRow): ApiKeyRecord {
  return {
    id: row.id,
    tenant: row.tenant,
    hash: row.hash,
    createdAt: row.created_at.toISOString(),
    expiresAt: row.expires_at ? row.expires_at.toISOString() : null,
    revokedAt: row.revoked_at ? row.revoked_at.toISOString() : null,
  };
}

export class Keys {
  constructor(private readonly db: Db) {}

  async create(record: ApiKeyRecord): Promise<void> {
    await this.db.query('creating an API key', 'INSERT INTO api_keys (id, tenant, hash, created_at, expires_at, revoked_at) VALUES ($1, $2, $3, $4, $5, $6)', [
      record.id,
      record.tenant,
      record.hash,
      record.createdAt,
      record.expiresAt,
      record.revokedAt,
    ]);
  }

  async find(id: string): Promise<ApiKeyRecord | undefined> {
    const row = (await this.db.query<KeyRow>('reading an API key', 'SELECT * FROM api_keys WHERE id = $1', [id])).rows[0];
    return row && recordOf(row);
  }

  async list(tenant?: string): Promise<ApiKeyRecord[]> {
    const result =
      tenant === undefined
        ? await this.db.query<KeyRow>('listing API keys', 'SELECT * FROM api_keys ORDER BY created_at, id')
        : await this.db.query<KeyRow>('listing API keys', 'SELECT * FROM api_keys WHERE tenant = $1 ORDER BY created_at, id', [tenant]);
    return result.rows.map(recordOf);
  }

  /** False when there is no such key; revoking again keeps the first date. */
  async revoke(id: string, now = new Date()): Promise<boolean> {
    const result = await this.db.query('revoking an API key', 'UPDATE api_keys SET revoked_at = coalesce(revoked_at, $2) WHERE id = $1', [id, now]);
    return result.rowCount === 1;
  }
}
