import { readFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { run } from '../util/exec.js';

// Host mount helpers shared by the container runtime (its overlay rootfs) and the session
// layer's ledger (which unmounts what a crashed run left mounted).

/** Unmounts, retrying briefly while the last processes let go; idempotent. */
export async function unmount(target: string): Promise<void> {
  for (let attempt = 0; attempt < 20; attempt++) {
    const res = await run(['umount', target], { allowFailure: true });
    if (res.exitCode === 0 || /not mounted|no mount point|No such file/i.test(res.stderr)) return;
    if (!/busy/i.test(res.stderr)) throw new Error(`umount ${target}: ${res.stderr.trim()}`);
    await sleep(50);
  }
  // Still busy after a second: detach it now so the directory can go; the kernel frees it
  // when the last user is gone.
  await run(['umount', '--lazy', target]);
}

/** Mount points at or below `dir`, deepest first (for reclaiming after a crash). */
export async function mountsUnder(dir: string): Promise<string[]> {
  const prefix = dir.endsWith('/') ? dir : dir + '/';
  return (await readFile('/proc/self/mountinfo', 'utf8'))
    .split('\n')
    .map((line) => decodeMountPath(line.split(' ')[4] ?? ''))
    .filter((target) => target === dir || target.startsWith(prefix))
    .sort((a, b) => b.length - a.length);
}

/** mountinfo escapes space, tab, newline and backslash as octal (\040 ...). */
function decodeMountPath(field: string): string {
  return field.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(parseInt(octal, 8)));
}
