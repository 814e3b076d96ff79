/**
 * The guest image recipes, as data: which Debian, which packages, which of our files go
 * where. This file has the recipe of the built-in template `minimal` and what every recipe
 * shares; desktop-recipe.ts extends it, and templates.ts names them. Images are cached by
 * recipeHash(), so anything that changes the built image must be part of the recipe, of the
 * files in src/guest/files, or of BUILDER_VERSION.
 */
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CONFIG_MOUNT, GUEST_GID, GUEST_INIT, GUEST_UID, GUEST_USER } from '../contract.js';
import { GUEST_ROOT_DEVICE } from '../kernel-cmdline.js';
import { initScript } from './initrd-init.js';

/** The desktop user's login shell: bash without the user's rc files (see files/sbx-user-shell). */
const GUEST_LOGIN_SHELL = '/usr/local/sbin/sbx-user-shell';

/** How long the initrd waits for the root disk to appear. */
export const INITRD_ROOT_WAIT_SECONDS = 10;

/**
 * Bump when builder.ts changes what it does to the rootfs (not for refactors that keep the
 * result identical): a new value invalidates every cached image.
 */
export const BUILDER_VERSION = 2;

/** One of our files (from src/guest/files) copied into the rootfs. */
export interface RecipeFile {
  /** Path relative to src/guest/files (a template's own files live in a subfolder, e.g. desktop/). */
  source: string;
  /** Absolute path in the guest. */
  target: string;
  mode: number;
}

/** What the VM runtimes boot, next to the rootfs (see vm-packages.ts, initrd.ts). */
export interface VmRecipe {
  /** The kernel: a Debian package; a metapackage resolves to the versioned one. */
  kernelPackage: string;
  /** A statically linked busybox for the initrd's /init. */
  busyboxPackage: string;
  /**
   * Kernel modules the initrd loads (their dependencies are found and loaded first): the
   * virtio-mmio transport, the disks and the network. ext4 is built into Debian's kernel.
   */
  initrdModules: readonly string[];
  /** Free space in the root filesystem image beyond what the rootfs uses. */
  rootHeadroomMiB: number;
}

/** A display the session's own programs start (see GuestRecipe.display). */
export interface TemplateDisplay {
  /** The X display number (0 for DISPLAY=:0). */
  number: number;
  /** Who starts the X server: the session's programs, not our init. */
  server: 'session';
  /** The screen those programs make unless told otherwise: the template's default screen (a session's frames must fit it). */
  screen: { width: number; height: number };
}

export interface GuestRecipe {
  suite: string;
  mirror: string;
  variant: 'minbase';
  /** Installed by debootstrap on top of minbase; Recommends are never installed. */
  packages: readonly string[];
  /**
   * Installed next with apt-get in the rootfs, without Recommends (see apt-install.ts): the
   * larger package sets, whose alternatives and conflicts debootstrap resolves wrongly. Absent
   * in `minimal` (whose hash stays what it was).
   */
  aptPackages?: readonly string[];
  files: readonly RecipeFile[];
  /** Symbolic links made in the rootfs after the files (absent in the templates before them, whose hash stays). */
  links?: readonly { path: string; target: string }[];
  /**
   * The display, when the template's X server is not started by our init but by the session's
   * own programs (`xfce`: E2B Desktop's SDK starts Xvfb :0). Absent: our init starts Xvfb on
   * the orchestrator's display (SBX_DISPLAY) and the session is ready once it answers.
   */
  display?: TemplateDisplay;
  /** The desktop user; SSH logs in as this user and the desktop runs as it. */
  user: { name: string; uid: number; gid: number; home: string; shell: string };
  /** /etc/hostname of the image; sandbox-init sets the per-session name at boot. */
  hostname: string;
  /** Created empty in the image: the mount point of the per-session config. */
  configMount: string;
  vm: VmRecipe;
}

/**
 * The built-in template `minimal`: Xvfb, openbox and one xterm, sshd, x11vnc. Fast to build
 * and to boot; the tests and headless work use it.
 */
