/**
 * Builds a guest image from a recipe (a built-in template's, see templates.ts) with
 * debootstrap, and finds it again by recipe hash.
 *
 * Layout under imagesDir:
 *   <hash>/rootfs/          the root filesystem (the container runtime uses it as is)
 *   <hash>/rootfs.ext4      the same tree as an ext4 image (mkfs.ext4 -d): the VMs' shared,
 *                           read-only root disk, under a per-session copy-on-write layer
 *   <hash>/vmlinuz          the guest kernel (Debian's cloud kernel, from the recipe's vm)
 *   <hash>/initrd.img       a busybox initrd that loads the virtio modules and mounts the root
 *   <hash>/rootfs.index     the rootfs's content index, checked before use (image-integrity.ts)
 *   <hash>/manifest.json    what was built, from which recipe, how long it took, the index's sha256
 *   <hash>.build.log        everything debootstrap and the build steps printed
 *   .build-<hash>-<pid>/    a build in progress; renamed to <hash>/ only once complete,
 *                           so a half-built image is never used
 *   .debs/                  downloaded packages, reused by the next build
 *
 * Everything runs as argv arrays (never a shell string), and every change to the rootfs
 * runs through chroot, so that paths resolve inside the rootfs, never on the host.
 */
import { createWriteStream, type WriteStream } from 'node:fs';
import { chmod, copyFile, mkdir, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join, posix } from 'node:path';
import { performance } from 'node:perf_hooks';
import { GUEST_INIT } from '../contract.js';
import { GUEST_ROOT_DEVICE } from '../kernel-cmdline.js';
import { createImageFile, mkfsExt4Argv, rootImageSize } from './ext4-image.js';
import { installWithApt } from './apt-install.js';
import { buildInitrd } from './initrd.js';
import { guestFilesDir, INITRD_ROOT_WAIT_SECONDS, MINIMAL_RECIPE, recipeHash, BUILDER_VERSION, type GuestRecipe } from './recipe.js';
import { removeStaleBuilds, removeTree } from './build-dirs.js';
import { CommandError, execLogged, isErrnoCode, type ExecOptions } from './build-exec.js';
import { EXT4, findImage, imageAt, INITRD, isDirectory, KERNEL, MANIFEST, ROOTFS, type GuestImage, type ImageManifest } from './image-store.js';
import { truncateTimestamps } from './timestamps.js';
import { writeContentIndex } from './image-integrity.js';
import { trimRootfs } from './trim.js';
import { fetchVmPackages, type VmPackages } from './vm-packages.js';

export { findImage, type GuestImage, type ImageManifest } from './image-store.js';

export interface BuildOptions {
  imagesDir: string;
  /** What to build: a built-in template's recipe (templates.ts); `minimal` by default. */
  recipe?: GuestRecipe;
  /** Rebuild even if the current recipe's image exists (do not use while sandboxes run on it). */
  force?: boolean;
  /** Progress lines, e.g. "  12.3s [1/7] I: Retrieving Packages". */
  onProgress?: (line: string) => void;
}

const GSETTINGS_SCHEMAS = '/usr/share/glib-2.0/schemas/';

// One build per image at a time within this process; concurrent callers share it.
const buildsInProgress = new Map<string, Promise<GuestImage>>();

/** Returns the recipe's image, building it first if needed (minimal: 1-2 minutes; desktop: more). */
export async function buildImage(opts: BuildOptions): Promise<GuestImage> {
  const key = `${opts.imagesDir}\0${recipeHash(opts.recipe ?? MINIMAL_RECIPE)}`;
  const running = buildsInProgress.get(key);
  if (running) return running;
  const build = buildOrReuse(opts).finally(() => buildsInProgress.delete(key));
  buildsInProgress.set(key, build);
  return build;
}

async function buildOrReuse(opts: BuildOptions): Promise<GuestImage> {
  const progress = opts.onProgress ?? (() => {});
  const recipe = opts.recipe ?? MINIMAL_RECIPE;
  if (!opts.force) {
    const cached = await findImage(opts.imagesDir, recipe);
    if (cached) {
      progress(`using cached guest image ${cached.dir}`);
      return cached;
    }
  }
  if (process.getuid?.() !== 0) {
    throw new Error('building the guest image needs root (debootstrap and chroot); run as root');
  }
  await mkdir(opts.imagesDir, { recursive: true, mode: 0o755 });
  await removeStaleBuilds(opts.imagesDir, progress);
  return new ImageBuild(opts.imagesDir, recipe, progress).run(opts.force === true);
}

/** One build attempt: a temporary directory that becomes <hash>/ only when complete. */
class ImageBuild {
  private readonly hash: string;
  private readonly started = performance.now();
  private readonly tempDir: string;
  private readonly rootfs: string;
  private readonly logPath: string;
  private log: WriteStream | undefined;
  private step = 0;

