import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { SessionStore } from '../../sessions/store.js';
import { KeyStore } from './key-store.js';

/**
 * The key table of an orchestrator's state dir, for `sbx keys` (which may run while the
 * server does: SQLite in WAL mode lets both use the file, and the server reads keys per
 * request, so a new or revoked key counts at once). Close it when done.
 */
export function openKeyStore(stateDir: string): { keys: KeyStore; close(): void } {
  mkdirSync(stateDir, { recursive: true, mode: 0o700 });
  const store = new SessionStore(path.join(stateDir, 'orchestrator.db'));
  return { keys: new KeyStore(store.database), close: () => store.close() };
}
