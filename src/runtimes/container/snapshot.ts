import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { FreezerLayout } from '../../host/freezer.js';
import { run } from '../../util/exec.js';
import type { PauseTarget } from '../runtime.js';
import { dumpContainer, type CheckpointDeps } from './criu-run.js';
import type { IdRange } from './idmapped-mount.js';
import { mountPointsOf, readMounts } from './remount.js';

/**
 * A snapshot of a running container (docs/snapshots.md#containers), for forks (fork.ts): its
 * cgroup frozen, so that its memory and its disk are of one moment; its processes dumped by
 * criu with `--leave-running` into <dir>/checkpoint; its disk layer written out and copied
 * (sparse) into <dir>/layer.ext4; then thawed: it runs on, stopped for the dump and the copy.
 * <dir>/container.json says what a fork needs beside them: the console FIFO's name in the
 * images, the source's host id range (its disk's files are owned by ids of it), its image.
 */

const RECORD = 'container.json';

export interface ContainerSnapshot {
  consoleKey: string;
  ids: IdRange;
  imageRootfs: string;
}

export async function snapshotContainer(deps: CheckpointDeps, freezer: FreezerLayout, target: PauseTarget, dir: string): Promise<void> {
  const { sessionId, sessionDir, pid } = target;
  const mounts = await readMounts(path.join(sessionDir, 'bundle'));
  if (!mounts) throw new Error(`session ${sessionId} was started by an earlier version, which kept no record of its mounts: it cannot be snapshotted`);
  const images = path.join(dir, 'checkpoint');
  await mkdir(images, { mode: 0o700 });
  const { layer, layerFile } = mountPointsOf(sessionDir);
  // The disk is copied before anything of the container runs again.
  const consoleKey = await dumpContainer(deps, { sessionId, sessionDir, pid, freezer }, images, true, async () => {
    await run(['sync', '-f', layer]);
    await run(['cp', '--sparse=always', '--', layerFile, path.join(dir, 'layer.ext4')]);
  });
  const record: ContainerSnapshot = { consoleKey, ids: mounts.ids, imageRootfs: mounts.imageRootfs };
  await writeFile(path.join(dir, RECORD), JSON.stringify(record), { mode: 0o600 });
}

/** What a fork needs of a snapshot beside its images and disk; an error if the dir holds no container's snapshot. */
export async function readContainerSnapshot(dir: string): Promise<ContainerSnapshot> {
  const text = await readFile(path.join(dir, RECORD), 'utf8').catch(() => undefined);
  if (text === undefined) throw new Error(`snapshot ${path.basename(dir)} is not a container's`);
  const record = JSON.parse(text) as Partial<ContainerSnapshot>;
  const { consoleKey, ids, imageRootfs } = record;
  if (typeof consoleKey !== 'string' || !/^file\[[0-9a-f]+:[0-9a-f]+\]$/.test(consoleKey) || typeof imageRootfs !== 'string') {
    throw new Error(`snapshot ${path.basename(dir)}'s record is not whole`);
  }
  if (!ids || !Number.isSafeInteger(ids.first) || !Number.isSafeInteger(ids.size)) throw new Error(`snapshot ${path.basename(dir)}'s record has no id range`);
  return { consoleKey, ids: { first: ids.first, size: ids.size }, imageRootfs };
}
