import { AuthenticationError } from '../../errors.js';
import { apiKeyId, apiKeyMatches } from './api-key.js';
import type { ApiKeyRecord, KeyStore } from './key-store.js';

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
export function verifyAuthorization(header: string, keys: Pick<KeyStore, 'find'>, now = new Date()): Identity {
  const presented = parseAuthorization(header);
  return checkKeyRecord(presented, presented.id === undefined ? undefined : keys.find(presented.id), now);
}

/** A key as presented: the key, and its id when it is well-formed (the id its record is found by). */
export interface PresentedKey {
  key: string;
  id: string | undefined;
}

/**
 * The first half of the check, before the record is read (a cluster's gateway reads it from
 * PostgreSQL, asynchronously): the header's shape, and the key id to look up.
 */
export function parseAuthorization(header: string): PresentedKey {
  const match = /^Bearer +(\S+) *$/i.exec(header);
  if (!match) {
    throw new AuthenticationError(`the Authorization header must be "Bearer <API key>"; ${HOW_TO_GET_A_KEY}`, 'invalid_api_key');
  }
  const key = match[1] as string;
  return { key, id: apiKeyId(key) };
}

/** The second half: the presented key against the record found by its id (undefined: none). */
export function checkKeyRecord(presented: PresentedKey, record: ApiKeyRecord | undefined, now = new Date()): Identity {
  const matches = apiKeyMatches(presented.key, record?.hash ?? NO_KEY_HASH);
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
