import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

/**
 * Tokens of the shape `<kind>_<12 id chars>_<43 secret chars>` (link and port tokens): the id
 * finds the row, the secret (256 bits) is kept only as a SHA-256 digest, so a copy of the
 * database opens nothing. Each kind has its own prefix and table, so a token of one kind is
 * never read as another.
 */
export interface NewSecretToken {
  id: string;
  /** What the client is given, once. */
  token: string;
  /** What is kept. */
  digest: Buffer;
}

export function newSecretToken(kind: string): NewSecretToken {
  const id = randomBytes(9).toString('base64url');
  const secret = randomBytes(32).toString('base64url');
  return { id, token: `${kind}_${id}_${secret}`, digest: digestOf(secret) };
}

/** The id and secret of a token of this kind, or undefined for anything else. */
export function parseSecretToken(kind: string, token: string): { id: string; secret: string } | undefined {
  const match = /^([a-z]+)_([A-Za-z0-9_-]{12})_([A-Za-z0-9_-]{43})$/.exec(token);
  if (!match || match[1] !== kind) return undefined;
  return { id: match[2] as string, secret: match[3] as string };
}

/** Whether `secret` is the one whose digest was kept (in constant time). */
export function secretMatches(kept: Buffer, secret: string): boolean {
  const given = digestOf(secret);
  return kept.length === given.length && timingSafeEqual(kept, given);
}

function digestOf(secret: string): Buffer {
  return createHash('sha256').update(secret).digest();
}
