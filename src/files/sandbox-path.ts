import path from 'node:path';
import { InvalidRequestError } from '../errors.js';

/** Linux's PATH_MAX: longer paths cannot name a file in the guest anyway. */
export const MAX_PATH_LENGTH = 4096;

/**
 * Checks and normalises a path inside the sandbox. It must be absolute (the guest user's
 * working directory is nobody's business over HTTP) and free of NUL. `..` and `.` are
 * resolved rather than rejected: the path is in the sandbox's own filesystem and is used as
 * the unprivileged guest user, so climbing out of a directory reaches nothing that user
 * could not name directly. Trailing slashes are dropped.
 */
export function sandboxPath(raw: string, field = 'path'): string {
  if (raw.length === 0) throw new InvalidRequestError(`${field} must not be empty`);
  if (raw.includes('\0')) throw new InvalidRequestError(`${field} must not contain a NUL character`);
  if (!raw.startsWith('/')) throw new InvalidRequestError(`${field} must be an absolute path (start with /), got "${raw}"`);
  if (raw.length > MAX_PATH_LENGTH) throw new InvalidRequestError(`${field} must be at most ${MAX_PATH_LENGTH} characters`);
  const normal = path.posix.normalize(raw);
  return normal.length > 1 && normal.endsWith('/') ? normal.slice(0, -1) : normal;
}
