import type { Env } from '../util/env.js';

/** Largest file moved in either direction unless SBX_MAX_FILE_BYTES says otherwise. */
export const DEFAULT_MAX_FILE_BYTES = 100 * 1024 * 1024;

/**
 * The file size limit from the environment (SBX_MAX_FILE_BYTES, a whole number of bytes),
 * read once with the rest of the configuration. A bad value fails the start, not a request.
 */
export function maxFileBytesFrom(env: Env): number {
  const raw = env.SBX_MAX_FILE_BYTES;
  if (raw === undefined || raw === '') return DEFAULT_MAX_FILE_BYTES;
  const value = Number(raw);
  if (!/^\d+$/.test(raw) || !Number.isSafeInteger(value) || value < 1) {
    throw new Error(`SBX_MAX_FILE_BYTES must be a positive whole number of bytes, got "${raw}"`);
  }
  return value;
}
