import { existsSync, readFileSync } from 'node:fs';

/**
 * Whether runc can throttle a sandbox's block I/O here: cgroup v2 with the io controller
 * enabled at the root, or cgroup v1 with blkio's throttle files. Otherwise the reason.
 */
export function blockIoAvailable(): true | string {
  const unified = '/sys/fs/cgroup/cgroup.controllers';
  if (existsSync(unified)) {
    return readFileSync(unified, 'utf8').split(/\s+/).includes('io') ? true : 'cgroup v2 without the io controller';
  }
  if (existsSync('/sys/fs/cgroup/blkio/blkio.throttle.read_bps_device')) return true;
  return 'neither cgroup v2 io nor cgroup v1 blkio throttling is mounted';
}

/** major:minor of a device number as stat() gives it (Linux's encoding of dev_t). */
export function deviceNumbers(dev: bigint): { major: number; minor: number } {
  const major = Number(((dev >> 8n) & 0xfffn) | ((dev >> 32n) & ~0xfffn));
  const minor = Number((dev & 0xffn) | ((dev >> 12n) & ~0xffn));
  return { major, minor };
}