  constructor(
    private readonly imagesDir: string,
    private readonly recipe: GuestRecipe,
    private readonly progress: (line: string) => void,
  ) {
    this.hash = recipeHash(recipe);
    this.tempDir = join(imagesDir, `.build-${this.hash}-${process.pid}`);
    this.rootfs = join(this.tempDir, ROOTFS);
    this.logPath = join(imagesDir, `${this.hash}.build.log`);
  }

  async run(force: boolean): Promise<GuestImage> {
    this.log = createWriteStream(this.logPath, { flags: 'w', mode: 0o644 });
    try {
      this.report(`building guest image ${this.hash} in ${this.tempDir} (log: ${this.logPath})`);
      await removeTree(this.tempDir); // a leftover of an earlier build by a process with our pid
      await mkdir(this.rootfs, { recursive: true, mode: 0o755 });

      const debootstrapStarted = performance.now();
      await this.debootstrap();
      await this.installAptPackages();
      const debootstrapMs = performance.now() - debootstrapStarted;

      const configureStarted = performance.now();
      await this.createUser();
      await this.removeHostKeys();
      await this.installFiles();
      // Before trim and setIdentity: it uses the rootfs's apt lists and resolver config.
      const vmStarted = performance.now();
      const packages = await this.fetchVmPackages();
      let vmMs = performance.now() - vmStarted;
      await this.trim();
      await this.setIdentity();
      const configureMs = performance.now() - configureStarted - vmMs;

      const vmArtifactsStarted = performance.now();
      const initrd = await this.buildInitrd(packages);
      const ext4Bytes = await this.buildRootImage();
      vmMs += performance.now() - vmArtifactsStarted;

      this.nextStep('writing the manifest and moving the image into place');
      const manifest: ImageManifest = {
        hash: this.hash,
        builderVersion: BUILDER_VERSION,
        recipe: this.recipe,
        builtAt: new Date().toISOString(),
        artifacts: { rootfs: ROOTFS, ext4: EXT4, kernel: KERNEL, initrd: INITRD },
        vm: {
          kernelPackage: packages.kernelPackage,
          kernelRelease: packages.kernelRelease,
          initrdModules: initrd.modules,
          initrdBytes: initrd.bytes,
          ext4Bytes,
        },
        durationsMs: {
          debootstrap: Math.round(debootstrapMs),
          configure: Math.round(configureMs),
          vm: Math.round(vmMs),
          total: Math.round(performance.now() - this.started),
        },
        rootfsBytes: await this.diskUsage(this.rootfs),
        // Last: nothing changes the rootfs after this (checked before each use, image-integrity.ts).
        contents: await writeContentIndex(this.tempDir, this.rootfs),
      };
      await writeFile(join(this.tempDir, MANIFEST), JSON.stringify(manifest, null, 2) + '\n', { mode: 0o644 });
      const image = await this.moveIntoPlace(force);
      this.report(
        `guest image ready: ${image.dir} (rootfs ${(manifest.rootfsBytes / 1e6).toFixed(0)} MB, ` +
          `kernel ${packages.kernelRelease}, initrd ${(initrd.bytes / 1e6).toFixed(1)} MB)`,
      );
      return image;
    } catch (error) {
      this.logLine(`build failed: ${error instanceof Error ? error.message : String(error)}`);
      await this.keepDebootstrapLog();
      await removeTree(this.tempDir).catch((cleanupError: unknown) => {
        this.report(`could not remove ${this.tempDir}: ${String(cleanupError)}; remove it by hand`);
      });
      throw error;
    } finally {
      await new Promise<void>((resolve) => (this.log ? this.log.end(resolve) : resolve()));
    }
  }

  private async debootstrap(): Promise<void> {
    const { suite, mirror, variant, packages } = this.recipe;
    this.nextStep(`debootstrap ${suite} from ${mirror} (${packages.length} extra packages)`);
    // Downloaded .debs are kept across builds (debootstrap verifies their checksums).
    const cacheDir = join(this.imagesDir, '.debs');
    await mkdir(cacheDir, { recursive: true, mode: 0o755 });
    const argv = [`--variant=${variant}`, `--include=${packages.join(',')}`, `--cache-dir=${cacheDir}`, suite, this.rootfs, mirror];
    try {
      await this.exec('debootstrap', argv, {
        // debootstrap's own status lines ("I: Retrieving ...") are the progress to show.
        onLine: (line) => {
          if (/^[IWE]: /.test(line)) this.report(line);
        },
      });
    } catch (error) {
      if (error instanceof CommandError && error.exitCode !== undefined) {
        throw new Error(
          `debootstrap failed (exit ${error.exitCode}): is ${mirror} reachable? ` +
            `${error.lastLines.length ? `last output: ${error.lastLines.join(' | ')}; ` : ''}see ${this.logPath}`,
        );
      }
      throw error;
    }
  }

