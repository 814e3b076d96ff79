import { AuthenticationError } from '../../errors.js';
import { apiKeyId, apiKeyMatches } from './api-key.js';
import type { KeyStore } from './key-store.js';

/** Who a request acts for. */
export interface Identity {
  tenant: string;
  /** The API key's id (safe to log); undefined in keyless mode. */
  keyId: string | undefined;
}

const HOW_TO_GET_A_KEY = 'create one with `sbx keys create --tenant <name>`';

/** A digest no key hashes to: unknown ids are compared against it, so they cost the same. */
const NO_KEY_HASH = Buffer.alloc(32);

/**
 * Checks an Authorization header: `Bearer <key>`, a key that exists, matches its stored
 * hash, is not revoked and has not expired. Revoked and expired are only said to whoever
 * holds the real key; anything else is just "invalid".
 */
export function verifyAuthorization(header: string, keys: KeyStore, now = new Date()): Identity {
  const match = /^Bearer +(\S+) *$/i.exec(header);
  if (!match) {
    throw new AuthenticationError(`the Authorization header must be "Bearer <API key>"; ${HOW_TO_GET_A_KEY}`, 'invalid_api_key');
  }
  const key = match[1] as string;
  const id = apiKeyId(key);
  const record = id === undefined ? undefined : keys.find(id);
  const matches = apiKeyMatches(key, record?.hash ?? NO_KEY_HASH);
  if (!record || !matches) throw new AuthenticationError('invalid API key', 'invalid_api_key');
  if (record.revokedAt !== null) {
    throw new AuthenticationError(`API key ${record.id} was revoked at ${record.revokedAt}; ${HOW_TO_GET_A_KEY}`, 'revoked_api_key');
  }
  if (record.expiresAt !== null && Date.parse(record.expiresAt) <= now.getTime()) {
    throw new AuthenticationError(`API key ${record.id} expired at ${record.expiresAt}; ${HOW_TO_GET_A_KEY}`, 'expired_api_key');
  }
  return { tenant: record.tenant, keyId: record.id };
}

export function missingKeyError(): AuthenticationError {
  return new AuthenticationError(`an API key is required: send "Authorization: Bearer <key>"; ${HOW_TO_GET_A_KEY}`, 'missing_api_key');
}
