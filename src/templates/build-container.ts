/**
 * Where a template build runs what it does to the image: a throwaway runc container per step,
 * confined as a sandbox is (oci-spec.ts, seccomp.ts), never host root.
 *
 * - A user namespace with a host id range of the build's own: one of BUILD_ID_RANGES above
 *   every prefix's block of sandbox ranges (id-leases.ts buildIdBase), leased host-wide like
 *   the sandboxes' and used by no process when taken. The step's root is a host uid with no
 *   capability on the host.
 * - The image tree is the container's root through an idmapped mount (idmapped-mount.ts):
 *   the step's root sees the tree as its own, and what it writes lands on disk owned by
 *   root (its uid u is stored as u), so the built image is the one a chroot made.
 * - Capabilities a package manager needs (BUILD_CAPABILITIES), all bounded by that user
 *   namespace; the sandboxes' seccomp allow-list (no mount, unshare, bpf, ...); no new
 *   privileges; a pids limit.
 * - Devices: a /dev of its own with the harmless default nodes, and a device cgroup that
 *   refuses every other node, even one found in the image; an empty read-only /sys; /proc
 *   of its own with /proc/sys read-only.
 * - Network: a namespace of its own with only loopback, except for the package steps that
 *   download (apt-get update and install --download-only), which share the host's network
 *   namespace, still without any privilege over it, and fenced: nftables drops what the
 *   builds' uids send to any of the host's own addresses, loopback included, and to every
 *   range that is not the internet (private networks, the cloud's metadata service, the
 *   sandboxes, the configured sandbox subnet whatever its range), but DNS (build-fence.ts), so
 *   no host service (the orchestrator's API in keyless loopback mode among them), other
 *   sandbox or LAN is reachable from a base image's apt.
 * - Time: a step still running at its limit (stepTimeoutMs) is killed as Ctrl-C kills it, the
 *   whole container (every process of its pid namespace), and fails with StepTimeoutError.
 */
