import { createHash, randomBytes, randomInt, timingSafeEqual } from 'node:crypto';

/**
 * The API key format: `sbx_<id>_<secret>`. The id (12 of [a-z0-9]) is not secret: it names
 * the key in `sbx keys list`, in logs and in the store, where the key is found by it. The
 * secret is 32 random bytes (base64url, 43 characters).
 *
 * Only SHA-256 of the whole key is stored. A slow password hash (scrypt, argon2) protects
 * secrets people choose, which are guessable; a 256-bit random secret is not, so a fast
 * hash loses nothing, and it keeps the check to microseconds on every request (a slow hash
 * would cost ~50 ms of CPU per action and hand anyone with a bad key a cheap way to load
 * the host).
 */
const ID_ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789';
const ID_LENGTH = 12;
const KEY_PATTERN = /^sbx_([a-z0-9]{12})_([A-Za-z0-9_-]{43})$/;

export interface NewApiKey {
  id: string;
  /** The key itself: shown to the operator once, never stored. */
  key: string;
  hash: Buffer;
}

export function generateApiKey(): NewApiKey {
  let id = '';
  for (let i = 0; i < ID_LENGTH; i++) id += ID_ALPHABET[randomInt(ID_ALPHABET.length)];
  const key = `sbx_${id}_${randomBytes(32).toString('base64url')}`;
  return { id, key, hash: hashApiKey(key) };
}

export function hashApiKey(key: string): Buffer {
  return createHash('sha256').update(key, 'utf8').digest();
}

/** The key id of a well-formed key, or undefined for anything else. */
export function apiKeyId(key: string): string | undefined {
  return KEY_PATTERN.exec(key)?.[1];
}

/**
 * Does `key` hash to `storedHash`? In constant time: both sides are 32-byte digests, so
 * timingSafeEqual never sees different lengths, and the time taken says nothing about how
 * much of the key was right.
 */
export function apiKeyMatches(key: string, storedHash: Buffer): boolean {
  const presented = hashApiKey(key);
  if (storedHash.length !== presented.length) return false; // a corrupt row: no key matches it
  return timingSafeEqual(presented, storedHash);
}
