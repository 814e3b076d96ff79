import { readdir, readFile, realpath, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { execLogged, isErrnoCode } from './build-exec.js';

// The image build's directories: stale builds of dead processes removed, and a removal that
// never follows a mount out of the tree.

/**
 * Removes .build-* and .old-* directories left by processes that no longer run (a crash or
 * kill -9 in the middle of a build).
 */
export async function removeStaleBuilds(imagesDir: string, progress: (line: string) => void): Promise<void> {
  for (const name of await readdir(imagesDir)) {
    const match = /^\.(?:build|old)-[0-9a-f]+-(\d+)$/.exec(name);
    if (!match) continue;
    const pid = Number(match[1]);
    if (pid === process.pid || isProcessAlive(pid)) continue;
    progress(`removing stale build directory ${name} (process ${pid} is gone)`);
    await removeTree(join(imagesDir, name));
  }
}

function isProcessAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return isErrnoCode(error, 'EPERM');
  }
}

/**
 * rm -rf that never reaches outside the tree: a debootstrap killed half-way leaves /proc,
 * /sys (and sometimes /dev) of the host mounted inside the target, and a plain recursive
 * delete would walk into them. Unmount everything below first, and refuse if that fails.
 */
export async function removeTree(path: string): Promise<void> {
  // mountinfo has canonical paths: compare with the real one.
  const dir = await realpath(path).catch(() => path);
  const mounted = await mountsBelow(dir);
  // Deepest first, so that nested mounts come off before their parents.
  for (const mountPoint of mounted.sort((a, b) => b.length - a.length)) {
    await execLogged('umount', ['--lazy', mountPoint], {}).catch(() => {});
  }
  const left = await mountsBelow(dir);
  if (left.length > 0) throw new Error(`cannot remove ${dir}: still mounted: ${left.join(', ')}`);
  await rm(dir, { recursive: true, force: true });
}

async function mountsBelow(dir: string): Promise<string[]> {
  const mountInfo = await readFile('/proc/self/mountinfo', 'utf8');
  const below: string[] = [];
  for (const line of mountInfo.split('\n')) {
    const field = line.split(' ')[4];
    if (!field) continue;
    // mountinfo escapes space, tab, newline and backslash as octal.
    const mountPoint = field.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(parseInt(octal, 8)));
    if (mountPoint === dir || mountPoint.startsWith(`${dir}/`)) below.push(mountPoint);
  }
  return below;
}
