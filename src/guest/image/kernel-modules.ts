/**
 * Kernel modules for the initrd: where a module's file is, what it depends on, and the order
 * to load a set of them in. The kernel .deb ships no modules.dep (depmod makes it at install
 * time), and the initrd has no modprobe, so dependencies are read from each module's own
 * `.modinfo` ELF section ("depends=virtio,virtio_ring") and the load order is computed here.
 */
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';

/** Module names use '_' where file names may use '-' (virtio-rng.ko is module virtio_rng). */
export function moduleName(fileOrName: string): string {
  return fileOrName.replace(/\.ko$/, '').replace(/-/g, '_');
}

/** Every `<name>.ko` under a module tree (/lib/modules/<release>), by module name. */
export async function indexModules(moduleTree: string): Promise<Map<string, string>> {
  const index = new Map<string, string>();
  const walk = async (dir: string): Promise<void> => {
    for (const entry of await readdir(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) await walk(path);
      else if (entry.name.endsWith('.ko')) index.set(moduleName(entry.name), path);
    }
  };
  await walk(moduleTree);
  return index;
}

/** The key=value strings of a module's `.modinfo` section (license, depends, alias, ...). */
export function modinfo(elf: Buffer): Map<string, string[]> {
  const section = elfSection(elf, '.modinfo');
  const info = new Map<string, string[]>();
  for (const item of section.toString('utf8').split('\0')) {
    const eq = item.indexOf('=');
    if (eq <= 0) continue;
    const key = item.slice(0, eq);
    info.set(key, [...(info.get(key) ?? []), item.slice(eq + 1)]);
  }
  return info;
}

/** The modules a module needs loaded first, by name. */
export function moduleDepends(elf: Buffer): string[] {
  const depends = modinfo(elf).get('depends')?.[0] ?? '';
  return depends.split(',').filter(Boolean).map(moduleName);
}

/**
 * The load order for `wanted`: every module after all of its dependencies, each once.
 * Throws on a dependency cycle (insmod could never load such a set).
 */
export function loadOrder(wanted: readonly string[], dependsOf: (name: string) => readonly string[]): string[] {
  const order: string[] = [];
  const done = new Set<string>();
  const visiting = new Set<string>();
  const visit = (name: string, path: string[]): void => {
    if (done.has(name)) return;
    if (visiting.has(name)) throw new Error(`kernel module dependency cycle: ${[...path, name].join(' -> ')}`);
    visiting.add(name);
    for (const dep of dependsOf(name)) visit(dep, [...path, name]);
    visiting.delete(name);
    done.add(name);
    order.push(name);
  };
  for (const name of wanted) visit(moduleName(name), []);
  return order;
}

/** The load order of `wanted` and their dependencies, with each module's file. */
export async function resolveModules(moduleTree: string, wanted: readonly string[]): Promise<Array<{ name: string; path: string }>> {
  const index = await indexModules(moduleTree);
  const depends = new Map<string, string[]>();
  for (const name of wanted.map(moduleName)) await readDepends(name);
  async function readDepends(name: string): Promise<void> {
    if (depends.has(name)) return;
    const path = index.get(name);
    if (!path) throw new Error(`kernel module ${name} is not in ${moduleTree} (built into the kernel? then leave it out)`);
    const deps = moduleDepends(await readFile(path));
    depends.set(name, deps);
    for (const dep of deps) await readDepends(dep);
  }
  return loadOrder(wanted, (name) => depends.get(name) ?? []).map((name) => ({ name, path: index.get(name) as string }));
}

/** The bytes of a named section of a 64-bit little-endian ELF file (x86_64 modules). */
function elfSection(elf: Buffer, wanted: string): Buffer {
  if (elf.readUInt32BE(0) !== 0x7f454c46) throw new Error('not an ELF file');
  if (elf[4] !== 2 || elf[5] !== 1) throw new Error('only 64-bit little-endian ELF is supported');
  const shoff = Number(elf.readBigUInt64LE(0x28));
  const shentsize = elf.readUInt16LE(0x3a);
  const shnum = elf.readUInt16LE(0x3c);
  const shstrndx = elf.readUInt16LE(0x3e);
  const header = (index: number) => {
    const at = shoff + index * shentsize;
    return { name: elf.readUInt32LE(at), offset: Number(elf.readBigUInt64LE(at + 0x18)), size: Number(elf.readBigUInt64LE(at + 0x20)) };
  };
  const names = header(shstrndx);
  for (let i = 0; i < shnum; i++) {
    const section = header(i);
    const start = names.offset + section.name;
    const name = elf.toString('utf8', start, elf.indexOf(0, start));
    if (name === wanted) return elf.subarray(section.offset, section.offset + section.size);
  }
  throw new Error(`no ${wanted} section`);
}