  private async installAptPackages(): Promise<void> {
    const packages = this.recipe.aptPackages ?? [];
    if (packages.length === 0) return;
    this.nextStep(`apt-get install ${packages.length} packages`);
    const cacheDir = join(this.imagesDir, '.debs');
    await installWithApt(this.rootfs, packages, cacheDir, { inRoot: (argv, options) => this.inRoot(argv, options), report: (line) => this.report(line) });
  }

  private async createUser(): Promise<void> {
    const { name, uid, gid, home, shell } = this.recipe.user;
    this.nextStep(`creating user ${name} (${uid}:${gid})`);
    await this.inRoot(['groupadd', '--gid', String(gid), name]);
    // Password "*": no password can match, yet the account is not "locked" ("!"), which
    // sshd without PAM would refuse even for key logins.
    await this.inRoot([
      'useradd',
      ...['--uid', String(uid), '--gid', String(gid)],
      ...['--create-home', '--home-dir', home, '--shell', shell, '--password', '*'],
      name,
    ]);
  }

  private async removeHostKeys(): Promise<void> {
    this.nextStep('removing SSH host keys');
    // openssh-server's postinst generated them; every guest would share them. The
    // orchestrator's per-session key (in the config directory) is the only host key.
    await this.inRoot(['find', '/etc/ssh', '-maxdepth', '1', '-name', 'ssh_host_*', '-delete']);
    const left = (await readdir(join(this.rootfs, 'etc', 'ssh'))).filter((name) => name.startsWith('ssh_host_'));
    if (left.length > 0) throw new Error(`SSH host keys still in the image: ${left.join(', ')}`);
  }

  private async installFiles(): Promise<void> {
    this.nextStep(`installing ${this.recipe.files.map((file) => file.source).join(' and ')}`);
    for (const file of this.recipe.files) {
      const content = await readFile(join(guestFilesDir(), file.source));
      await this.inRoot(['mkdir', '-p', '-m', '0755', posix.dirname(file.target)]); // e.g. Firefox's distribution/
      await this.inRoot(['tee', file.target], { stdin: content });
      await this.inRoot(['chown', 'root:root', file.target]);
      await this.inRoot(['chmod', file.mode.toString(8), file.target]);
    }
    for (const link of this.recipe.links ?? []) {
      await this.inRoot(['mkdir', '-p', '-m', '0755', posix.dirname(link.path)]);
      await this.inRoot(['ln', '-sfn', link.target, link.path]);
    }
    await this.inRoot(['mkdir', '-p', '-m', '0755', this.recipe.configMount]);
    // GSettings defaults take effect only once compiled (the packages' trigger ran before).
    if (this.recipe.files.some((file) => file.target.startsWith(GSETTINGS_SCHEMAS))) {
      await this.inRoot(['/usr/lib/x86_64-linux-gnu/glib-2.0/glib-compile-schemas', GSETTINGS_SCHEMAS]);
    }
  }

  private async trim(): Promise<void> {
    this.nextStep('removing apt caches, docs, man pages and locales; refreshing the font cache');
    await trimRootfs((argv, options) => this.inRoot(argv, options));
  }

  /** The kernel and busybox packages, unpacked next to the rootfs (see vm-packages.ts). */
  private async fetchVmPackages(): Promise<VmPackages> {
    const { kernelPackage, busyboxPackage } = this.recipe.vm;
    this.nextStep(`fetching ${kernelPackage} and ${busyboxPackage} for the VM runtimes`);
    const packages = await fetchVmPackages(
      this.rootfs,
      join(this.tempDir, 'vm-packages'),
      { kernel: kernelPackage, busybox: busyboxPackage },
      { inRoot: (argv, onLine) => this.exec('chroot', [this.rootfs, ...argv], { onLine }) },
    );
    this.report(`kernel ${packages.kernelPackage} (${packages.kernelRelease})`);
    return packages;
  }

  /** vmlinuz and initrd.img into the image dir; the unpacked packages go. */
  private async buildInitrd(packages: VmPackages): Promise<{ bytes: number; modules: string[] }> {
    this.nextStep(`building the initrd (busybox, modules ${this.recipe.vm.initrdModules.join(', ')} and what they need)`);
    await copyFile(packages.vmlinuz, join(this.tempDir, KERNEL));
    const result = await buildInitrd(join(this.tempDir, INITRD), {
      busybox: packages.busybox,
      moduleTree: packages.moduleTree,
      modules: this.recipe.vm.initrdModules,
      defaultRoot: GUEST_ROOT_DEVICE,
      defaultInit: GUEST_INIT,
      rootWaitSeconds: INITRD_ROOT_WAIT_SECONDS,
    });
    this.report(`initrd: ${(result.bytes / 1e6).toFixed(2)} MB, loads ${result.modules.join(' ')}`);
    await rm(join(this.tempDir, 'vm-packages'), { recursive: true, force: true });
    return result;
  }

