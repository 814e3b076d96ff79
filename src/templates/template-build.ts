/**
 * `sbx template build`: a user template built on its base's image (docs/templates.md).
 *
 * Every step that changes the image runs inside it, never as host root: each is a throwaway
 * container of our own (build-container.ts: a user namespace with a host id range of the
 * build's own, the image tree as its root through an idmapped mount, the sandboxes' seccomp
 * profile, no host devices, and no network but for apt's downloads), so every path resolves
 * inside the image and nothing it does reaches the host. The build goes to
 * .build-<hash>-<pid>/ and is renamed into place only once complete; a failure or Ctrl-C
 * removes it (removeTree unmounts anything left inside first), as does a step past its time
 * limit or a build past its own (a step that never ends held its build for good before).
 */
import { copyFile, mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { createHash } from 'node:crypto';
import { removeStaleBuilds, removeTree } from '../guest/image/build-dirs.js';
import { CommandError, execLogged, isErrnoCode } from '../guest/image/build-exec.js';
import { createImageFile, mkfsExt4Argv, rootImageSize } from '../guest/image/ext4-image.js';
import type { GuestImage } from '../guest/image/image-store.js';
import { truncateTimestamps } from '../guest/image/timestamps.js';
import { GUEST_GID, GUEST_UID } from '../guest/contract.js';
import { BuildContainer, StepTimeoutError } from './build-container.js';
import { BuildDiskBudget } from './build-disk.js';
import type { TemplateCatalogue } from './catalogue.js';
import { readTemplateFile, TemplateFileError, type TemplateDefinition } from './template-file.js';
import { readSources } from './template-sources.js';
import {
  IMAGE_ARTIFACTS,
  loadBuild,
  pointName,
  pruneOldBuilds,
  TEMPLATE_MANIFEST,
  templatesDir,
  type StoredTemplate,
  type TemplateManifest,
} from './template-store.js';

/** Bump when this file changes what it does to an image: every cached template is rebuilt. */
const TEMPLATE_BUILDER_VERSION = 1;
/** Where sandbox-init and sbx-user-shell read a template's env and autostart (as data). */
export const GUEST_TEMPLATE_DIR = '/etc/sandbox/template';
const ROOT_HEADROOM_MIB = 512;
/** Lines of a failed step's output quoted in its error. */
const TAIL_LINES = 15;

export interface TemplateBuildOptions {
  catalogue: TemplateCatalogue;
  onProgress?: (line: string) => void;
  /** Ctrl-C: the step running is killed and the half-built template removed. */
  signal?: AbortSignal;
  /** Rebuild even if this content's build exists. */
  force?: boolean;
  /** Most of the host's disk the build may take (build-disk.ts); DEFAULT_BUILD_MAX_DISK_BYTES if absent. */
  maxDiskBytes?: number;
  /** The orchestrator's sandbox subnets (SBX_SUBNET): the package downloads may not reach them (build-fence.ts). */
  sandboxSubnets: readonly string[];
  /** How long one command in the image may run; DEFAULT_STEP_TIMEOUT_MS if absent. */
  stepTimeoutMs?: number;
  /** How long the whole build may take; DEFAULT_BUILD_TIMEOUT_MS if absent. */
  buildTimeoutMs?: number;
}

/** A build's disk budget unless the operator says otherwise: the base's copy, packages, files and the VM disk. */
export const DEFAULT_BUILD_MAX_DISK_BYTES = 16 * 1024 ** 3;
/**
 * Time limits unless the operator says otherwise. A step is one command run in the image (a
 * `run` entry, one of apt's, a file's copy): one that never ends (`sleep infinity`, a server,
 * a prompt) would otherwise hold its build, its id range and its disk for good. Generous:
 * apt installing a desktop from a slow mirror takes minutes, not half an hour.
 */
export const DEFAULT_STEP_TIMEOUT_MS = 30 * 60_000;
export const DEFAULT_BUILD_TIMEOUT_MS = 60 * 60_000;

/** A build step that failed: its name and the tail of its output. */
export class TemplateBuildError extends Error {
  constructor(
    readonly step: string,
    readonly outputTail: string[],
    cause: string,
  ) {
    super(`step "${step}" failed: ${cause}${outputTail.length ? `\n--- last lines of its output ---\n${outputTail.join('\n')}` : ''}`);
    this.name = 'TemplateBuildError';
  }
}

/** Reads, checks and builds a template file; an up-to-date build is reused. */
export async function buildTemplateFile(file: string, opts: TemplateBuildOptions): Promise<StoredTemplate> {
  const definition = await readTemplateFile(file);
  const base = await opts.catalogue.resolve(definition.base).catch(() => undefined);
  if (!base) {
    const names = (await opts.catalogue.list()).map((t) => t.name).filter((n) => n !== definition.name);
    throw new TemplateFileError(file, [`base: unknown template "${definition.base}" (built-ins and built user templates: ${names.join(', ') || 'none'})`]);
  }
  if (opts.catalogue.isBuiltIn(definition.name)) throw new TemplateFileError(file, [`name: "${definition.name}" is a built-in template`]);
  const files = await readSources(file, definition);
  const hash = templateHash(definition, base.image.hash, files);
  const imagesDir = opts.catalogue.imagesDir;
  const progress = opts.onProgress ?? (() => {});
  const cached = opts.force ? undefined : await loadBuild(imagesDir, hash);
  if (cached) {
    await pointName(imagesDir, definition.name, hash);
    progress(`template ${definition.name} is up to date (${hash}); not rebuilt`);
    return cached;
  }
  if (process.getuid?.() !== 0) throw new Error('building a template needs root (chroot and namespaces); run as root');
  await mkdir(templatesDir(imagesDir), { recursive: true, mode: 0o755 });
  await removeStaleBuilds(templatesDir(imagesDir), progress);
  const build = new TemplateBuild(imagesDir, definition, base.image, hash, files, progress, opts);
  return build.run(opts.maxDiskBytes ?? DEFAULT_BUILD_MAX_DISK_BYTES);
}

/** sha256 of the builder version, the base's image hash, the definition and every file's bytes. */
export function templateHash(definition: TemplateDefinition, baseHash: string, files: readonly Buffer[]): string {
  const hash = createHash('sha256');
  hash.update(`template-builder ${TEMPLATE_BUILDER_VERSION}\nbase ${baseHash}\n${JSON.stringify(definition)}\n`);
  for (const [index, content] of files.entries()) {
    hash.update(`file ${index} ${content.length}\n`);
    hash.update(content);
  }
  return hash.digest('hex').slice(0, 16);
}

class TemplateBuild {
  private readonly started = performance.now();
  private readonly tempDir: string;
  private readonly rootfs: string;
  private container: BuildContainer | undefined;
  private disk: BuildDiskBudget | undefined;
  private step = 0;
  /** copy, packages, files, run, guest settings, VM artifacts, move into place. */
  private readonly totalSteps = 7;
  /** Aborted at the build's time limit; `signal` is it or Ctrl-C, whichever comes first. */
  private readonly deadline = new AbortController();
  private readonly signal: AbortSignal;
  private readonly userSignal: AbortSignal | undefined;
  private readonly stepTimeoutMs: number;
  private readonly buildTimeoutMs: number;
  /** The command running in the image, as its error names it. */
  private command = '';

  constructor(
    private readonly imagesDir: string,
    private readonly def: TemplateDefinition,
    private readonly base: GuestImage,
    private readonly hash: string,
    private readonly files: readonly Buffer[],
    private readonly progress: (line: string) => void,
    private readonly opts: TemplateBuildOptions,
  ) {
    this.userSignal = opts.signal;
    this.signal = opts.signal ? AbortSignal.any([opts.signal, this.deadline.signal]) : this.deadline.signal;
    // A timer fires at once past 2^31 - 1 ms: a longer limit is that one.
    this.stepTimeoutMs = Math.min(opts.stepTimeoutMs ?? DEFAULT_STEP_TIMEOUT_MS, 2 ** 31 - 1);
    this.buildTimeoutMs = Math.min(opts.buildTimeoutMs ?? DEFAULT_BUILD_TIMEOUT_MS, 2 ** 31 - 1);
    this.tempDir = path.join(templatesDir(imagesDir), `.build-${hash}-${process.pid}`);
    this.rootfs = path.join(this.tempDir, IMAGE_ARTIFACTS.rootfs);
  }

  async run(maxDiskBytes: number): Promise<StoredTemplate> {
    // The whole build's limit: the step running then is killed as by Ctrl-C (a host command too: cp, mkfs).
    const timer = setTimeout(() => this.deadline.abort(), this.buildTimeoutMs);
    try {
      this.report(`building template ${this.def.name} (${this.hash}) on ${this.def.base} (${this.base.hash})`);
      await removeTree(this.tempDir);
      await mkdir(this.tempDir, { recursive: true, mode: 0o755 });
      this.disk = await BuildDiskBudget.start(this.tempDir, maxDiskBytes);
      this.report(`  disk budget: ${this.disk.describe()}`);
      await this.stepDo(`copy the base image's rootfs (${this.def.base})`, () => this.exec(['cp', '-a', '--reflink=auto', this.base.rootfs, this.rootfs]));
      this.container = await BuildContainer.open(this.rootfs, this.tempDir, {
        sandboxSubnets: this.opts.sandboxSubnets,
        signal: this.signal,
        disk: this.disk,
        stepTimeoutMs: this.stepTimeoutMs,
      });
      try {
        await this.stepDo(`install packages: ${this.def.packages.join(' ') || '(none)'}`, () => this.installPackages());
        await this.stepDo(`copy ${this.def.files.length} file(s)`, () => this.copyFiles());
        await this.stepDo(`run ${this.def.run.length} command(s)`, () => this.runCommands());
        await this.stepDo('write env and autostart for sandbox-init', () => this.writeGuestSettings());
      } finally {
        await this.container.close();
      }
      let ext4Bytes = 0;
      await this.stepDo('make rootfs.ext4 and copy the kernel and initrd', async () => (ext4Bytes = await this.vmArtifacts()));
      this.nextStep('write the manifest and move the template into place');
      const manifest: TemplateManifest = {
        name: this.def.name,
        hash: this.hash,
        base: this.def.base,
        baseHash: this.base.hash,
        definition: this.def,
        builtAt: new Date().toISOString(),
        rootfsBytes: await this.diskUsage(this.rootfs),
        ext4Bytes,
        durationMs: Math.round(performance.now() - this.started),
      };
      await writeFile(path.join(this.tempDir, TEMPLATE_MANIFEST), JSON.stringify(manifest, null, 2) + '\n', { mode: 0o644 });
      const dir = path.join(templatesDir(this.imagesDir), this.hash);
      await rename(this.tempDir, dir).catch(async (err: unknown) => {
        // Another build of the same content finished first: keep theirs.
        if (!isErrnoCode(err, 'ENOTEMPTY') && !isErrnoCode(err, 'EEXIST')) throw err;
        await removeTree(this.tempDir);
      });
      await pointName(this.imagesDir, this.def.name, this.hash);
      await pruneOldBuilds(this.imagesDir, this.def.name, this.hash, (line) => this.report(line));
      const built = await loadBuild(this.imagesDir, this.hash);
      if (!built) throw new Error(`the template build in ${dir} is incomplete`);
      this.report(`template ${this.def.name} ready: ${dir} (rootfs ${(manifest.rootfsBytes / 1e6).toFixed(0)} MB)`);
      return built;
    } catch (err) {
      await removeTree(this.tempDir).catch((cleanupError: unknown) => {
        this.report(`could not remove ${this.tempDir}: ${String(cleanupError)}; remove it by hand`);
      });
      throw err;
    } finally {
      clearTimeout(timer);
    }
  }

  private async stepDo(name: string, work: () => Promise<unknown>): Promise<void> {
    this.nextStep(name);
    try {
      if (this.signal.aborted) throw new Error('aborted');
      await work();
    } catch (err) {
      const lines = err instanceof CommandError ? err.lastLines : [];
      if (this.userSignal?.aborted) throw new TemplateBuildError(name, [], 'interrupted');
      if (this.deadline.signal.aborted)
        throw new TemplateBuildError(
          name,
          lines,
          `the build was still running at its time limit of ${duration(this.buildTimeoutMs)} (--build-timeout-seconds, SBX_TEMPLATE_BUILD_TIMEOUT_SECONDS): ` +
            `what ran was killed and the build removed. A build that needs longer: raise the limit; one that waits forever: fix the step that does`,
        );
      if (err instanceof StepTimeoutError)
        throw new TemplateBuildError(
          name,
          lines,
          `${this.command} was still running at the step time limit of ${duration(err.limitMs)} (--step-timeout-seconds, SBX_TEMPLATE_BUILD_STEP_TIMEOUT_SECONDS): ` +
            `it was killed with every process it started, and the build removed. A step that needs longer: raise the limit; ` +
            `one that waits for input or never ends (a server, sleep infinity): change it so that it exits`,
        );
      if (err instanceof CommandError) throw new TemplateBuildError(name, err.lastLines, err.exitCode === undefined ? err.message : `exit ${err.exitCode}`);
      throw new TemplateBuildError(name, [], err instanceof Error ? err.message : String(err));
    }
  }

  private async installPackages(): Promise<void> {
    if (this.def.packages.length === 0) return;
    // apt needs a resolver inside the image for the duration of this step (the base image has
    // none: a guest's means nothing), and must not start the daemons it installs. Written from
    // inside: a symlink the base left at /etc/resolv.conf resolves in the image, not on the host.
    await this.inImage(['tee', '/etc/resolv.conf'], { stdin: await readFile('/etc/resolv.conf'), quiet: true });
    await this.inImage(['tee', '/usr/sbin/policy-rc.d'], { stdin: Buffer.from('#!/bin/sh\nexit 101\n'), quiet: true });
    await this.inImage(['chmod', '0755', '/usr/sbin/policy-rc.d']);
    const install = ['apt-get', 'install', '-y', '-q', '--no-install-recommends'];
    try {
      // Only the downloads get the network; the packages' maintainer scripts run without it.
      await this.inImage(['apt-get', 'update', '-q'], { network: true });
      await this.inImage([...install, '--download-only', '--', ...this.def.packages], { network: true });
      await this.inImage([...install, '--', ...this.def.packages]);
      await this.inImage(['apt-get', 'clean']);
      await this.inImage(['find', '/var/lib/apt/lists', '-type', 'f', '-delete']);
    } finally {
      await this.inImage(['rm', '-f', '/usr/sbin/policy-rc.d', '/etc/resolv.conf']).catch(() => undefined);
    }
  }

  private async copyFiles(): Promise<void> {
    for (const [index, entry] of this.def.files.entries()) {
      const content = this.files[index] ?? Buffer.alloc(0);
      // Through the image's own tools, so that the target (and any symlink on its way)
      // resolves inside the image; one step per file (the values are arguments, not code).
      const owner = entry.owner === 'user' ? `${GUEST_UID}:${GUEST_GID}` : '0:0';
      const script = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1" && chown -- "$2" "$1" && chmod -- "$3" "$1"';
      await this.inImage(
        ['/bin/sh', '-c', script, 'sh', entry.target, owner, entry.mode],
        { stdin: content, quiet: true },
        `files[${index}] (to ${entry.target})`,
      );
    }
  }

  private async runCommands(): Promise<void> {
    for (const [index, command] of this.def.run.entries()) {
      const argv = typeof command === 'string' ? ['/bin/sh', '-c', command] : command;
      const shown = `run[${index}]: ${typeof command === 'string' ? command : JSON.stringify(command)}`;
      this.report(`  ${shown}`);
      await this.inImage(argv, {}, shown);
    }
  }

  private async writeGuestSettings(): Promise<void> {
    await this.inImage(['mkdir', '-p', '-m', '0755', `${GUEST_TEMPLATE_DIR}/autostart`]);
    const env = Object.entries(this.def.env)
      .map(([name, value]) => `${name}=${value}\n`)
      .join('');
    await this.inImage(['tee', `${GUEST_TEMPLATE_DIR}/env`], { stdin: Buffer.from(env), quiet: true });
    for (const [index, argv] of this.def.autostart.entries()) {
      const file = `${GUEST_TEMPLATE_DIR}/autostart/${String(index).padStart(2, '0')}`;
      await this.inImage(['tee', file], { stdin: Buffer.from(argv.join('\0') + '\0'), quiet: true });
    }
  }

  /** The VM runtimes' disk; the base's kernel and initrd serve unchanged (no modules in the rootfs). */
  private async vmArtifacts(): Promise<number> {
    await truncateTimestamps(this.rootfs);
    const size = rootImageSize(await this.diskUsage(this.rootfs), ROOT_HEADROOM_MIB);
    if (this.disk && !(await this.disk.fits(size)))
      throw new Error(`its VM disk (${Math.round(size / 1024 ** 2)} MiB) would take the build past its disk budget of ${this.disk.describe()}`);
    const image = path.join(this.tempDir, IMAGE_ARTIFACTS.ext4);
    await createImageFile(image, 0o644);
    await this.exec(mkfsExt4Argv({ source: this.rootfs, image, sizeBytes: size, label: 'sbx-root', journal: true }));
    await execLogged('chmod', ['0444', image], {});
    await copyFile(this.base.kernel, path.join(this.tempDir, IMAGE_ARTIFACTS.kernel));
    await copyFile(this.base.initrd, path.join(this.tempDir, IMAGE_ARTIFACTS.initrd));
    return size;
  }

  /**
   * argv run as the image's root in a build container (build-container.ts): no network unless
   * it is one of apt's downloads. quiet: tee echoes what it writes; a template's files are not progress.
   */
  private inImage(argv: readonly string[], options: { stdin?: Buffer; network?: boolean; quiet?: boolean } = {}, shown?: string): Promise<void> {
    if (!this.container) throw new Error('the build container is not open');
    this.command = shown ?? `\`${argv.join(' ')}\``;
    const onLine = options.quiet ? undefined : (line: string) => this.progress(`    ${line}`);
    return this.container.run(argv, { stdin: options.stdin, network: options.network, onLine, tailLines: TAIL_LINES });
  }

  private exec(argv: readonly string[], stdin?: Buffer, show = true): Promise<void> {
    const [command, ...args] = argv;
    const onLine = show ? (line: string) => this.progress(`    ${line}`) : undefined;
    return execLogged(command as string, args, { stdin, signal: this.signal, tailLines: TAIL_LINES, onLine });
  }

  private async diskUsage(dir: string): Promise<number> {
    let output = '';
    await execLogged('du', ['-sb', dir], { onLine: (line) => (output = line) });
    return Number.parseInt(output, 10) || 0;
  }

  private nextStep(description: string): void {
    this.step += 1;
    this.report(`[${this.step}/${this.totalSteps}] ${description}`);
  }

  private report(text: string): void {
    this.progress(`${((performance.now() - this.started) / 1000).toFixed(1).padStart(6)}s ${text}`);
  }
}

/** A time limit as a person reads it: "2 s", "90 s", "30 min", "2.5 h". */
export function duration(ms: number): string {
  const s = ms / 1000;
  if (s < 120 || s % 60 !== 0) return `${+s.toFixed(1)} s`;
  const min = s / 60;
  return min < 120 ? `${min} min` : `${+(min / 60).toFixed(2)} h`;
}
