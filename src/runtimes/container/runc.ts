import { existsSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import { spawn } from 'node:child_process';
import type { ResourceNames } from '../../network/names.js';
import { run } from '../../util/exec.js';
import { freezerLayout, isCgroupFrozen, thawCgroup } from '../../host/freezer.js';
import { consoleLogTail } from '../console-log.js';
import { withWriter, type ConsolePipe } from '../console-pipe.js';

/** `runc create` and `runc delete` as the container runtime calls them. */

/** Creates a container (not yet started); on failure, the error carries the end of its console log. */
export function runcCreate(runcBin: string, root: string, id: string, bundle: string, pidFile: string, consolePipe: ConsolePipe): Promise<void> {
  // The container inherits runc's stdout and stderr: both are the console FIFO, which the
  // orchestrator copies into the capped log for the container's whole life. runc's own error
  // message lands in the same log, and its end is read back from it on failure.
  return new Promise<void>((resolve, reject) => {
    const child = withWriter(consolePipe, (fd) =>
      spawn(runcBin, ['--root', root, 'create', '--bundle', bundle, '--pid-file', pidFile, id], { stdio: ['ignore', fd, fd] }),
    );
    child.on('error', reject);
    child.on('exit', (code) => {
      if (code === 0) return resolve();
      void consolePipe
        .quiet()
        .then(() => consoleLogTail(consolePipe.logPath, 20))
        .catch(() => '')
        .then((tail) => reject(new Error(`runc create ${id} failed (exit ${code}): ${tail.slice(-1500)}`)));
    });
  });
}

/** Kills and deletes a container; a container that does not exist is not an error. */
export async function deleteContainer(runcBin: string, root: string, id: string, cgroupPath?: string): Promise<void> {
  // A frozen (paused) container's tasks cannot die until thawed: thawed first, whatever runc does.
  const layout = freezerLayout();
  if (layout && cgroupPath && (await isCgroupFrozen(cgroupPath, layout))) await thawCgroup(cgroupPath, layout).catch(() => undefined);
  const res = await run([runcBin, '--root', root, 'delete', '--force', id], { allowFailure: true, timeoutMs: 15_000 });
  if (res.exitCode !== 0 && !/does not exist|not exist|container not found/i.test(res.stderr)) {
    throw new Error(`runc delete ${id}: ${res.stderr.trim()}`);
  }
}

/** Session ids of every container of ours runc has, or has left state of. */
export async function listContainers(runcBin: string, names: ResourceNames): Promise<string[]> {
  const ids = new Set<string>();
  const root = names.runcRoot;
  const res = await run([runcBin, '--root', root, 'list', '--format', 'json'], { allowFailure: true });
  if (res.exitCode === 0 && res.stdout.trim() && res.stdout.trim() !== 'null') {
    for (const c of JSON.parse(res.stdout) as Array<{ id: string }>) {
      const id = names.sessionIdOf(c.id);
      if (id) ids.add(id);
    }
  }
  // runc's state may be gone (e.g. /run was cleared) while its state dir entries linger.
  if (existsSync(root)) {
    for (const name of await readdir(root)) {
      const id = names.sessionIdOf(name);
      if (id) ids.add(id);
    }
  }
  return [...ids];
}