import { existsSync } from 'node:fs';
import { mkdir, open, readFile, readdir, rename, rm, rmdir, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { CommandError, execLogged } from '../guest/image/build-exec.js';
import { unmount } from '../host/mounts.js';
import { mountIdmapped, type IdRange } from '../runtimes/container/idmapped-mount.js';
import { GUEST_CAPABILITIES, KERNEL_MOUNTS, MASKED_PATHS, READONLY_PATHS } from '../runtimes/container/oci-spec.js';
import { userNamespaceHook } from '../runtimes/container/namespace-limits.js';
import { seccompProfile } from '../runtimes/container/seccomp.js';
import { buildIdBase, liveHostIdRanges, type LeaseOwner } from '../runtimes/container/id-leases.js';
import { DEFAULT_ID_LEASE_DIR, ID_RANGE_SIZE } from '../runtimes/container/settings.js';
import { run } from '../util/exec.js';
import { WATCH_INTERVAL_MS, type BuildDiskBudget } from './build-disk.js';
import { fenceHostFromBuilds } from './build-fence.js';

/** runc's state for build containers (gone at reboot, as are the containers). */
export const BUILD_RUNC_ROOT = '/run/sbx-template-build';
/** Concurrent builds on a host, at most (each takes a range). */
export const BUILD_ID_RANGES = 8;
const CGROUP_PARENT = '/sbx-template-build';
/** The hostname a step sees (its own UTS namespace). */
export const BUILD_HOSTNAME = 'template-build';
/** Processes a step may have at once: apt needs a few dozen; a fork bomb stops here. */
const STEP_PIDS_LIMIT = 1024;
/** inotify instances and watches per uid of a step's user namespace (a session's defaults). */
const STEP_INOTIFY_LIMITS = { inotifyInstances: 128, inotifyWatches: 16384 };

/**
 * The sandboxes' set, plus what dpkg needs to install packages as Debian ships them:
 * CAP_FSETID (a setgid file whose group the installer is not in keeps its bit) and
 * CAP_SETFCAP (file capabilities, e.g. ping's). All of them count inside the user namespace only.
 */
export const BUILD_CAPABILITIES = [...GUEST_CAPABILITIES, 'CAP_FSETID', 'CAP_SETFCAP'];

const STEP_ENV = ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', 'HOME=/root', 'LC_ALL=C', 'DEBIAN_FRONTEND=noninteractive'];

/** What a build's containers are given (see BuildContainer.open). */
export interface BuildContainerOptions {
  /** The orchestrator's sandbox subnets (SBX_SUBNET), fenced off from the downloads whatever their range. */
  sandboxSubnets: readonly string[];
  /** Ctrl-C, or the build's own time limit: the running step's container is killed. */
  signal?: AbortSignal;
  disk?: BuildDiskBudget;
  /** How long one step (one container) may run; none if absent. */
  stepTimeoutMs?: number;
}

/** A step still running at its time limit: its container was killed. */
export class StepTimeoutError extends CommandError {
  constructor(
    readonly limitMs: number,
    lastLines: string[],
  ) {
    super(`still running at its time limit of ${limitMs} ms: its container was killed`, undefined, lastLines);
    this.name = 'StepTimeoutError';
  }
}

export interface StepOptions {
  stdin?: Buffer;
  /** Share the host's network namespace (package downloads only). */
  network?: boolean;
  onLine?: (line: string) => void;
  tailLines?: number;
}

/** The runtime-spec config.json of one build step. */
export function buildStepSpec(opts: { root: string; argv: readonly string[]; ids: IdRange; network: boolean; cgroupsPath: string }): Record<string, unknown> {
  const idMap = [{ containerID: 0, hostID: opts.ids.first, size: opts.ids.size }];
  const caps = BUILD_CAPABILITIES;
  return {
    ociVersion: '1.0.2',
    root: { path: opts.root, readonly: false },
    hostname: BUILD_HOSTNAME,
    process: {
      terminal: false,
      user: { uid: 0, gid: 0 },
      args: [...opts.argv],
      env: STEP_ENV,
      cwd: '/',
      capabilities: { bounding: caps, effective: caps, permitted: caps },
      rlimits: [{ type: 'RLIMIT_NOFILE', hard: 4096, soft: 4096 }],
      noNewPrivileges: true,
    },
    mounts: KERNEL_MOUNTS,
    // Its user namespace's inotify limits, as a session's: a step runs anyone's code.
    hooks: { createRuntime: [userNamespaceHook(STEP_INOTIFY_LIMITS, 1)] },
    linux: {
      namespaces: [
        { type: 'pid' },
        { type: 'ipc' },
        { type: 'uts' },
        { type: 'mount' },
        { type: 'cgroup' },
        { type: 'user' },
        ...(opts.network ? [] : [{ type: 'network' }]),
      ],
      uidMappings: idMap,
      gidMappings: idMap,
      cgroupsPath: opts.cgroupsPath,
      resources: { pids: { limit: STEP_PIDS_LIMIT }, devices: [{ allow: false, access: 'rwm' }] },
      seccomp: seccompProfile(),
      maskedPaths: MASKED_PATHS,
      readonlyPaths: READONLY_PATHS,
    },
  };
}

/** One build's steps: its id range, the idmapped view of its image tree, and its containers. */
export class BuildContainer {
  private steps = 0;

  private constructor(
    private readonly view: string,
    private readonly bundles: string,
    private readonly ids: IdRange,
    private readonly lease: string,
    private readonly options: BuildContainerOptions,
  ) {}

  private get signal(): AbortSignal | undefined {
    return this.options.signal;
  }

  /**
   * Leases an id range and mounts `rootfs` idmapped onto it at `<workDir>/view` (inside the
   * build's directory, so that removing a failed build unmounts it: build-dirs.ts removeTree).
   * Installs the builds' network fence first (build-fence.ts), with `sandboxSubnets`.
   */
  static async open(rootfs: string, workDir: string, options: BuildContainerOptions): Promise<BuildContainer> {
    await assertCrossable(workDir);
    await mkdir(BUILD_RUNC_ROOT, { recursive: true, mode: 0o700 });
    await removeStaleContainers();
    const first = buildIdBase();
    await fenceHostFromBuilds({ first, last: first + BUILD_ID_RANGES * ID_RANGE_SIZE - 1 }, options.sandboxSubnets);
    const { ids, lease } = await leaseRange();
    try {
      const view = path.join(workDir, 'view');
      const bundles = path.join(workDir, 'bundles');
      await mkdir(bundles, { recursive: true, mode: 0o700 });
      await mountIdmapped(ids, [{ source: rootfs, target: view }], { writable: true });
      return new BuildContainer(view, bundles, ids, lease, options);
    } catch (err) {
      await rm(lease, { force: true });
      throw err;
    }
  }

  /** Runs argv as the image's root in a container of its own; rejects as execLogged does. */
  async run(argv: readonly string[], options: StepOptions = {}): Promise<void> {
    if (this.signal?.aborted) throw new CommandError('interrupted', undefined, []);
    this.steps += 1;
    const id = `build-${process.pid}-${this.steps}`;
    const bundle = path.join(this.bundles, String(this.steps));
    await mkdir(bundle, { mode: 0o700 });
    const spec = buildStepSpec({ root: this.view, argv, ids: this.ids, network: options.network === true, cgroupsPath: `${CGROUP_PARENT}/${id}` });
    await writeFile(path.join(bundle, 'config.json'), JSON.stringify(spec), { mode: 0o600 });
    // The step is its pid namespace's init, which ignores SIGTERM: Ctrl-C kills the container,
    // again until `runc run` returns (an abort while runc is still creating it finds none yet).
    let finished = false;
    const kill = async () => {
      while (!finished) {
        await deleteContainer(id);
        if (!finished) await sleep(200);
      }
    };
    const onAbort = () => void kill();
    this.signal?.addEventListener('abort', onAbort, { once: true });
    // Past its time limit, or the build's disk budget (build-disk.ts), the step is killed as an abort would.
    let timedOut = false;
    const limitMs = this.options.stepTimeoutMs;
    const timer =
      limitMs === undefined
        ? undefined
        : setTimeout(() => {
            timedOut = true;
            void kill();
          }, limitMs);
    let overBudget = false;
    const disk = this.options.disk;
    const watch = disk
      ? setInterval(() => {
          void disk.exceeded().then(
            (over) => {
              if (over && !overBudget) {
                overBudget = true;
                void kill();
              }
            },
            () => undefined,
          );
        }, WATCH_INTERVAL_MS)
      : undefined;
    try {
      if (this.signal?.aborted) throw new CommandError('interrupted', undefined, []);
      await execLogged('runc', ['--root', BUILD_RUNC_ROOT, 'run', '--bundle', bundle, id], {
        stdin: options.stdin,
        onLine: options.onLine,
        tailLines: options.tailLines,
      }).catch((err: unknown) => {
        if (timedOut && limitMs !== undefined) throw new StepTimeoutError(limitMs, err instanceof CommandError ? err.lastLines : []);
        throw overBudget && disk ? overBudgetError(disk, err) : err;
      });
      if (disk && (await disk.exceeded())) throw overBudgetError(disk, undefined);
    } finally {
      clearInterval(watch);
      clearTimeout(timer);
      finished = true;
      this.signal?.removeEventListener('abort', onAbort);
      await deleteContainer(id);
      await rm(bundle, { recursive: true, force: true });
    }
  }

  /** Unmounts the view and gives the id range back; idempotent. */
  async close(): Promise<void> {
    await unmount(this.view);
    // Never a recursive delete here: were the view still mounted, it would empty the image.
    await rmdir(this.view).catch(() => undefined);
    await rm(this.bundles, { recursive: true, force: true });
    await rm(this.lease, { force: true });
  }
}

function overBudgetError(disk: BuildDiskBudget, err: unknown): CommandError {
  const lines = err instanceof CommandError ? err.lastLines : [];
  return new CommandError(`the build took more of the host's disk than its budget of ${disk.describe()}; the step was stopped`, undefined, lines);
}

/**
 * The step's root is no host user: runc, inside its user namespace, must cross every
 * directory down to the view. A 0700 one on the way (an images dir made private) would fail
 * every step with "permission denied"; this says which directory instead.
 */
async function assertCrossable(dir: string): Promise<void> {
  for (let current = path.resolve(dir); ; current = path.dirname(current)) {
    const info = await stat(current);
    if ((info.mode & 0o001) === 0)
      throw new Error(
        `${current} is not searchable by other users (mode ${(info.mode & 0o777).toString(8)}); a template build's steps run as no host user and must cross it: chmod o+x ${current}`,
      );
    if (current === path.dirname(current)) return;
  }
}

async function deleteContainer(id: string): Promise<void> {
  await run(['runc', '--root', BUILD_RUNC_ROOT, 'delete', '--force', id], { allowFailure: true, timeoutMs: 15_000 });
}

/**
 * Takes a build range host-wide, in the sandboxes' lease directory (id-leases.ts): a file
 * named after its first id, created with O_EXCL, naming this process as its holder (its
 * /proc directory as the "state dir": the lease is stale once the process is gone). A range
 * any process has in its uid_map is never taken, leased or not.
 */
async function leaseRange(): Promise<{ ids: IdRange; lease: string }> {
  await mkdir(DEFAULT_ID_LEASE_DIR, { recursive: true, mode: 0o700 });
  const live = await liveHostIdRanges();
  const mine: LeaseOwner = { stateDir: `/proc/${process.pid}`, sessionId: 'template-build', prefix: 'template-build' };
  for (let slot = 0; slot < BUILD_ID_RANGES; slot++) {
    const first = buildIdBase() + slot * ID_RANGE_SIZE;
    if (live.some((r) => r.first < first + ID_RANGE_SIZE && first < r.first + r.size)) continue;
    const lease = path.join(DEFAULT_ID_LEASE_DIR, String(first));
    try {
      const handle = await open(lease, 'wx', 0o600);
      await handle.writeFile(JSON.stringify(mine));
      await handle.close();
      return { ids: { first, size: ID_RANGE_SIZE }, lease };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    // Held: taken over only from a build process that is gone (and, above, used by none).
    const held = JSON.parse(await readFile(lease, 'utf8').catch(() => '{}')) as Partial<LeaseOwner>;
    if (held.sessionId !== 'template-build' || !held.stateDir || existsSync(held.stateDir)) continue;
    await writeFile(`${lease}.${process.pid}.tmp`, JSON.stringify(mine), { mode: 0o600 });
    await rename(`${lease}.${process.pid}.tmp`, lease);
    return { ids: { first, size: ID_RANGE_SIZE }, lease };
  }
  throw new Error(`all ${BUILD_ID_RANGES} template build id ranges are in use (see ${DEFAULT_ID_LEASE_DIR}): too many builds at once`);
}

/** Containers left by a build process that is gone (killed while a step ran). */
async function removeStaleContainers(): Promise<void> {
  for (const name of await readdir(BUILD_RUNC_ROOT).catch(() => [] as string[])) {
    const match = /^build-(\d+)-\d+$/.exec(name);
    if (match && !isAlive(Number(match[1]))) await deleteContainer(name);
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
