/**
 * User templates on disk, under <imagesDir>/templates:
 *   <hash>/                  a built template image, laid out as a guest image (rootfs/,
 *                            rootfs.ext4, vmlinuz, initrd.img) plus template.json
 *   <name>.json              which build a name means now: {"name", "hash"}, replaced by a
 *                            rename, so a reader sees the old build or the new one, never half
 *   .build-<hash>-<pid>/     a build in progress (removed when its process is gone)
 */
import { readdir, readFile, readlink, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { imageAt, isDirectory, isFile, type GuestImage } from '../guest/image/image-store.js';
import { removeTree } from '../guest/image/build-dirs.js';
import type { TemplateDefinition } from './template-file.js';

export const TEMPLATE_MANIFEST = 'template.json';
export const IMAGE_ARTIFACTS = { rootfs: 'rootfs', ext4: 'rootfs.ext4', kernel: 'vmlinuz', initrd: 'initrd.img' } as const;

/** What a built user template says about itself (<hash>/template.json). */
export interface TemplateManifest {
  name: string;
  hash: string;
  base: string;
  /** The hash of the base's image it was built on. */
  baseHash: string;
  definition: TemplateDefinition;
  builtAt: string;
  rootfsBytes: number;
  ext4Bytes: number;
  durationMs: number;
}

export interface StoredTemplate {
  manifest: TemplateManifest;
  image: GuestImage;
}

export function templatesDir(imagesDir: string): string {
  return join(imagesDir, 'templates');
}

/** The build a name points to, if it is complete. */
export async function findUserTemplate(imagesDir: string, name: string): Promise<StoredTemplate | undefined> {
  const dir = templatesDir(imagesDir);
  let pointer: { hash?: unknown };
  try {
    pointer = JSON.parse(await readFile(join(dir, `${name}.json`), 'utf8')) as { hash?: unknown };
  } catch {
    return undefined;
  }
  if (typeof pointer.hash !== 'string' || !/^[0-9a-f]{16}$/.test(pointer.hash)) return undefined;
  return loadBuild(imagesDir, pointer.hash);
}

/** A complete build by hash (every artifact there), or undefined. */
export async function loadBuild(imagesDir: string, hash: string): Promise<StoredTemplate | undefined> {
  const dir = join(templatesDir(imagesDir), hash);
  let manifest: TemplateManifest;
  try {
    manifest = JSON.parse(await readFile(join(dir, TEMPLATE_MANIFEST), 'utf8')) as TemplateManifest;
  } catch {
    return undefined;
  }
  if (manifest.hash !== hash) return undefined;
  const image = imageAt(dir, hash, IMAGE_ARTIFACTS);
  if (!(await isDirectory(image.rootfs))) return undefined;
  for (const file of [image.ext4, image.kernel, image.initrd]) if (!(await isFile(file))) return undefined;
  return { manifest, image };
}

/** Every user template with a complete build, by name. */
export async function listUserTemplates(imagesDir: string): Promise<StoredTemplate[]> {
  const names = await readdir(templatesDir(imagesDir)).catch(() => [] as string[]);
  const found: StoredTemplate[] = [];
  for (const file of names.sort()) {
    const match = /^([a-z][a-z0-9-]*)\.json$/.exec(file);
    if (!match?.[1]) continue;
    const template = await findUserTemplate(imagesDir, match[1]);
    if (template) found.push(template);
  }
  return found;
}

/** Points `name` at a build (atomically: a temp file renamed over the old pointer). */
export async function pointName(imagesDir: string, name: string, hash: string): Promise<void> {
  const dir = templatesDir(imagesDir);
  const temp = join(dir, `.${name}.json.${process.pid}`);
  await writeFile(temp, JSON.stringify({ name, hash }) + '\n', { mode: 0o644 });
  await rename(temp, join(dir, `${name}.json`));
}

/**
 * Removes a template: its name first (no new session can pick it from then on), then its
 * build, and any older build of it no name points to any more. Refused while a sandbox runs
 * on its current build (buildInUse).
 */
export async function removeUserTemplate(imagesDir: string, name: string): Promise<boolean> {
  const dir = templatesDir(imagesDir);
  const current = await findUserTemplate(imagesDir, name);
  const hadName = await isFile(join(dir, `${name}.json`));
  if (!hadName) return false;
  if (current && (await buildInUse(current.image.dir))) {
    throw new Error(`template ${name} is in use by a running sandbox; destroy its sessions first (GET /v1/sessions shows each one's template)`);
  }
  await rm(join(dir, `${name}.json`), { force: true });
  const stillNamed = new Set((await listUserTemplates(imagesDir)).map((t) => t.manifest.hash));
  for (const entry of await readdir(dir)) {
    if (!/^[0-9a-f]{16}$/.test(entry) || stillNamed.has(entry)) continue;
    const build = await loadBuild(imagesDir, entry);
    if (build?.manifest.name === name || entry === current?.manifest.hash) await removeTree(join(dir, entry));
  }
  return true;
}

/**
 * After a rebuild: removes the older builds of `name` that no sandbox runs on. One still in
 * use (a live session, a pooled sandbox) is kept and said; the next rebuild or `rm` takes it.
 */
export async function pruneOldBuilds(imagesDir: string, name: string, keep: string, progress: (line: string) => void): Promise<void> {
  const dir = templatesDir(imagesDir);
  for (const entry of await readdir(dir)) {
    if (!/^[0-9a-f]{16}$/.test(entry) || entry === keep) continue;
    const build = await loadBuild(imagesDir, entry);
    if (build?.manifest.name !== name) continue;
    if (await buildInUse(build.image.dir)) {
      progress(`kept the previous build ${entry} of ${name}: a sandbox runs on it`);
      continue;
    }
    await removeTree(build.image.dir);
    progress(`removed the previous build ${entry} of ${name}`);
  }
}

/**
 * Whether a running sandbox uses the build in `dir`: a mount made from it (the container
 * runtime's id-mapped view of its rootfs, an overlay over it) or a file in it held open (a
 * VM's disk). Removing it under a live sandbox would pull files from under that guest.
 */
export async function buildInUse(dir: string): Promise<boolean> {
  const mountInfo = await readFile('/proc/self/mountinfo', 'utf8');
  if (mountInfo.split('\n').some((line) => line.includes(`${dir}/`))) return true;
  for (const pid of await readdir('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    const fds = await readdir(`/proc/${pid}/fd`).catch(() => [] as string[]);
    for (const fd of fds) {
      const target = await readlink(`/proc/${pid}/fd/${fd}`).catch(() => '');
      if (target.startsWith(`${dir}/`)) return true;
    }
  }
  return false;
}
