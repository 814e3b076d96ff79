import { existsSync } from 'node:fs';
import { readdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { CGROUP_ROOT } from './cgroups.js';

/**
 * The cgroup freezer, written directly: a frozen cgroup's tasks get no CPU at all and keep
 * their memory, and a thaw lets them run on where they stopped. runc's own `pause` does the
 * same writes (its `state` then says "paused"), but costs a Go process start per call: the
 * file write is a fraction of a millisecond.
 *
 * cgroup v1 (this host's hybrid layout): <root>/freezer/<path>/freezer.state, FROZEN or
 * THAWED; a freeze passes through FREEZING while the kernel stops every task. cgroup v2:
 * <root>/<path>/cgroup.freeze (1 or 0), done once cgroup.events says `frozen 1`.
 */
export type FreezerLayout = 'v1' | 'v2';

const FREEZE_TIMEOUT_MS = 5_000;

export function freezerLayout(root = CGROUP_ROOT): FreezerLayout | undefined {
  if (existsSync(path.join(root, 'freezer'))) return 'v1';
  if (existsSync(path.join(root, 'cgroup.controllers'))) return 'v2';
  return undefined;
}

/** Freezes every task of the cgroup at `cgroupPath` (as runc names it: /prefix/name) and waits until all are. */
export async function freezeCgroup(cgroupPath: string, layout: FreezerLayout, root = CGROUP_ROOT): Promise<void> {
  const deadline = Date.now() + FREEZE_TIMEOUT_MS;
  if (layout === 'v1') {
    const file = path.join(root, 'freezer', cgroupPath, 'freezer.state');
    for (;;) {
      // Written again while FREEZING: a task forked meanwhile is caught by the next write.
      await writeFile(file, 'FROZEN');
      if ((await readFile(file, 'utf8')).trim() === 'FROZEN') return;
      if (Date.now() > deadline) break;
      await sleep(1);
    }
  } else {
    const dir = path.join(root, cgroupPath);
    await writeFile(path.join(dir, 'cgroup.freeze'), '1');
    for (;;) {
      if (/^frozen 1$/m.test(await readFile(path.join(dir, 'cgroup.events'), 'utf8'))) return;
      if (Date.now() > deadline) break;
      await sleep(1);
    }
  }
  // Not all of it stopped: leave it running rather than half frozen.
  await thawCgroup(cgroupPath, layout, root).catch(() => undefined);
  throw new Error(`the cgroup ${cgroupPath} did not freeze within ${FREEZE_TIMEOUT_MS} ms`);
}

export async function thawCgroup(cgroupPath: string, layout: FreezerLayout, root = CGROUP_ROOT): Promise<void> {
  if (layout === 'v1') await writeFile(path.join(root, 'freezer', cgroupPath, 'freezer.state'), 'THAWED');
  else await writeFile(path.join(root, cgroupPath, 'cgroup.freeze'), '0');
}

/** True when the cgroup is frozen (or freezing); false when it runs or does not exist. */
export async function isCgroupFrozen(cgroupPath: string, layout: FreezerLayout, root = CGROUP_ROOT): Promise<boolean> {
  try {
    if (layout === 'v1') return (await readFile(path.join(root, 'freezer', cgroupPath, 'freezer.state'), 'utf8')).trim() !== 'THAWED';
    return (await readFile(path.join(root, cgroupPath, 'cgroup.freeze'), 'utf8')).trim() === '1';
  } catch {
    return false;
  }
}

/** A cgroup's tasks file is a list of ids; anything longer than this is not one of ours (pids.max bounds it far below). */
const MAX_TASKS_FILE_BYTES = 1024 * 1024;
/** A sandbox's cgroup has none below it (its guest has no cgroupfs of its own): a bound, not a budget. */
const MAX_CGROUP_DIRS = 64;

/**
 * Every thread of the cgroup at `cgroupPath` and of the cgroups below it, by the host's ids:
 * the set criu seizes at a dump. Read while it is frozen, the list is of one moment.
 */
export async function cgroupThreads(cgroupPath: string, layout: FreezerLayout, root = CGROUP_ROOT): Promise<number[]> {
  const top = layout === 'v1' ? path.join(root, 'freezer', cgroupPath) : path.join(root, cgroupPath);
  const list = layout === 'v1' ? 'tasks' : 'cgroup.threads';
  const threads: number[] = [];
  const dirs = [top];
  let walked = 0;
  for (let dir = dirs.pop(); dir !== undefined; dir = dirs.pop()) {
    if (++walked > MAX_CGROUP_DIRS) throw new Error(`the cgroup ${cgroupPath} has more than ${MAX_CGROUP_DIRS} cgroups below it`);
    const text = await readFile(path.join(dir, list), 'utf8').catch(() => '');
    if (text.length > MAX_TASKS_FILE_BYTES) throw new Error(`the cgroup ${dir} lists more tasks than any sandbox may have`);
    for (const id of text.split('\n')) if (/^\d+$/.test(id)) threads.push(Number(id));
    for (const entry of await readdir(dir, { withFileTypes: true }).catch(() => [])) if (entry.isDirectory()) dirs.push(path.join(dir, entry.name));
  }
  return threads;
}
