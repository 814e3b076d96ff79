/**
 * The Debian packages a VM boots from, fetched from the recipe's own mirror and suite: the
 * kernel (linux-image-cloud-amd64 resolves to the versioned package it depends on) and a
 * static busybox for the initrd. They are downloaded and unpacked with the apt and dpkg of
 * the freshly debootstrapped rootfs (through chroot), so the host needs no apt sources of
 * its own, and then moved out of the rootfs: neither is installed in the guest, which
 * needs no kernel or modules of its own (the VM boots the kernel directly, and the initrd
 * loads the few modules it needs before switching to the root).
 */
import { mkdir, readdir, rename, stat } from 'node:fs/promises';
import { join } from 'node:path';

export interface VmPackages {
  /** The versioned kernel package, e.g. linux-image-6.1.0-31-cloud-amd64. */
  kernelPackage: string;
  /** e.g. 6.1.0-31-cloud-amd64 */
  kernelRelease: string;
  vmlinuz: string;
  /** <unpacked>/lib/modules/<release> */
  moduleTree: string;
  busybox: string;
}

export interface ChrootRunner {
  /** Runs argv inside the rootfs (chroot); every line of output goes to onLine. */
  inRoot(argv: string[], onLine?: (line: string) => void): Promise<void>;
}

/** Scratch dir inside the rootfs (as the chroot sees it); moved out when done. */
const SCRATCH_IN_ROOT = '/tmp/sbx-vm-packages';

/**
 * The kernel package a name stands for: a metapackage such as linux-image-cloud-amd64
 * depends on exactly one versioned linux-image package; a versioned package stands for itself.
 * `dependsOutput` is what `apt-cache depends --important <name>` printed.
 */
export function resolveKernelPackage(name: string, dependsOutput: string): string {
  for (const line of dependsOutput.split('\n')) {
    const match = /^\s*\|?(?:Pre)?Depends:\s*(linux-image-\S+)/.exec(line);
    if (match?.[1] && !match[1].startsWith('<')) return match[1];
  }
  return name;
}

export async function fetchVmPackages(
  rootfs: string,
  outDir: string,
  packages: { kernel: string; busybox: string },
  runner: ChrootRunner,
): Promise<VmPackages> {
  const scratchOnHost = join(rootfs, SCRATCH_IN_ROOT);
  await mkdir(scratchOnHost, { recursive: true, mode: 0o755 });

  let depends = '';
  await runner.inRoot(['apt-cache', 'depends', '--important', packages.kernel], (line) => (depends += line + '\n'));
  const kernelPackage = resolveKernelPackage(packages.kernel, depends);

  // apt-get download writes to the current directory; as root in a chroot, its "_apt"
  // sandbox user could not write there, so download as root (the files are verified anyway).
  await runner.inRoot(['env', `--chdir=${SCRATCH_IN_ROOT}`, 'apt-get', '-o', 'APT::Sandbox::User=root', 'download', kernelPackage, packages.busybox]);
  const debs = await readdir(scratchOnHost);
  for (const pkg of [kernelPackage, packages.busybox]) {
    const deb = debs.find((file) => file.startsWith(`${pkg}_`) && file.endsWith('.deb'));
    if (!deb) throw new Error(`apt-get download ${pkg} left no ${pkg}_*.deb (found: ${debs.join(', ') || 'nothing'})`);
    await runner.inRoot(['dpkg-deb', '-x', `${SCRATCH_IN_ROOT}/${deb}`, `${SCRATCH_IN_ROOT}/${pkg}`]);
  }
  await rename(scratchOnHost, outDir);

  const kernelDir = join(outDir, kernelPackage);
  const vmlinuzName = (await readdir(join(kernelDir, 'boot'))).find((name) => name.startsWith('vmlinuz-'));
  if (!vmlinuzName) throw new Error(`${kernelPackage} has no /boot/vmlinuz-*: is it a kernel image package?`);
  const kernelRelease = vmlinuzName.slice('vmlinuz-'.length);
  return {
    kernelPackage,
    kernelRelease,
    vmlinuz: join(kernelDir, 'boot', vmlinuzName),
    moduleTree: await firstExisting([join(kernelDir, 'lib', 'modules', kernelRelease), join(kernelDir, 'usr', 'lib', 'modules', kernelRelease)]),
    busybox: await firstExisting([join(outDir, packages.busybox, 'bin', 'busybox'), join(outDir, packages.busybox, 'usr', 'bin', 'busybox')]),
  };
}

async function firstExisting(paths: string[]): Promise<string> {
  for (const path of paths) {
    if (
      await stat(path).then(
        () => true,
        () => false,
      )
    )
      return path;
  }
  throw new Error(`none of ${paths.join(', ')} exists`);
}
