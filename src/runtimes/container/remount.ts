import { mkdir, readFile, realpath, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { mountsUnder } from '../../host/mounts.js';
import type { SandboxVolume } from '../runtime.js';
import { deviceNumbers } from './block-io.js';
import { mountIdmapped, type IdRange } from './idmapped-mount.js';
import { mountOverlay } from './overlay.js';
import { mountVolume, volumeMountPoints } from './volume-mounts.js';
import { mountLayerFile } from './writable-layer.js';

/**
 * A container's root is made of host mounts (container-runtime.ts): its disk layer (a loop
 * mount of layer.ext4), idmapped views of the image and the config dir, its volumes (a loop
 * mount and a view each) and the overlay of them all. They are recorded at its start beside
 * its bundle, because a host reboot takes every one of them while the container is paused to
 * disk (its files stay: the session dir is on disk); the resume makes again what is missing,
 * the same sources at the same places and in the same id range, before runc restores it.
 */
export interface ContainerMounts {
  imageRootfs: string;
  configDir: string;
  ids: IdRange;
  volumes: Array<Pick<SandboxVolume, 'name' | 'file' | 'readOnly'>>;
}

/** Where each mount of a session is (container-runtime.ts makes them there at its start). */
export function mountPointsOf(sessionDir: string): { layerFile: string; layer: string; imageView: string; configView: string } {
  return {
    layerFile: path.join(sessionDir, 'layer.ext4'),
    layer: path.join(sessionDir, 'overlay'),
    imageView: path.join(sessionDir, 'image'),
    configView: path.join(sessionDir, 'config-view'),
  };
}

const RECORD = 'mounts.json';

export async function recordMounts(bundleDir: string, mounts: ContainerMounts): Promise<void> {
  await writeFile(path.join(bundleDir, RECORD), JSON.stringify(mounts), { mode: 0o600 });
}

/** The record of a session's mounts; undefined for one started before they were recorded. */
export async function readMounts(bundleDir: string): Promise<ContainerMounts | undefined> {
  const text = await readFile(path.join(bundleDir, RECORD), 'utf8').catch(() => undefined);
  return text === undefined ? undefined : (JSON.parse(text) as ContainerMounts);
}

/**
 * Makes again whichever of the session's mounts is missing (none, unless the host rebooted
 * since the pause), in the order of a start; `takeIds` takes the id range host-wide again
 * first (its lease went with /run) and says whether it got it. What it mounted stays on failure: the session's release unmounts everything under
 * its dir and its rootfs, and another resume makes only what is still missing.
 */
export async function remountMissing(sessionDir: string, rootfs: string, takeIds: (ids: IdRange) => Promise<boolean>): Promise<void> {
  // The usual case (no reboot): its root is mounted, and nothing else is looked at.
  if ((await mountsUnder(rootfs)).length > 0) return;
  const mounted = new Set(await mountsUnder(sessionDir));
  const isMounted = async (p: string) => mounted.has(await realpath(p).catch(() => p));
  const bundle = path.join(sessionDir, 'bundle');
  const mounts = await readMounts(bundle);
  if (!mounts) throw new Error(`the container's mounts are gone (the host rebooted?) and it has no record of them to make them again`);
  if (!(await takeIds(mounts.ids))) {
    throw new Error(`the host id range ${mounts.ids.first} of this paused container is held by another orchestrator on this host since a reboot`);
  }
  const at = mountPointsOf(sessionDir);
  if (!(await isMounted(at.layer))) await mountLayerFile(at.layerFile, at.layer);
  const views = [
    { source: mounts.imageRootfs, target: at.imageView },
    { source: mounts.configDir, target: at.configView },
  ];
  const missing = [];
  for (const view of views) if (!(await isMounted(view.target))) missing.push(view);
  if (missing.length > 0) await mountIdmapped(mounts.ids, missing);
  for (const volume of mounts.volumes) {
    const { raw, view } = volumeMountPoints(sessionDir, volume.name);
    const [hasRaw, hasView] = [await isMounted(raw), await isMounted(view)];
    // Never a second loop mount of a file whose first one a view still holds: two ext4s on one file.
    if (hasView && !hasRaw) throw new Error(`volume ${volume.name}'s view is mounted without its loop mount: destroy the session`);
    if (!hasRaw) await mountVolume(sessionDir, volume, mounts.ids);
    else if (!hasView) await mountIdmapped(mounts.ids, [{ source: raw, target: view }], { writable: !volume.readOnly });
  }
  await mkdir(path.dirname(rootfs), { recursive: true, mode: 0o711 });
  await mountOverlay(at.imageView, path.join(at.layer, 'upper'), path.join(at.layer, 'work'), rootfs);
  await retargetBlockIo(path.join(bundle, 'config.json'), at.layer);
}

type Throttle = Array<{ major: number; minor: number; rate: number }>;

/** The I/O limit names the layer's loop device, which a new loop mount may give another number. */
async function retargetBlockIo(configFile: string, layer: string): Promise<void> {
  const config = JSON.parse(await readFile(configFile, 'utf8')) as { linux?: { resources?: { blockIO?: Record<string, Throttle | undefined> } } };
  const blockIO = config.linux?.resources?.blockIO;
  if (!blockIO) return;
  const disk = deviceNumbers((await stat(layer, { bigint: true })).dev);
  for (const [key, list] of Object.entries(blockIO)) if (Array.isArray(list)) blockIO[key] = list.map((entry) => ({ ...entry, ...disk }));
  await writeFile(configFile, JSON.stringify(config, null, 2), { mode: 0o600 });
}
