import { InvalidRequestError, OrchestratorError } from '../errors.js';
import { MAX_VOLUMES_PER_SESSION, type VolumeSettings } from './settings.js';

/**
 * What a client may name, and where a volume may appear in a guest. A name is never a path
 * (it names a file under the state dir only through a tenant's own directory, volume-files.ts),
 * and a guest path is absolute, clean and outside the directories the guest's system lives in.
 */
export const VOLUME_NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$/;

/** Top-level guest directories a volume may not cover or sit in (the system, the kernel's file systems, the config). */
const RESERVED_TOP = new Set(['bin', 'boot', 'dev', 'etc', 'lib', 'lib32', 'lib64', 'libx32', 'proc', 'run', 'sandbox', 'sbin', 'sys', 'usr', 'var']);
const SEGMENT = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/;

/** A volume mounted into a session, as asked at create (and stored with the session). */
export interface VolumeMount {
  name: string;
  /** Absolute path in the guest. */
  path: string;
  readOnly: boolean;
}

/** A 400 naming the field, unless `name` is a volume name. */
export function checkVolumeName(name: unknown, field = 'name'): string {
  if (typeof name !== 'string' || !VOLUME_NAME_PATTERN.test(name)) {
    throw new InvalidRequestError(`${field}: a volume name is 1-63 letters, digits, '-' or '_', starting with a letter or digit (got ${JSON.stringify(name)})`);
  }
  return name;
}

/** A 400 unless `sizeMiB` is a whole number within the bounds. */
export function checkVolumeSize(sizeMiB: unknown, settings: VolumeSettings): number {
  if (typeof sizeMiB !== 'number' || !Number.isInteger(sizeMiB) || sizeMiB < settings.minMiB || sizeMiB > settings.maxMiB) {
    throw new InvalidRequestError(
      `sizeMiB: a whole number of MiB from ${settings.minMiB} to ${settings.maxMiB} (SBX_VOLUME_MAX_MIB) (got ${JSON.stringify(sizeMiB)})`,
    );
  }
  return sizeMiB;
}

/** A 400 naming the field unless `path` is an absolute, clean guest path outside the system's directories. */
export function checkGuestPath(path: unknown, field: string): string {
  const fail = (why: string): never => {
    throw new InvalidRequestError(`${field}: ${why} (got ${JSON.stringify(path)})`);
  };
  if (typeof path !== 'string' || !path.startsWith('/')) return fail('an absolute guest path is expected');
  if (path.length > 256) return fail('at most 256 characters');
  const segments = path.slice(1).split('/');
  if (segments.length === 0 || segments[0] === '') return fail('a volume cannot be mounted at /');
  for (const segment of segments) {
    if (segment === '.' || segment === '..' || !SEGMENT.test(segment)) return fail('each part is letters, digits, ".", "-" or "_" (no "..", no empty part)');
  }
  if (RESERVED_TOP.has(segments[0]!)) return fail(`/${segments[0]} holds the guest's system: mount volumes elsewhere (e.g. /mnt, /data, /home/user)`);
  return '/' + segments.join('/');
}

/** The create request's `volumes`, checked whole before anything is taken. */
export function checkVolumeMounts(mounts: unknown): VolumeMount[] {
  if (mounts === undefined) return [];
  if (!Array.isArray(mounts)) throw new InvalidRequestError('volumes: an array of {name, path, readOnly?} is expected');
  if (mounts.length > MAX_VOLUMES_PER_SESSION) throw new InvalidRequestError(`volumes: at most ${MAX_VOLUMES_PER_SESSION} per session`);
  const names = new Set<string>();
  const paths: string[] = [];
  return mounts.map((m: unknown, i) => {
    if (typeof m !== 'object' || m === null) throw new InvalidRequestError(`volumes[${i}]: an object {name, path, readOnly?} is expected`);
    const { name, path, readOnly } = m as Record<string, unknown>;
    const checked = checkVolumeName(name, `volumes[${i}].name`);
    const at = checkGuestPath(path, `volumes[${i}].path`);
    if (readOnly !== undefined && typeof readOnly !== 'boolean') throw new InvalidRequestError(`volumes[${i}].readOnly: a boolean is expected`);
    if (names.has(checked)) throw new InvalidRequestError(`volumes[${i}].name: volume ${checked} is named twice`);
    // One inside another would hide it, or be made inside a volume the guest may write.
    const clash = paths.find((p) => p === at || p.startsWith(at + '/') || at.startsWith(p + '/'));
    if (clash) throw new InvalidRequestError(`volumes[${i}].path: ${at} overlaps ${clash}`);
    names.add(checked);
    paths.push(at);
    return { name: checked, path: at, readOnly: readOnly === true };
  });
}

/** 413 volume_quota_exceeded naming the quota, if one more volume of `sizeMiB` would pass it. */
export function checkVolumeQuota(existing: ReadonlyArray<{ sizeMiB: number }>, sizeMiB: number, settings: VolumeSettings): void {
  checkVolumeTotals(
    existing.length,
    existing.reduce((sum, v) => sum + v.sizeMiB, 0),
    sizeMiB,
    settings,
  );
}

/** The same, from the tenant's count and MiB of volumes (a cluster's directory counts them: cluster/gateway/volume-routes.ts). */
export function checkVolumeTotals(count: number, usedMiB: number, sizeMiB: number, settings: VolumeSettings): void {
  if (count + 1 > settings.quotaCount) {
    throw new OrchestratorError('volume_quota_exceeded', `the tenant has ${count} volumes, its quota SBX_VOLUME_QUOTA_COUNT (${settings.quotaCount})`);
  }
  if (usedMiB + sizeMiB > settings.quotaMiB) {
    throw new OrchestratorError(
      'volume_quota_exceeded',
      `${sizeMiB} MiB more would make the tenant's volumes ${usedMiB + sizeMiB} MiB, over its quota SBX_VOLUME_QUOTA_MIB (${settings.quotaMiB} MiB)`,
    );
  }
}
