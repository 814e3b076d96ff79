import { readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { MINIMAL_RECIPE, recipeHash, type GuestRecipe, type TemplateDisplay } from './recipe.js';

// The guest images under imagesDir as builder.ts leaves them, found by recipe hash.

export interface GuestImage {
  hash: string;
  /** <imagesDir>/<hash> */
  dir: string;
  /** <dir>/rootfs: the root filesystem as a directory. */
  rootfs: string;
  /** <dir>/rootfs.ext4: the same tree as an ext4 image, shared read-only by every VM. */
  ext4: string;
  /** <dir>/vmlinuz: the guest kernel for the VM runtimes. */
  kernel: string;
  /** <dir>/initrd.img: loads the kernel's virtio modules and mounts the root disk. */
  initrd: string;
  /** Set when the session's own programs start the X server (GuestRecipe.display). */
  display?: TemplateDisplay;
}

/** Written to <dir>/manifest.json. */
export interface ImageManifest {
  hash: string;
  builderVersion: number;
  recipe: GuestRecipe;
  builtAt: string;
  /** Paths relative to the image directory. */
  artifacts: { rootfs: string; ext4: string; kernel: string; initrd: string };
  /** What the VM artifacts were made of. */
  vm: { kernelPackage: string; kernelRelease: string; initrdModules: string[]; initrdBytes: number; ext4Bytes: number };
  durationsMs: { debootstrap: number; configure: number; vm: number; total: number };
  rootfsBytes: number;
  /** The rootfs's content index (image-integrity.ts); absent in images built before it. */
  contents?: ContentIndex;
}

/** What the manifest says of the rootfs's content index (image-integrity.ts). */
export interface ContentIndex {
  /** Relative to the image directory. */
  file: string;
  /** sha256 of the index file: the index cannot be edited to agree with a damaged tree. */
  sha256: string;
  entries: number;
}

export const MANIFEST = 'manifest.json';
export const ROOTFS = 'rootfs';
export const EXT4 = 'rootfs.ext4';
export const KERNEL = 'vmlinuz';
export const INITRD = 'initrd.img';

/** The recipe's image (by default the `minimal` template's), if it has been built (and completed). */
export async function findImage(imagesDir: string, recipe: GuestRecipe = MINIMAL_RECIPE): Promise<GuestImage | undefined> {
  const hash = recipeHash(recipe);
  const dir = join(imagesDir, hash);
  let manifest: ImageManifest;
  try {
    manifest = JSON.parse(await readFile(join(dir, MANIFEST), 'utf8')) as ImageManifest;
  } catch {
    return undefined;
  }
  if (manifest.hash !== hash) return undefined;
  const image: GuestImage = { ...imageAt(dir, hash, manifest.artifacts), ...(recipe.display ? { display: recipe.display } : {}) };
  if (!(await isDirectory(image.rootfs))) return undefined;
  for (const file of [image.ext4, image.kernel, image.initrd]) {
    if (!(await isFile(file))) return undefined;
  }
  return image;
}

export function imageAt(dir: string, hash: string, artifacts: ImageManifest['artifacts']): GuestImage {
  return {
    hash,
    dir,
    rootfs: join(dir, artifacts.rootfs),
    ext4: join(dir, artifacts.ext4),
    kernel: join(dir, artifacts.kernel),
    initrd: join(dir, artifacts.initrd),
  };
}

export async function isFile(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isFile();
  } catch {
    return false;
  }
}

export async function isDirectory(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isDirectory();
  } catch {
    return false;
  }
}
