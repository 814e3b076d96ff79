import type Database from 'better-sqlite3';
import { InvalidRequestError, NotFoundError } from '../../errors.js';
import { LOCAL_TENANT } from '../../sessions/session-record.js';
import { generateApiKey } from './api-key.js';

/** A stored API key, as `sbx keys list` shows it (never the key itself). */
export interface ApiKeyRecord {
  id: string;
  tenant: string;
  /** SHA-256 of the key. */
  hash: Buffer;
  createdAt: string;
  expiresAt: string | null;
  revokedAt: string | null;
}

interface Row {
  id: string;
  tenant: string;
  hash: Buffer;
  created_at: string;
  expires_at: string | null;
  revoked_at: string | null;
}

/** Tenant names end up in logs, metrics labels and the CLI: keep them plain. */
export const TENANT_PATTERN = /^[a-z0-9][a-z0-9_.-]{0,62}$/;

/**
 * A new key for `tenant` and its record (the key is the only copy there will ever be): the
 * single host's store and a cluster's (`sbx keys --db`) make keys alike.
 */
export function newApiKeyRecord(tenant: string, expiresAt?: Date, now = new Date()): { record: ApiKeyRecord; key: string } {
  if (!TENANT_PATTERN.test(tenant)) {
    throw new InvalidRequestError(`tenant must be 1 to 63 of a-z, 0-9, ".", "_", "-" (starting with a letter or digit), got "${tenant}"`);
  }
  if (tenant === LOCAL_TENANT) {
    // Keyless sessions are "local"'s: a key for it would reach every session made without one.
    throw new InvalidRequestError(`tenant "${LOCAL_TENANT}" is reserved for sessions made without a key; choose another name`);
  }
  const made = generateApiKey();
  const record: ApiKeyRecord = {
    id: made.id,
    tenant,
    hash: made.hash,
    createdAt: now.toISOString(),
    expiresAt: expiresAt ? expiresAt.toISOString() : null,
    revokedAt: null,
  };
  return { record, key: made.key };
}

/**
 * The api_keys table (created with the sessions table, src/sessions/store.ts). Every
 * request reads the key's row afresh, so a key created or revoked with the CLI while the
 * server runs takes effect at once, with no cache to go stale.
 */
export class KeyStore {
  constructor(private readonly db: Database.Database) {}

  /** Makes a key for `tenant`; the returned key is the only copy there will ever be. */
  create(tenant: string, expiresAt?: Date, now = new Date()): { record: ApiKeyRecord; key: string } {
    const { record, key } = newApiKeyRecord(tenant, expiresAt, now);
    this.db
      .prepare('INSERT INTO api_keys (id, tenant, hash, created_at, expires_at, revoked_at) VALUES (?, ?, ?, ?, ?, NULL)')
      .run(record.id, record.tenant, record.hash, record.createdAt, record.expiresAt);
    return { record, key };
  }

  find(id: string): ApiKeyRecord | undefined {
    const row = this.db.prepare('SELECT * FROM api_keys WHERE id = ?').get(id) as Row | undefined;
    return row && fromRow(row);
  }

  list(): ApiKeyRecord[] {
    return (this.db.prepare('SELECT * FROM api_keys ORDER BY created_at, id').all() as Row[]).map(fromRow);
  }

  /** Revokes a key for good. Revoking it again changes nothing (the first date stays). */
  revoke(id: string, now = new Date()): ApiKeyRecord {
    this.db.prepare('UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL').run(now.toISOString(), id);
    const record = this.find(id);
    if (!record) throw new NotFoundError(`no API key with id "${id}" (see \`sbx keys list\`)`);
    return record;
  }

  /** Is there a key that is not revoked (expired ones count): could anyone use the server? */
  hasUnrevokedKeys(): boolean {
    return this.db.prepare('SELECT 1 FROM api_keys WHERE revoked_at IS NULL LIMIT 1').get() !== undefined;
  }

  /**
   * Has any key ever been made here (revoked and expired ones count)? Once one has, a
   * loopback server in `auto` mode requires keys for good: revoking the last key must not
   * quietly reopen the API to anyone on the machine (see key-requirement.ts).
   */
  hasAnyKey(): boolean {
    return this.db.prepare('SELECT 1 FROM api_keys LIMIT 1').get() !== undefined;
  }

  /**
   * Forgets every key, revoked or not (`sbx keys reset --yes`): the deliberate way back to
   * keyless local development. A server already running keeps requiring keys until it is
   * restarted. Returns how many keys were deleted.
   */
  deleteAll(): number {
    return this.db.prepare('DELETE FROM api_keys').run().changes;
  }
}

function fromRow(row: Row): ApiKeyRecord {
  return {
    id: row.id,
    tenant: row.tenant,
    hash: row.hash,
    createdAt: row.created_at,
    expiresAt: row.expires_at,
    revokedAt: row.revoked_at,
  };
}