export const MINIMAL_RECIPE: GuestRecipe = {
  suite: 'bookworm',
  mirror: 'http://deb.debian.org/debian',
  variant: 'minbase',
  packages: [
    // The display and the computer-use tools.
    'xvfb',
    'xdotool',
    'scrot',
    'x11-utils', // xdpyinfo: sandbox-init waits for the display with it
    'x11-xserver-utils', // xmodmap: binds keysyms of non-ASCII text before it is typed
    'python3', // sbx-capture and sbx-input, the persistent screen grabber and input helper (ctypes only)
    'libxtst6', // XTEST for sbx-input (xdotool needs it too; named because sbx-input does)
    'libxdamage1', // XDamage for sbx-capture: which parts of the screen changed (pulls in libxfixes3 for its regions)
    'libxext6', // MIT-SHM for sbx-capture: pixels through shared memory, not the X socket
    'x11vnc',
    // The desktop actions (sbx-desktopd): the clipboard through xclip, `open` and `launch`
    // through GLib's gio (which quotes a file or URL as one argument of an Exec= line), and
    // the MIME database gio finds a file's default application with.
    'xclip',
    'libglib2.0-bin',
    'shared-mime-info',
    // A window manager and a terminal, so that there is a desktop to look at.
    'openbox',
    'xterm',
    'xfonts-base', // core X fonts: xterm's default "fixed" font
    'fonts-dejavu-core', // fontconfig fonts: openbox window titles
    // How the host gets in: sshd on port 22, and per connection over vsock behind socat.
    'openssh-server',
    'socat',
    // inotifywait: the filesystem API's watch hears changes instead of polling for them.
    'inotify-tools',
    // What sandbox-init itself uses: ip, setpriv/mountpoint, kill/ps.
    'iproute2',
    'util-linux',
    'procps',
    'ca-certificates',
  ],
  files: [
    { source: 'sandbox-init', target: GUEST_INIT, mode: 0o755 },
    { source: 'sshd_config', target: '/etc/ssh/sshd_config', mode: 0o644 },
    { source: 'sbx-capture', target: '/usr/local/bin/sbx-capture', mode: 0o755 },
    { source: 'sbx-input', target: '/usr/local/bin/sbx-input', mode: 0o755 },
    // Persistent, one per session; images before it had the one-shot /usr/local/bin/sbx-desktop.
    { source: 'sbx-desktopd', target: '/usr/local/bin/sbx-desktopd', mode: 0o755 },
    { source: 'sbx-rekey', target: '/usr/local/sbin/sbx-rekey', mode: 0o755 },
    { source: 'sbx-user-shell', target: GUEST_LOGIN_SHELL, mode: 0o755 },
  ],
  user: { name: GUEST_USER, uid: GUEST_UID, gid: GUEST_GID, home: `/home/${GUEST_USER}`, shell: GUEST_LOGIN_SHELL },
  hostname: 'sandbox',
  configMount: CONFIG_MOUNT,
  vm: {
    // Debian's kernel for cloud VMs: small (no hardware drivers), virtio as modules.
    kernelPackage: 'linux-image-cloud-amd64',
    busyboxPackage: 'busybox-static',
    // vmw_vsock_virtio_transport: /dev/vsock, for sshd over vsock (Firecracker).
    initrdModules: ['virtio_mmio', 'virtio_blk', 'virtio_net', 'vmw_vsock_virtio_transport'],
    rootHeadroomMiB: 1024,
  },
};

/**
 * The directory with package.json. Found by walking up from this module, because the same
 * code runs from src/ (tsx) and from dist/ (tsc), and tsc does not copy non-TS files.
 */
export function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    if (existsSync(join(dir, 'package.json'))) return dir;
    const parent = dirname(dir);
    if (parent === dir) throw new Error(`no package.json above ${fileURLToPath(import.meta.url)}`);
    dir = parent;
  }
}

/** Where the guest's files (sandbox-init, sshd_config) live in the source tree. */
export function guestFilesDir(): string {
  return join(packageRoot(), 'src', 'guest', 'files');
}

/** JSON with object keys sorted, so that the hash does not depend on key order. */
function stableStringify(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(stableStringify).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([key, item]) => `${JSON.stringify(key)}:${stableStringify(item)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

/**
 * Identifies a built image: sha256 over the builder version, the recipe and every file at the
 * top of src/guest/files (all of them, not only the listed ones, so that nothing is missed),
 * then the recipe's files in subfolders (a template's own files: only that template's hash
 * changes with them, and `minimal`, which has none, keeps the hash it had before templates).
 * 16 hex characters are plenty to tell a handful of cached images apart.
 */
export function recipeHash(recipe: GuestRecipe = MINIMAL_RECIPE, filesDir?: string): string {
  if (filesDir !== undefined) return hashRecipe(recipe, filesDir);
  // The installed guest files are the program's own: read and hashed once per recipe, not on
  // every create (findImage), where it was a readdir and a dozen synchronous reads.
  let hash = installedHashes.get(recipe);
  if (hash === undefined) installedHashes.set(recipe, (hash = hashRecipe(recipe, guestFilesDir())));
  return hash;
}

const installedHashes = new WeakMap<GuestRecipe, string>();

function hashRecipe(recipe: GuestRecipe, filesDir: string): string {
  const hash = createHash('sha256');
  hash.update(`builder ${BUILDER_VERSION}\n`);
  hash.update(stableStringify(recipe));
  // The initrd's /init is generated, not a file in src/guest/files: hash its text too.
  hash.update(
    `\ninitrd-init\n${initScript({ modules: recipe.vm.initrdModules, defaultRoot: GUEST_ROOT_DEVICE, defaultInit: GUEST_INIT, rootWaitSeconds: INITRD_ROOT_WAIT_SECONDS })}`,
  );
  const names = readdirSync(filesDir, { withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => entry.name)
    .sort();
  for (const name of names) {
    const content = readFileSync(join(filesDir, name));
    // Name and length first, so that moving bytes from one file to another changes the hash.
    hash.update(`\nfile ${name} ${content.length}\n`);
    hash.update(content);
  }
  const nested = recipe.files.map((file) => file.source).filter((source) => source.includes('/'));
  for (const source of [...new Set(nested)].sort()) {
    const content = readFileSync(join(filesDir, source));
    hash.update(`\nfile ${source} ${content.length}\n`);
    hash.update(content);
  }
  return hash.digest('hex').slice(0, 16);
}
