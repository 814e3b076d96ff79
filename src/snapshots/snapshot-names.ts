import { randomInt } from 'node:crypto';
import { InvalidRequestError, OrchestratorError } from '../errors.js';
import type { SnapshotSettings } from './settings.js';

/**
 * What names a snapshot. Its id is ours ("snap-" and 16 letters or digits): the only thing
 * its files' directory is named by, and checked before any lookup. Its name is the client's,
 * a label only (never a path): letters, digits, '-', '_' and '.', not starting with a dot.
 */
export const SNAPSHOT_ID_PATTERN = /^snap-[a-z0-9]{16}$/;
export const SNAPSHOT_NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$/;

const ID_ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789';

export function newSnapshotId(): string {
  let id = 'snap-';
  for (let i = 0; i < 16; i++) id += ID_ALPHABET[randomInt(ID_ALPHABET.length)];
  return id;
}

/** The name asked for (null: none), or a 400 naming the field. */
export function checkSnapshotName(name: unknown): string | null {
  if (name === undefined || name === null) return null;
  if (typeof name !== 'string' || !SNAPSHOT_NAME_PATTERN.test(name)) {
    throw new InvalidRequestError(
      `name: a snapshot name is 1-63 letters, digits, '-', '_' or '.', starting with a letter or digit (got ${JSON.stringify(name)})`,
    );
  }
  return name;
}

/** A 400 naming the field unless `id` is a snapshot id (checked before it is looked up). */
export function checkSnapshotId(id: unknown, field = 'snapshot'): string {
  if (typeof id !== 'string' || !SNAPSHOT_ID_PATTERN.test(id)) {
    throw new InvalidRequestError(`${field}: a snapshot id looks like snap-0123456789abcdef (got ${JSON.stringify(id)})`);
  }
  return id;
}

/** 409 snapshot_quota_exceeded naming the quota, if the tenant may not start one more snapshot. */
export function checkSnapshotRoom(existing: ReadonlyArray<{ bytes: number }>, settings: SnapshotSettings): void {
  if (existing.length + 1 > settings.quotaCount) {
    throw new OrchestratorError(
      'snapshot_quota_exceeded',
      `the tenant has ${existing.length} snapshots, its quota SBX_SNAPSHOT_QUOTA_COUNT (${settings.quotaCount}): delete one first`,
    );
  }
  const used = existing.reduce((sum, s) => sum + s.bytes, 0);
  if (used >= settings.quotaMiB * 2 ** 20) {
    throw new OrchestratorError(
      'snapshot_quota_exceeded',
      `the tenant's snapshots hold ${mib(used)} MiB, its quota SBX_SNAPSHOT_QUOTA_MIB (${settings.quotaMiB} MiB): delete one first`,
    );
  }
}

/** 413 snapshot_too_large naming the quota, if a snapshot of `bytes` (just saved) takes the tenant past it. */
export function checkSnapshotSize(others: ReadonlyArray<{ bytes: number }>, bytes: number, settings: SnapshotSettings): void {
  const used = others.reduce((sum, s) => sum + s.bytes, 0);
  if (used + bytes > settings.quotaMiB * 2 ** 20) {
    throw new OrchestratorError(
      'snapshot_too_large',
      `the snapshot holds ${mib(bytes)} MiB, which would make the tenant's snapshots ${mib(used + bytes)} MiB, over its quota SBX_SNAPSHOT_QUOTA_MIB (${settings.quotaMiB} MiB); it was not kept`,
    );
  }
}

function mib(bytes: number): number {
  return Math.ceil(bytes / 2 ** 20);
}