  /** rootfs.ext4: the finished rootfs as an ext4 image, read-only (VMs write to an overlay). */
  private async buildRootImage(): Promise<number> {
    // mkfs.ext4 -d keeps whole seconds only: make the tree agree, then the font cache with
    // it (see timestamps.ts). The container runtime's rootfs is the same tree, and agrees too.
    const changed = await truncateTimestamps(this.rootfs);
    this.logLine(`timestamps truncated to whole seconds: ${changed} entries`);
    await this.inRoot(['fc-cache', '--system-only']);
    const used = await this.diskUsage(this.rootfs);
    const size = rootImageSize(used, this.recipe.vm.rootHeadroomMiB);
    this.nextStep(`making ${EXT4} (${(size / 2 ** 20).toFixed(0)} MiB, sparse) with mkfs.ext4 -d`);
    const image = join(this.tempDir, EXT4);
    await createImageFile(image, 0o644);
    const [command, ...args] = mkfsExt4Argv({ source: this.rootfs, image, sizeBytes: size, label: 'sbx-root', journal: true });
    await this.exec(command as string, args);
    // Shared by every VM: nobody may write it, not even by mistake.
    await chmod(image, 0o444);
    return size;
  }

  private async setIdentity(): Promise<void> {
    this.nextStep(`setting hostname ${this.recipe.hostname}`);
    await this.inRoot(['tee', '/etc/hostname'], { stdin: Buffer.from(`${this.recipe.hostname}\n`) });
    // Like host keys, a machine id must not be shared by every guest.
    await this.inRoot(['find', '/etc', '-maxdepth', '1', '-name', 'machine-id', '-type', 'f', '-exec', 'truncate', '-s', '0', '{}', '+']);
    // debootstrap copies the build host's resolver config; it means nothing in a guest.
    await this.inRoot(['rm', '-f', '/etc/resolv.conf']);
  }

  private async moveIntoPlace(force: boolean): Promise<GuestImage> {
    const dir = join(this.imagesDir, this.hash);
    const image = imageAt(dir, this.hash, { rootfs: ROOTFS, ext4: EXT4, kernel: KERNEL, initrd: INITRD });
    if (force && (await isDirectory(dir))) {
      const old = join(this.imagesDir, `.old-${this.hash}-${process.pid}`);
      await rename(dir, old);
      await rename(this.tempDir, dir);
      await removeTree(old);
      return image;
    }
    try {
      await rename(this.tempDir, dir);
    } catch (error) {
      // Another process finished the same image first: use theirs, drop ours.
      if (isErrnoCode(error, 'ENOTEMPTY') || isErrnoCode(error, 'EEXIST')) {
        this.report(`another build of ${this.hash} finished first; using it`);
        await removeTree(this.tempDir);
        return image;
      }
      throw error;
    }
    return image;
  }

  /** debootstrap keeps its detailed log inside the target; save it before the target goes. */
  private async keepDebootstrapLog(): Promise<void> {
    try {
      const detail = await readFile(join(this.rootfs, 'debootstrap', 'debootstrap.log'), 'utf8');
      this.logLine('---- debootstrap/debootstrap.log ----');
      this.log?.write(detail);
    } catch {
      // debootstrap did not get far enough to write it.
    }
  }

  private async diskUsage(path: string): Promise<number> {
    let output = '';
    await this.exec('du', ['-sb', path], { onLine: (line) => (output = line) });
    return Number.parseInt(output, 10) || 0;
  }

  private inRoot(argv: string[], options: { stdin?: Buffer } = {}): Promise<void> {
    return this.exec('chroot', [this.rootfs, ...argv], options);
  }

  private exec(command: string, args: string[], options: ExecOptions = {}): Promise<void> {
    this.logLine(`$ ${command} ${args.join(' ')}`);
    return execLogged(command, args, {
      ...options,
      onLine: (line) => {
        this.logLine(line);
        options.onLine?.(line);
      },
    });
  }

  private nextStep(description: string): void {
    this.step += 1;
    const total = 10 + (this.recipe.aptPackages?.length ? 1 : 0);
    this.report(`[${this.step}/${total}] ${description}`);
  }

  private report(text: string): void {
    const elapsed = ((performance.now() - this.started) / 1000).toFixed(1).padStart(6);
    const line = `${elapsed}s ${text}`;
    this.logLine(line);
    this.progress(line);
  }

  private logLine(line: string): void {
    this.log?.write(line + '\n');
  }
}
