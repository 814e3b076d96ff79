import { mkdir } from 'node:fs/promises';
import { run } from '../../util/exec.js';

/**
 * Mounts a writable overlay of the read-only image rootfs: the image is shared by every
 * sandbox, each session's writes land in its own upper dir and vanish with it.
 */
export async function mountOverlay(lower: string, upper: string, work: string, target: string): Promise<void> {
  await Promise.all([upper, work, target].map((dir) => mkdir(dir, { recursive: true, mode: 0o755 })));
  await run(['mount', '-t', 'overlay', 'overlay', '-o', `lowerdir=${lower},upperdir=${upper},workdir=${work}`, target]);
}
