import { readFile, realpath } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { run } from '../util/exec.js';

// Host mount helpers shared by the container runtime (its overlay rootfs) and the session
// layer's ledger (which unmounts what a crashed run left mounted).

/** How long a busy mount is retried before it is reported as not unmountable. */
const BUSY_RETRY_MS = 2_000;
const BUSY_RETRY_STEP_MS = 50;

/**
 * Unmounts, retrying for a moment while the last processes let go; idempotent. A mount that
 * stays busy (a host process has its cwd or a file open in it) is NOT detached lazily: a
 * detached mount vanishes from the mount table while still alive, so nothing could tell
 * that the directory above it still reaches into it. It throws instead, and the mount stays
 * where it is, visible, for a later attempt (removeTreeOnOneMount refuses the directory meanwhile).
 */
export async function unmount(target: string): Promise<void> {
  const deadline = Date.now() + BUSY_RETRY_MS;
  for (;;) {
    const res = await run(['umount', target], { allowFailure: true });
    if (res.exitCode === 0 || /not mounted|no mount point|No such file/i.test(res.stderr)) return;
    if (!/busy/i.test(res.stderr) || Date.now() >= deadline) throw new Error(`umount ${target}: ${res.stderr.trim()}`);
    await sleep(BUSY_RETRY_STEP_MS);
  }
}

/** Unmounts every target (in the order given), each tried even if another fails; throws the failures joined. */
export async function unmountAll(targets: readonly string[]): Promise<void> {
  const errors: string[] = [];
  for (const target of targets) {
    await unmount(target).catch((err: unknown) => errors.push(err instanceof Error ? err.message : String(err)));
  }
  if (errors.length > 0) throw new Error(errors.join('; '));
}

/** Mount points at or below `dir`, deepest first (for reclaiming after a crash). */
export async function mountsUnder(dir: string): Promise<string[]> {
  // mountinfo names canonical paths: a state dir reached through a symlink is compared as what it is.
  const real = await realpath(dir).catch(() => dir);
  const prefix = real.endsWith('/') ? real : real + '/';
  return (await readFile('/proc/self/mountinfo', 'utf8'))
    .split('\n')
    .map((line) => decodeMountPath(line.split(' ')[4] ?? ''))
    .filter((target) => target === real || target.startsWith(prefix))
    .sort((a, b) => b.length - a.length);
}

/** mountinfo escapes space, tab, newline and backslash as octal (\040 ...). */
function decodeMountPath(field: string): string {
  return field.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(parseInt(octal, 8)));
}
