/**
 * Builds the guest's initrd: a gzip-compressed cpio (newc) archive holding a static busybox,
 * the kernel modules needed to reach the root disk and the network (with their
 * dependencies), and the /init script of initrd-init.ts. About 1.5 MB; nothing in it changes
 * per session.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { gzipSync } from 'node:zlib';
import { cpioArchive, type CpioEntry } from './cpio.js';
import { INITRD_APPLETS, INITRD_MODULE_DIR, initScript } from './initrd-init.js';
import { resolveModules } from './kernel-modules.js';

export interface InitrdOptions {
  /** A statically linked busybox binary. */
  busybox: string;
  /** The kernel's module tree: <somewhere>/lib/modules/<release>. */
  moduleTree: string;
  /** Modules to load, in the order wanted; their dependencies are added before them. */
  modules: readonly string[];
  defaultRoot: string;
  defaultInit: string;
  rootWaitSeconds: number;
}

export interface InitrdResult {
  bytes: number;
  /** The modules /init loads, in order (dependencies included). */
  modules: string[];
}

/** The archive's entries: pure apart from the file contents passed in. */
export function initrdEntries(busybox: Buffer, modules: ReadonlyArray<{ name: string; data: Buffer }>, init: string): CpioEntry[] {
  const entries: CpioEntry[] = [
    ...['bin', 'dev', 'lib', INITRD_MODULE_DIR.slice(1), 'newroot', 'proc', 'sys'].map((path): CpioEntry => ({ type: 'dir', path, mode: 0o755 })),
    // The kernel opens /dev/console for /init's output before devtmpfs is mounted.
    { type: 'chardev', path: 'dev/console', mode: 0o600, major: 5, minor: 1 },
    { type: 'file', path: 'bin/busybox', mode: 0o755, data: busybox },
    ...INITRD_APPLETS.map((applet): CpioEntry => ({ type: 'symlink', path: `bin/${applet}`, target: 'busybox' })),
    ...modules.map((m): CpioEntry => ({ type: 'file', path: `${INITRD_MODULE_DIR.slice(1)}/${m.name}.ko`, mode: 0o644, data: m.data })),
    { type: 'file', path: 'init', mode: 0o755, data: Buffer.from(init, 'utf8') },
  ];
  return entries;
}

export async function buildInitrd(outPath: string, opts: InitrdOptions): Promise<InitrdResult> {
  const resolved = await resolveModules(opts.moduleTree, opts.modules);
  const modules = await Promise.all(resolved.map(async (m) => ({ name: m.name, data: await readFile(m.path) })));
  const init = initScript({
    modules: resolved.map((m) => m.name),
    defaultRoot: opts.defaultRoot,
    defaultInit: opts.defaultInit,
    rootWaitSeconds: opts.rootWaitSeconds,
  });
  const archive = cpioArchive(initrdEntries(await readFile(opts.busybox), modules, init));
  // gzip: every x86 distribution kernel can unpack it (CONFIG_RD_GZIP); level 9 costs ~0.1 s.
  const compressed = gzipSync(archive, { level: 9 });
  await writeFile(outPath, compressed, { mode: 0o644 });
  return { bytes: compressed.length, modules: resolved.map((m) => m.name) };
}
